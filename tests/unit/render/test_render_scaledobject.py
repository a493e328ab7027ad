"""KEDA ScaledObject rendering: golden files per engine and workload kind, and the contracts.

Golden files: ``tests/golden/autoscaling/<case>/inferenceserver.yaml`` -> ``expected.yaml`` (the ScaledObject for
the planner's configuration, thresholds derived as the operator derives them). Cases whose name ends in
``-paused`` render the pause annotation. Regenerate only on purpose:
``CTXFIT_UPDATE_GOLDEN=1 pytest tests/unit/render/test_render_scaledobject.py``.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import yaml
from ctxfit.api import EngineKind, InferenceServer
from ctxfit.api.observed import ObservedStatus
from ctxfit.budget.autoscale import server_thresholds
from ctxfit.budget.context import DEFAULT_HEADROOM
from ctxfit.budget.multinode import plan_group
from ctxfit.render import RenderInput
from ctxfit.render.leaderworkerset import render_workload
from ctxfit.render.scaledobject import (
    PAUSED_ANNOTATION,
    ScaledObjectInput,
    hpa_name,
    kv_usage_query,
    render_scaled_object,
    waiting_query,
)

GOLDEN = Path(__file__).resolve().parents[2] / "golden" / "autoscaling"
CASES = sorted(p.name for p in GOLDEN.iterdir() if (p / "inferenceserver.yaml").exists())
UID = "00000000-0000-4000-8000-000000000015"
PROMETHEUS = "http://prometheus-operated.monitoring.svc:9090"


def scaled_input(case: str, observed: ObservedStatus | None = None) -> ScaledObjectInput:
    server = InferenceServer.model_validate(yaml.safe_load((GOLDEN / case / "inferenceserver.yaml").read_text()))
    result, _ = plan_group(server.spec)
    assert result.fits, result.reasons
    found = server_thresholds(
        server.spec, kv_pool_bytes=result.kv_pool_bytes, kv_bytes_per_token=result.kv_bytes_per_token,
        context_length=result.context_length, max_num_seqs=result.effective.max_num_seqs,
        headroom=server.spec.context.headroom if server.spec.context.headroom is not None else DEFAULT_HEADROOM,
        observed=observed)
    return ScaledObjectInput(name=server.metadata.name, namespace="inference", uid=UID, spec=server.spec,
                             thresholds=found, prometheus_address=PROMETHEUS, paused=case.endswith("-paused"),
                             startup_timeout_seconds=result.effective.startup_timeout_seconds)


def test_every_engine_and_workload_has_a_golden_case() -> None:
    specs = [yaml.safe_load((GOLDEN / c / "inferenceserver.yaml").read_text())["spec"] for c in CASES]
    assert {s["engine"]["kind"] for s in specs} == {"vllm", "sglang"}
    assert {s.get("nodes", 1) > 1 for s in specs} == {True, False}


@pytest.mark.parametrize("case", CASES)
def test_golden(case: str) -> None:
    doc = render_scaled_object(scaled_input(case))
    expected = GOLDEN / case / "expected.yaml"
    text = yaml.safe_dump(doc, sort_keys=False, width=120)
    if os.environ.get("CTXFIT_UPDATE_GOLDEN") == "1":
        expected.write_text(text)
    assert expected.exists(), f"missing {expected}: run with CTXFIT_UPDATE_GOLDEN=1"
    assert yaml.safe_load(expected.read_text()) == doc


@pytest.mark.parametrize("case", CASES)
def test_target_is_the_rendered_workload(case: str) -> None:
    """scaleTargetRef names exactly the object the operator renders (Deployment or LeaderWorkerSet)."""
    ref = render_scaled_object(scaled_input(case))["spec"]["scaleTargetRef"]
    workload = render_workload(_render_input(case))
    assert (ref["apiVersion"], ref["kind"], ref["name"]) == \
        (workload["apiVersion"], workload["kind"], workload["metadata"]["name"])


def _render_input(case: str) -> RenderInput:
    server = InferenceServer.model_validate(yaml.safe_load((GOLDEN / case / "inferenceserver.yaml").read_text()))
    result, _ = plan_group(server.spec)
    return RenderInput(name=server.metadata.name, namespace="inference", uid=UID, spec=server.spec,
                       effective=result.effective, attempt=1, gpu_product=server.spec.gpu.product)


def test_owner_labels_and_bounds() -> None:
    inp = scaled_input("vllm-llama8b")
    doc = render_scaled_object(inp)
    owner = doc["metadata"]["ownerReferences"][0]
    assert (owner["kind"], owner["name"], owner["uid"], owner["controller"]) == ("InferenceServer", "llama31-8b",
                                                                                 UID, True)
    assert doc["metadata"]["labels"]["ctxfit.io/server"] == "llama31-8b"
    assert doc["metadata"]["annotations"] == {PAUSED_ANNOTATION: "false"}  # one patch pauses and resumes
    spec = doc["spec"]
    assert (spec["minReplicaCount"], spec["maxReplicaCount"], spec["cooldownPeriod"]) == (1, 4, 300)
    assert spec["advanced"]["horizontalPodAutoscalerConfig"]["behavior"]["scaleDown"] == \
        {"stabilizationWindowSeconds": 300}
    assert "initialCooldownPeriod" not in spec
    assert hpa_name("llama31-8b") == "keda-hpa-llama31-8b"


def test_triggers_carry_the_thresholds() -> None:
    inp = scaled_input("vllm-llama8b")
    kv, queue = render_scaled_object(inp)["spec"]["triggers"]
    assert kv["metadata"]["threshold"] == f"{inp.thresholds.kv_usage_fraction:g}"
    assert float(kv["metadata"]["threshold"]) == inp.thresholds.kv_usage_fraction
    assert queue["metadata"]["threshold"] == str(inp.thresholds.queue)
    assert {kv["type"], queue["type"]} == {"prometheus"}
    assert {kv["metricType"], queue["metricType"]} == {"AverageValue"}
    assert kv["metadata"]["serverAddress"] == queue["metadata"]["serverAddress"] == PROMETHEUS


def test_paused_annotation() -> None:
    doc = render_scaled_object(scaled_input("vllm-lws-paused"))
    assert doc["metadata"]["annotations"] == {PAUSED_ANNOTATION: "true"}
    assert PAUSED_ANNOTATION == "autoscaling.keda.sh/paused"


def test_scale_to_zero_waits_for_the_first_start() -> None:
    inp = scaled_input("vllm-scale-to-zero")
    spec = render_scaled_object(inp)["spec"]
    assert spec["minReplicaCount"] == 0
    assert spec["initialCooldownPeriod"] == inp.startup_timeout_seconds + 900  # type: ignore[operator]


def test_user_kv_target_is_rendered_as_given() -> None:
    kv = render_scaled_object(scaled_input("vllm-lws-paused"))["spec"]["triggers"][0]
    assert kv["metadata"]["threshold"] == "0.7"


def test_observed_capacity_changes_the_rendered_threshold() -> None:
    planned = scaled_input("vllm-llama8b")
    observed = scaled_input("vllm-llama8b", ObservedStatus(attempt=1, kv_cache_tokens=65536, max_concurrency=2.0,
                                                           served_context_length=32768))
    assert observed.thresholds.capacity.source == "observed"
    assert observed.thresholds.kv_usage_fraction == 0.340  # F = 1 - 1/2, x 0.75 / 1.1 = 0.3409 -> 0.340
    assert observed.thresholds.kv_usage_fraction < planned.thresholds.kv_usage_fraction


@pytest.mark.parametrize(("engine", "dp", "expected"), [
    (EngineKind.VLLM, 1, 'sum(vllm:kv_cache_usage_perc{namespace="ns",server="s"} '
                         'or vllm:gpu_cache_usage_perc{namespace="ns",server="s"})'),
    (EngineKind.VLLM, 2, 'sum(vllm:kv_cache_usage_perc{namespace="ns",server="s"} '
                         'or vllm:gpu_cache_usage_perc{namespace="ns",server="s"}) / 2'),
    (EngineKind.SGLANG, 1, 'sum(sglang:token_usage{namespace="ns",server="s"})'),
], ids=["vllm", "vllm-dp2", "sglang"])
def test_kv_queries(engine: EngineKind, dp: int, expected: str) -> None:
    assert kv_usage_query(engine, "ns", "s", dp) == expected


@pytest.mark.parametrize(("engine", "expected"), [
    (EngineKind.VLLM, 'sum(vllm:num_requests_waiting{namespace="ns",server="s"})'),
    (EngineKind.SGLANG, 'sum(sglang:num_queue_reqs{namespace="ns",server="s"})'),
], ids=["vllm", "sglang"])
def test_waiting_queries(engine: EngineKind, expected: str) -> None:
    assert waiting_query(engine, "ns", "s") == expected


def test_refuses_without_autoscaling_or_address() -> None:
    inp = scaled_input("vllm-llama8b")
    with pytest.raises(ValueError, match=r"spec\.autoscaling"):
        render_scaled_object(ScaledObjectInput(**{**inp.__dict__, "spec": inp.spec.model_copy(
            update={"autoscaling": None})}))
    with pytest.raises(ValueError, match="prometheus address"):
        render_scaled_object(ScaledObjectInput(**{**inp.__dict__, "prometheus_address": ""}))


def test_render_is_deterministic() -> None:
    first, second = scaled_input("sglang-qwen-dp2"), scaled_input("sglang-qwen-dp2")
    assert render_scaled_object(first) == render_scaled_object(second)
