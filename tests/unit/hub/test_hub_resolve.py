"""Model resolution through the real huggingface_hub client against the local Hub stand-in (HF_ENDPOINT).

Every fixture repo resolves (commit sha, config.json, safetensors headers by byte range) and plans with no
architecture and no weights in the spec; errors are typed; no tensor data is read.
"""

from __future__ import annotations

import json
import struct
from pathlib import Path

import pytest
import yaml
from ctxfit.api import InferenceServerSpec
from ctxfit.budget.planner import plan
from ctxfit.catalog import lookup_model
from ctxfit.hub import ResolveError, ResolveKind, resolve_hub, resolve_local
from ctxfit.vocab.hfconfig import architecture_from_hf_config

from tests.hubfixtures.repos import FIXTURES, HUB, fixture_entries, fixture_repo
from tests.hubfixtures.server import TOKEN, HubStandIn, hub_env, shared_hub

FAST = [r for r in fixture_entries() if r != "deepseek-ai/DeepSeek-V3"]


@pytest.fixture(autouse=True)
def _env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    for key, value in hub_env(str(tmp_path)).items():
        monkeypatch.setenv(key, value)
    monkeypatch.delenv("HF_TOKEN", raising=False)


def _spec(repo: str) -> InferenceServerSpec:
    gpus = 8
    return InferenceServerSpec.model_validate({
        "model": {"name": repo}, "engine": {"kind": "vllm", "version": "0.19.0"},
        "gpu": {"product": "NVIDIA-H100-80GB-HBM3", "count": gpus}, "parallelism": {"tensor": gpus},
        "context": {"target": 4096}})


@pytest.mark.parametrize("repo", FAST)
def test_every_fixture_repo_resolves_and_plans(repo: str) -> None:
    hub = shared_hub()
    source = resolve_hub(repo, token=TOKEN, endpoint=hub.url)
    fixture = fixture_repo(repo)
    assert source.commit == fixture.sha
    assert source.checkpoint is not None
    assert source.checkpoint.tensor_bytes == sum(t.nbytes for t in fixture.tensors)
    result = plan(_spec(repo), model=source)
    assert result.per_gpu.weights_bytes > 0
    assert any("resolved from hub" in r for r in result.reasons)


def test_seven_shard_repo_reads_under_two_mib_of_weight_files() -> None:
    hub = HubStandIn().start()
    try:
        repo = "Qwen/Qwen3-32B"  # 17 shards: more than the 7 of the bound
        resolve_hub(repo, endpoint=hub.url)
        assert hub.weight_bytes_served() < 17 / 7 * 2 * 2**20
        assert hub.weight_bytes_served() < 0.001 * fixture_repo(repo).checkpoint().tensor_bytes
    finally:
        hub.stop()


def test_errors_are_typed() -> None:
    hub = shared_hub()
    with pytest.raises(ResolveError) as gated:
        resolve_hub("meta-llama/Llama-3.1-8B", endpoint=hub.url)
    assert gated.value.kind is ResolveKind.ACCESS_DENIED
    assert "token" in gated.value.line()
    assert resolve_hub("meta-llama/Llama-3.1-8B", token=TOKEN, endpoint=hub.url).commit
    with pytest.raises(ResolveError) as missing:
        resolve_hub("acme/no-such-model", endpoint=hub.url)
    assert missing.value.kind is ResolveKind.NOT_FOUND
    with pytest.raises(ResolveError) as revision:
        resolve_hub("Qwen/Qwen3-8B", revision="no-such-branch", endpoint=hub.url)
    assert revision.value.kind is ResolveKind.REVISION_NOT_FOUND
    pinned = resolve_hub("Qwen/Qwen3-8B", revision=fixture_repo("Qwen/Qwen3-8B").sha, endpoint=hub.url)
    assert pinned.commit == fixture_repo("Qwen/Qwen3-8B").sha


