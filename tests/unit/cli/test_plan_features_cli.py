"""``ctxfit plan`` shows each LoRA / speculative term as its own row with its source (issue 24 item 4)."""

from __future__ import annotations

import json

import pytest

from .test_plan_cli import run_cli


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
    per_gpu = doc["perGPU"]
    in_budget = sum(e["bytes"] for e in doc["perGPUExtras"] if e["inBudget"])
    if "sglang" in manifest:  # SGLang: usable = weights + pool; activations, graphs and buffers sit in the slack
        assert per_gpu["usableBytes"] == per_gpu["weightsBytes"] + in_budget + per_gpu["kvCacheBytes"]
    else:
        assert per_gpu["usableBytes"] == (per_gpu["weightsBytes"] + per_gpu["activationBytes"]
                                          + per_gpu["cudaGraphBytes"] + per_gpu["otherBytes"] + in_budget
                                          + per_gpu["kvCacheBytes"])
