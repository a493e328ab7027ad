"""The gauges that say what runs (``ctxfit_server_context_length_tokens``, ``ctxfit_kv_cache_tokens{source=
"observed"}``) lose their series when nothing runs (phase Failed) or when the attempt they described is no longer
the one in force (a step-down), instead of keeping the last Ready figure."""

from __future__ import annotations

import sys
from typing import Any

from ctxfit.api.status import InferenceServerStatus, Phase
from ctxfit.controller.converge import converge
from ctxfit.controller.telemetry.metrics import Metrics
from ctxfit.controller.views.pods import PodView

from tests.unit.controller.builders import REPO, SETTINGS, applied, never, pod, snapshot, spec

sys.path.insert(0, str(REPO / "hack"))
from sim_startup import sglang_startup_log, vllm_startup_log

LABELS = {"namespace": "ns", "name": "kimi", "engine": "vllm"}


def _ready(body: dict[str, Any], log: str) -> InferenceServerStatus:
    def read(_pod: PodView) -> str:
        return log
    first = converge(snapshot(body), SETTINGS, never)
    out = converge(snapshot(body, first.status, pods=(pod(1, ready=True),), deployment=applied(first)),
                   SETTINGS, never, read)
    return out.status


def _in_force(metrics: Metrics, engine: str = "vllm") -> tuple[float | None, float | None]:
    labels = {**LABELS, "engine": engine}
    sample = metrics.registry.get_sample_value
    return (sample("ctxfit_server_context_length_tokens", labels),
            sample("ctxfit_kv_cache_tokens", {**labels, "source": "observed"}))


def test_a_failed_server_has_no_context_or_observed_kv_in_force() -> None:
    body = spec()
    plan = converge(snapshot(body), SETTINGS, never).status.plan
    assert plan is not None
    ready = _ready(body, vllm_startup_log(kv_cache_bytes=plan.per_gpu.kv_cache_bytes,
                                          kv_bytes_per_token=plan.kv_bytes_per_token, max_model_len=131072))
    assert ready.phase is Phase.READY and ready.observed is not None and ready.observed.kv_cache_tokens
    metrics = Metrics()
    metrics.observe_status("ns", "kimi", "vllm", ready, 131072)
    assert _in_force(metrics) == (131072, ready.observed.kv_cache_tokens)
    broken = {**body, "gpu": {**body["gpu"], "count": 0}}  # an invalid spec: Failed, scaled to 0
    failed = converge(snapshot(broken, ready, generation=2), SETTINGS, never).status
    assert failed.phase is Phase.FAILED and failed.context_length is None
    metrics.observe_status("ns", "kimi", "vllm", failed, 131072)
    assert _in_force(metrics) == (None, None), "nothing runs: no context and no observed KV pool in force"
    sample = metrics.registry.get_sample_value
    assert sample("ctxfit_server_phase", {**LABELS, "phase": "Failed"}) == 1
    assert sample("ctxfit_server_planned_context_length_tokens", LABELS) == 131072, "the plan is still the plan"
    metrics.observe_status("ns", "kimi", "vllm", ready, 131072)
    assert _in_force(metrics) == (131072, ready.observed.kv_cache_tokens), "serving again: the series return"


def test_a_step_down_keeps_the_new_context_and_drops_the_old_attempts_kv() -> None:
    body = spec("dsv4-flash-512k.yaml")
    clamped = _ready(body, sglang_startup_log(max_total_num_tokens=300_000, context_len=524288,
                                              kv_bytes_per_token=3800))
    first, second = clamped.attempts
    assert clamped.phase is Phase.STEPPING_DOWN and first.clamped is True
    assert clamped.observed is not None and clamped.observed.attempt == 1
    metrics = Metrics()
    metrics.observe_status("ns", "kimi", "sglang", clamped, None)
    assert _in_force(metrics, "sglang") == (second.effective.context_length, None), \
        "attempt 2 is in force; attempt 1's KV pool is not"