def test_hub_down_is_unreachable_then_offline_uses_the_kept_resolution() -> None:
    hub = HubStandIn().start()
    try:
        hub.down = True
        with pytest.raises(ResolveError) as down:
            resolve_hub("Qwen/Qwen3-8B", endpoint=hub.url)
        assert down.value.kind is ResolveKind.HUB_UNREACHABLE and down.value.kind.waiting
        hub.down = False
        online = resolve_hub("Qwen/Qwen3-8B", endpoint=hub.url)
    finally:
        hub.stop()
    offline = resolve_hub("Qwen/Qwen3-8B", endpoint=hub.url, offline=True)
    assert offline.origin == "cache" and offline.commit == online.commit
    assert offline.checkpoint == online.checkpoint
    # another endpoint (the public Hub, another mirror) may serve another repo under this name: not its resolution
    with pytest.raises(ResolveError) as elsewhere:
        resolve_hub("Qwen/Qwen3-8B", endpoint="https://mirror.example.internal", offline=True)
    assert elsewhere.value.kind is ResolveKind.OFFLINE
    with pytest.raises(ResolveError) as uncached:
        resolve_hub("Qwen/Qwen3-14B", offline=True)
    assert uncached.value.kind is ResolveKind.OFFLINE


def test_model_dir_reads_headers_only(tmp_path: Path) -> None:
    fixture = fixture_repo("Qwen/Qwen2.5-7B")
    for name, f in fixture.files.items():
        path = tmp_path / name
        if f.header:
            with path.open("wb") as out:
                out.write(f.header)
                out.truncate(f.size)  # sparse: the data region is never written nor read
        else:
            path.write_bytes(f.content)
    source = resolve_local(tmp_path)
    assert source.checkpoint is not None and source.checkpoint.tensor_bytes == 15231233024
    broken = tmp_path / "model-00001-of-00004.safetensors"
    broken.write_bytes(struct.pack("<Q", 10) + b"{not json}")
    with pytest.raises(ResolveError) as bad:
        resolve_local(tmp_path)
    assert bad.value.kind is ResolveKind.INVALID_CHECKPOINT


def test_bin_only_checkpoint_falls_back_to_file_sizes(tmp_path: Path) -> None:
    (tmp_path / "config.json").write_text(fixture_repo("Qwen/Qwen3-0.6B").files["config.json"].content.decode())
    with (tmp_path / "pytorch_model.bin").open("wb") as f:
        f.truncate(988 * 2**20)
    source = resolve_local(tmp_path)
    spec = _spec("Qwen/Qwen3-0.6B").model_copy(update={"gpu": _spec("x").gpu.model_copy(
        update={"count": 1}), "parallelism": _spec("x").parallelism.model_copy(update={"tensor": 1})})
    result = plan(spec, model=source)
    assert result.per_gpu.weights_bytes == 988 * 2**20
    assert any("no safetensors" in r for r in result.reasons)


def _catalog_configs() -> dict[str, Path]:
    """Catalog model -> a real config.json of it: the fixture repos in the catalog (by name or alias) and
    models.yaml ``catalogConfigs``."""
    doc = yaml.safe_load(FIXTURES.read_text(encoding="utf-8"))
    out = {r: HUB / "configs" / e["config"] for r, e in fixture_entries().items() if lookup_model(r) is not None}
    out |= {e["name"]: HUB / "configs" / e["config"] for e in doc.get("catalogConfigs") or []}
    return out


def test_catalog_configs_cover_most_of_the_catalog() -> None:
    """10 of the 16 entries; no real config.json was found for Kimi-K2-Instruct-0905, DeepSeek-V3.2-Exp, GLM-4.6,
    Qwen3-Next-80B-A3B, Jamba-1.5-Mini and Nemotron-H-8B."""
    covered = {lookup_model(name).name for name in _catalog_configs()}  # type: ignore[union-attr]
    assert len(covered) >= 10, sorted(covered)


@pytest.mark.parametrize("repo", sorted(_catalog_configs()))
def test_catalog_entry_equals_resolution_of_its_config(repo: str) -> None:
    entry = lookup_model(repo)
    assert entry is not None
    config = json.loads(_catalog_configs()[repo].read_text(encoding="utf-8"))
    resolved = architecture_from_hf_config(config)
    assert resolved == entry.architecture, f"catalog {entry.architecture} != config.json {resolved}"


def test_modelopt_checkpoint_reads_hf_quant_config() -> None:
    """nvidia/Llama-3.1-70B-Instruct-FP8 keeps its quantization in hf_quant_config.json, not config.json."""
    from ctxfit.vocab.checkpoint import checkpoint_format, quantization_config

    source = resolve_hub("nvidia/Llama-3.1-70B-Instruct-FP8", endpoint=shared_hub().url)
    quant = quantization_config(source.config)
    assert quant is not None and quant["quant_method"] == "modelopt" and quant["quant_algo"] == "FP8"
    assert checkpoint_format(source.config, source.checkpoint) == "fp8"
