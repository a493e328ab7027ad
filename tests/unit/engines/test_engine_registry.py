"""The engines' model registries, read in their released wheels (operator/ctxfit/engines/registry.json, written by
hack/engine_registry.py), and the UnsupportedArchitecture answer built from them."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from ctxfit.api import InferenceServerSpec
from ctxfit.engines.registry import check_architecture, serving_versions
from ctxfit.hub import ResolveError, ResolveKind, require_supported
from ctxfit.vocab.modelsource import ModelSource

from tests.hubfixtures.repos import config_of, fixture_entries
from tests.hubfixtures.server import hub_env

ROOT = Path(__file__).resolve().parents[3]


def test_the_table_covers_the_engine_versions_ctxfit_models() -> None:
    table = json.loads((ROOT / "operator" / "ctxfit" / "engines" / "registry.json").read_text())
    assert {"0.8.0", "0.11.0", "0.19.0", "0.20.0", "0.33.0"} <= set(table["vllm"]["versions"])
    assert {"0.4.0", "0.5.4", "0.5.23"} <= set(table["sglang"]["versions"])
    assert len(table["vllm"]["architectures"]) > 300 and len(table["sglang"]["architectures"]) > 200


@pytest.mark.parametrize("repo", list(fixture_entries()))
def test_every_fixture_architecture_is_served_by_recent_engines(repo: str) -> None:
    archs = config_of(fixture_entries()[repo])["architectures"]
    assert check_architecture(archs, "vllm", "0.33.0").served is True, archs


@pytest.mark.parametrize(("archs", "engine", "version", "served", "words"), [
    (["LlamaForCausalLM"], "vllm", "0.19.0", True, ""),
    # Qwen3.5 arrived in vLLM 0.17.0 and SGLang 0.5.9 (their registries)
    (["Qwen3_5ForConditionalGeneration"], "vllm", "0.11.0", False, "vllm 0.17.0-0.33.0 serve it"),
    (["Qwen3_5ForConditionalGeneration"], "sglang", "0.5.4", False, "sglang 0.5.9-0.5.23 serve it"),
    # mllama left vLLM with the V0 engine (_PREVIOUSLY_SUPPORTED_MODELS)
    (["MllamaForConditionalGeneration"], "vllm", "0.19.0", False, "vllm 0.10.2 was the last to"),
    (["AcmeForCausalLM"], "sglang", "0.5.23", False, "no sglang release from 0.4.0 to 0.5.23 registers it"),
    (["AcmeForCausalLM"], "vllm", "0.7.3", None, ""),  # no wheel read for 0.7.3: not checked
    ([], "vllm", "0.19.0", None, ""),
])
def test_check_architecture(archs: list[str], engine: str, version: str, served: bool | None, words: str) -> None:
    check = check_architecture(archs, engine, version)
    assert check.served is served
    assert words in check.message


def test_serving_versions_are_ordered_spans() -> None:
    versions = serving_versions("vllm", "GptOssForCausalLM")
    assert versions[0] == "0.10.1.1" and versions[-1] == "0.33.0"


def _spec(version: str, args: list[str] | None = None, architecture: bool = False) -> InferenceServerSpec:
    doc: dict[str, object] = {"name": "acme/model"}
    if architecture:
        doc["architecture"] = {"attention": "gqa", "numLayers": 2, "numKVHeads": 1, "headDim": 64}
    return InferenceServerSpec.model_validate({
        "model": doc, "engine": {"kind": "vllm", "version": version, "args": args or []},
        "gpu": {"product": "NVIDIA-H100-80GB-HBM3", "count": 1}})


def test_require_supported_names_the_field_or_the_registry() -> None:
    good = config_of(fixture_entries()["Qwen/Qwen3-8B"])
    require_supported(ModelSource(good, repo="acme/model"), _spec("0.19.0"))
    broken = {k: v for k, v in good.items() if k != "num_hidden_layers"}
    with pytest.raises(ResolveError) as unmapped:
        require_supported(ModelSource(broken, repo="acme/model"), _spec("0.19.0"))
    assert unmapped.value.kind is ResolveKind.UNSUPPORTED_ARCHITECTURE and "num_hidden_layers" in unmapped.value.line()
    require_supported(ModelSource(broken, repo="acme/model"), _spec("0.19.0", architecture=True))  # spec wins
    qwen35 = config_of(fixture_entries()["Qwen/Qwen3-8B"]) | {"architectures": ["Qwen3_5ForConditionalGeneration"]}
    with pytest.raises(ResolveError) as unserved:
        require_supported(ModelSource(qwen35, repo="acme/model"), _spec("0.11.0"))
    assert "0.17.0-0.33.0" in unserved.value.line()
    require_supported(ModelSource(qwen35, repo="acme/model"), _spec("0.11.0", ["--model-impl", "transformers"]))


def test_cli_plan_refuses_an_architecture_the_engine_version_does_not_serve(tmp_path: Path) -> None:
    doc = {"apiVersion": "ctxfit.io/v1alpha1", "kind": "InferenceServer", "metadata": {"name": "x"},
           "spec": {"model": {"name": "Qwen/Qwen3-VL-8B-Instruct"}, "engine": {"kind": "vllm", "version": "0.10.0"},
                    "gpu": {"product": "NVIDIA-H100-80GB-HBM3", "count": 1}}}
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump(doc))
    out = subprocess.run([sys.executable, "-m", "ctxfit.cli", "plan", "-f", str(path)], capture_output=True,
                         text=True, cwd=ROOT, timeout=120, env=hub_env(str(tmp_path)))
    assert out.returncode == 2
    line = out.stderr.strip().splitlines()[-1]
    assert "UnsupportedArchitecture" in line and "Qwen3VLForConditionalGeneration" in line and "0.11.0-0.33.0" in line
    assert "Traceback" not in out.stderr
