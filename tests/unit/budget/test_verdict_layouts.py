"""Reviewer finding (2): "more GPUs" names only layouts the planner accepts, on nodes of the GPU count stated;
a utilization raise that holds nothing is no suggestion."""

from __future__ import annotations

import re
from typing import Any

import pytest
from ctxfit.api import InferenceServerSpec
from ctxfit.budget.planner import plan

LAYERS = 61  # Kimi-K2.5 / DeepSeek-V3 num_hidden_layers
MORE = re.compile(r"more GPUs: (\d+) \(tensor (\d+) x pipeline (\d+)(?:, (\d+) nodes of (\d+) GPUs?)?")


def _l4(weights: str = "2000Gi", **memory: Any) -> InferenceServerSpec:
    return InferenceServerSpec.model_validate({
        "model": {"name": "moonshotai/Kimi-K2.5", "weightsPerGPU": weights},
        "engine": {"kind": "vllm", "version": "0.11.0"}, "gpu": {"count": 1, "product": "NVIDIA-L4"},
        **({"memory": memory} if memory else {})})


@pytest.mark.parametrize("node_gpus", [None, 1, 2, 4, 8])
@pytest.mark.parametrize("weights", ["2000Gi", "200Gi", "40Gi"])
def test_more_gpus_names_a_layout_the_planner_accepts(node_gpus: int | None, weights: str) -> None:
    result = plan(_l4(weights), node_gpus=node_gpus)
    assert not result.fits
    lines = [r for r in result.reasons if r.startswith("more GPUs") or r.startswith("no layout")]
    assert len(lines) == 1, result.reasons
    found = MORE.match(lines[0])
    if found is None:
        assert lines[0].startswith("no layout the model can split holds these weights")
        return
    gpus, tp, pp = int(found[1]), int(found[2]), int(found[3])
    per_node = node_gpus or 8
    assert gpus == tp * pp and pp <= LAYERS and tp <= per_node
    if found[4] is not None:
        assert int(found[5]) == per_node and int(found[4]) * per_node == gpus
    else:
        assert gpus <= per_node
    # the layout is one the planner itself would plan, not refuse
    spec = _l4(weights).model_copy(update={"gpu": _l4().gpu.model_copy(update={"count": gpus // (int(found[4] or 1))}),
                                           "parallelism": _l4().parallelism.model_copy(update={"tensor": tp,
                                                                                               "pipeline": pp})})
    assert not any("cannot split" in r or "without layers" in r for r in plan(spec, suggest=False).reasons)


def test_one_gpu_l4_nodes_say_no_layout_holds_2000_gib_instead_of_127_pipeline_stages() -> None:
    text = "\n".join(plan(_l4(), node_gpus=1).reasons)
    assert "pipeline 127" not in text and "more GPUs" not in text
    assert f"the largest, {LAYERS} (tensor 1 x pipeline {LAYERS}, {LAYERS} nodes of 1 GPU)" in text


def test_assumed_node_size_is_said_and_consistent() -> None:
    text = "\n".join(plan(_l4()).reasons)
    found = MORE.search(text)
    assert found is not None and "a node size assumed" in text
    assert int(found[4]) * int(found[5]) == int(found[1]) == int(found[2]) * int(found[3])
    assert int(found[3]) <= LAYERS


@pytest.mark.parametrize("memory", [{}, {"gpuMemoryUtilization": 0.95}])
def test_no_utilization_suggestion_that_holds_nothing_or_is_the_setting(memory: dict[str, Any]) -> None:
    reasons = plan(_l4(**memory)).reasons
    assert not any(r.startswith("gpu-memory-utilization") for r in reasons), reasons


def test_a_utilization_raise_that_holds_tokens_is_still_suggested() -> None:
    spec = InferenceServerSpec.model_validate({
        "model": {"name": "meta-llama/Llama-3.1-8B-Instruct"}, "engine": {"kind": "vllm", "version": "0.11.0"},
        "gpu": {"count": 1, "product": "NVIDIA-L4"}, "context": {"target": 131072, "minimum": 131072},
        "memory": {"gpuMemoryUtilization": 0.8}})
    reasons = plan(spec).reasons
    line = next(r for r in reasons if r.startswith("gpu-memory-utilization 0.95"))
    assert int(line.split(" would hold ")[1].split()[0]) > 0
