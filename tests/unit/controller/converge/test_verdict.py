""""Does not fit" is a verdict (exit 3, full plan, suggestions), never an input error; targetFits vs fits."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml
from ctxfit.api import GiB, InferenceServerSpec
from ctxfit.api.status import ConditionType
from ctxfit.budget.planner import plan
from ctxfit.controller.converge import converge
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.unit.controller.builders import SETTINGS, never, snapshot

ROOT = Path(__file__).resolve().parents[4]


def glm5_bf16(gpus: int = 8, product: str = "NVIDIA-H200") -> dict[str, Any]:
    return {"model": {"name": "zai-org/GLM-5"}, "engine": {"kind": "vllm"},
            "gpu": {"count": gpus, "product": product}, "parallelism": {"tensor": gpus}}


def test_glm5_bf16_on_8_h200_is_a_verdict_with_the_full_plan_and_suggestions() -> None:
    result = plan(InferenceServerSpec.model_validate(glm5_bf16()))
    assert not result.fits and not result.target_fits and result.context_length == 0
    assert result.kv_bytes_per_token == 100_152  # the plan is still computed
    assert result.per_gpu.weights_bytes == -(-1_488_000_000_000 // 8)
    text = "\n".join(result.reasons)
    assert "does not fit" in text and "GiB of weights per GPU" in text
    assert "more GPUs: 16 (tensor 8 x pipeline 2, 2 nodes of 8 GPUs, a node size assumed)" in text
    assert "checkpoint in FP8" in text and "checkpoint in INT4" in text
    assert result.engine_args == []


def test_cli_exit_3_json_has_kv_bytes_per_gpu_and_reasons(tmp_path: Path) -> None:
    path = tmp_path / "glm5-bf16.yaml"
    path.write_text(yaml.safe_dump({"apiVersion": "ctxfit.io/v1alpha1", "kind": "InferenceServer",
                                    "metadata": {"name": "glm5"}, "spec": glm5_bf16()}))
    out = subprocess.run([sys.executable, "-m", "ctxfit.cli", "plan", "-f", str(path), "-o", "json"],
                         capture_output=True, text=True, check=False)
    assert out.returncode == 3, out.stderr
    doc = json.loads(out.stdout)
    assert doc["fits"] is False and doc["targetFits"] is False
    assert doc["kvBytesPerToken"] == 100_152 and doc["perGPU"]["weightsBytes"] > doc["perGPU"]["usableBytes"]
    assert any("more GPUs" in r for r in doc["reasons"])
    table = subprocess.run([sys.executable, "-m", "ctxfit.cli", "plan", "-f", str(path)],
                           capture_output=True, text=True, check=False)
    assert table.returncode == 3 and "does not fit" in table.stdout and not table.stderr


def test_target_fits_is_separate_from_fits() -> None:
    spec = InferenceServerSpec.model_validate({
        "model": {"name": "moonshotai/Kimi-K2.5", "weightsPerGPU": "70.8Gi"}, "engine": {"kind": "vllm"},
        "gpu": {"count": 8, "product": "NVIDIA-RTX-PRO-6000-Blackwell-Server-Edition"},
        "parallelism": {"tensor": 8}, "context": {"target": 262144}})
    result = plan(spec)
    assert result.fits and not result.target_fits and 0 < result.context_length < 262144
    doc = result.to_json()
    assert doc["fits"] is True and doc["targetFits"] is False
    smaller = plan(spec.model_copy(update={"context": spec.context.model_copy(update={"target": 65536})}))
    assert smaller.fits and smaller.target_fits


def test_operator_says_budget_fits_false_does_not_fit() -> None:
    out = converge(snapshot(glm5_bf16(8, "NVIDIA-RTX-PRO-6000-Blackwell-Server-Edition")), SETTINGS, never)
    cond = out.status.condition(ConditionType.BUDGET_FITS)
    assert cond is not None and cond.status == "False" and cond.reason.value == "DoesNotFit"
    assert out.status.plan is not None and not out.status.plan.fits and not out.status.plan.target_fits
    assert out.deployment is None and [e.reason.value for e in out.events] == ["DoesNotFit"]


def test_status_plan_carries_target_fits() -> None:
    body = yaml.safe_load((ROOT / "manifests" / "kimi-128k.yaml").read_text())["spec"]
    out = converge(snapshot(body), SETTINGS, never)
    assert out.status.plan is not None and out.status.plan.fits and out.status.plan.target_fits
    assert out.status.to_wire()["plan"]["targetFits"] is True  # type: ignore[index]


def test_bench_plans_every_combination() -> None:
    from bench.plan_bench import matrix

    specs = matrix()
    results = [plan(s) for s in specs]  # raises on any "not plannable" combination
    assert len(results) == len(specs) and any(r.fits for r in results) and any(not r.fits for r in results)


@settings(max_examples=60, deadline=None)
@given(st.integers(min_value=1, max_value=400), st.sampled_from(["NVIDIA-L4", "NVIDIA-H100-80GB-HBM3", "NVIDIA-H200"]),
       st.sampled_from(["vllm", "sglang"]))
def test_property_any_weight_is_a_plan_never_an_input_error(weights_gib: int, product: str, engine: str) -> None:
    spec = InferenceServerSpec.model_validate({
        "model": {"name": "meta-llama/Llama-3.1-70B-Instruct", "weightsPerGPU": f"{weights_gib}Gi"},
        "engine": {"kind": engine}, "gpu": {"count": 1, "product": product}, "context": {"target": 8192}})
    result = plan(spec)
    assert result.kv_bytes_per_token > 0
    if result.per_gpu.weights_bytes >= result.per_gpu.usable_bytes:
        assert not result.fits and any("does not fit" in r for r in result.reasons)
    if result.fits:
        assert result.per_gpu.weights_bytes < result.per_gpu.total_bytes
    assert result.target_fits <= result.fits


@pytest.mark.parametrize("weights", ["200Gi", "1Ti"])
def test_weights_larger_than_the_gpu_suggest_a_checkpoint(weights: str) -> None:
    spec = InferenceServerSpec.model_validate({
        "model": {"name": "meta-llama/Llama-3.1-70B-Instruct", "weightsPerGPU": weights},
        "engine": {"kind": "vllm"}, "gpu": {"count": 1, "product": "NVIDIA-H100-80GB-HBM3"}})
    result = plan(spec)
    assert not result.fits
    assert any("more GPUs" in r for r in result.reasons)
    assert result.per_gpu.weights_bytes / GiB > 79
