"""``ctxfit plan`` shows each LoRA / speculative term as its own row with its source."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from tests.unit.cli.clikit import ROOT, run_cli


@pytest.mark.parametrize(("manifest", "rows"), [
    ("manifests/llama31-8b-lora.yaml", ["LoRA buffers", "LoRA host"]),
    ("manifests/llama31-8b-eagle.yaml", ["draft weights"]),
    ("manifests/llama31-8b-draft-sglang.yaml", ["draft weights", "draft KV pool"]),
    ("manifests/deepseek-v3-mtp.yaml", ["MTP layers"]),
])
def test_each_new_term_is_a_row_with_its_source(manifest: str, rows: list[str]) -> None:
    table = run_cli("plan", "-f", manifest)
    assert table.returncode == 0, table.stderr + table.stdout
    doc = json.loads(run_cli("plan", "-f", manifest, "-o", "json").stdout)
    terms = {e["term"]: e for e in doc["perGPUExtras"]}
    assert sorted(terms) == sorted(rows)
    for row in rows:
        assert any(line.lstrip("│ ").startswith(row) for line in table.stdout.splitlines()), row
        assert terms[row]["bytes"] > 0 and terms[row]["source"]
        # where the term sits is said once, by the table's tag from the typed inBudget/host fields
        assert not any(w in terms[row]["source"] for w in ("outside the budget", "in the slack")), terms[row]
    per_gpu = doc["perGPU"]
    in_budget = sum(e["bytes"] for e in doc["perGPUExtras"] if e["inBudget"])
    if "sglang" in manifest:  # SGLang: usable = weights + pool; activations, graphs and buffers sit in the slack
        assert per_gpu["usableBytes"] == per_gpu["weightsBytes"] + in_budget + per_gpu["kvCacheBytes"]
    else:
        assert per_gpu["usableBytes"] == (per_gpu["weightsBytes"] + per_gpu["activationBytes"]
                                          + per_gpu["cudaGraphBytes"] + per_gpu["otherBytes"] + in_budget
                                          + per_gpu["kvCacheBytes"])


def test_draft_is_resolved_like_the_model(tmp_path: Path) -> None:
    """A Hub draft with nothing but its name: config.json and safetensors headers from the Hub stand-in (the real
    huggingface_hub client through HF_ENDPOINT), its weights by the engine's sharding rules."""
    import subprocess
    import sys

    from tests.hubfixtures.server import hub_env

    doc = {"apiVersion": "ctxfit.io/v1alpha1", "kind": "InferenceServer", "metadata": {"name": "qwen-draft"},
           "spec": {"model": {"name": "Qwen/Qwen3-8B"}, "engine": {"kind": "vllm", "version": "0.20.0"},
                    "gpu": {"product": "NVIDIA-H100-80GB-HBM3", "count": 1}, "context": {"target": 8192},
                    "speculative": {"method": "draft", "draft": {"name": "Qwen/Qwen3-0.6B"}}}}
    path = tmp_path / "server.yaml"
    path.write_text(yaml.safe_dump(doc))
    out = subprocess.run([sys.executable, "-m", "ctxfit.cli", "plan", "-f", str(path), "-o", "json"],
                         capture_output=True, text=True, cwd=ROOT, timeout=300, env=hub_env(str(tmp_path)))
    assert out.returncode == 0, out.stderr
    plan = json.loads(out.stdout)
    draft = next(e for e in plan["perGPUExtras"] if e["term"] == "draft weights")
    assert 0.5e9 < draft["bytes"] < 2e9, draft  # ~0.6B parameters in bf16
    assert plan["kvBytesPerToken"] > 36 * 2 * 8 * 128 * 2, "the draft's 28 layers add KV per token"
