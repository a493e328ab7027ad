"""The per-server state collector (controller/telemetry/gauges.py) exports what the per-server Gauges did: the same
families and labels, a value replaced only by a known one, one sample per phase, nothing after ``forget``; and it
costs far less memory per server."""

from __future__ import annotations

import re
import tracemalloc

from ctxfit.api.status import InferenceServerStatus, Phase
from ctxfit.controller.reconcile import reconcile
from ctxfit.controller.telemetry.metrics import Metrics
from prometheus_client import Gauge
from prometheus_client.registry import CollectorRegistry

from tests.unit.controller.builders import RTX
from tests.unit.controller.fakekube import FakeKube, runtime, server


def test_planned_server_samples_and_forget() -> None:
    rt = runtime(FakeKube(server()))
    first = reconcile(rt, "ns", "kimi-k25", (RTX,), ())
    assert first.stored is not None
    sample = rt.metrics.registry.get_sample_value
    labels = {"namespace": "ns", "name": "kimi-k25", "engine": "vllm"}
    assert sample("ctxfit_server_planned_context_length_tokens", labels) == 131072
    assert sample("ctxfit_server_headroom_ratio", labels) is not None
    assert sample("ctxfit_server_memory_limit_bytes", labels) is not None
    assert sample("ctxfit_kv_cache_tokens", {**labels, "source": "predicted"}) is not None
    assert sample("ctxfit_kv_cache_tokens", {**labels, "source": "observed"}) is None, "not observed yet"
    assert [sample("ctxfit_server_phase", {**labels, "phase": p.value}) for p in Phase].count(1) == 1
    # an unknown value keeps the last known one
    rt.metrics.observe_status("ns", "kimi-k25", "vllm", InferenceServerStatus(), None)
    assert sample("ctxfit_server_planned_context_length_tokens", labels) == 131072
    assert sum(sample("ctxfit_server_phase", {**labels, "phase": p.value}) or 0 for p in Phase) == 0
    rt.metrics.forget("ns", "kimi-k25")
    text = "\n".join(str(m) for m in rt.metrics.registry.collect())
    assert "kimi-k25" not in text


def test_a_thousand_servers_cost_a_fraction_of_per_server_gauges() -> None:
    rt = runtime(FakeKube(server()))
    status = InferenceServerStatus.from_body((reconcile(rt, "ns", "kimi-k25", (RTX,), ()).stored or {})["status"])

    def traced(observe: object) -> int:
        tracemalloc.start()
        before = tracemalloc.get_traced_memory()[0]
        observe()  # type: ignore[operator]
        used = tracemalloc.get_traced_memory()[0] - before
        tracemalloc.stop()
        return used

    metrics = Metrics()
    collector = traced(lambda: [metrics.observe_status("ns", f"s{i}", "vllm", status, 131072) for i in range(1000)])
    registry = CollectorRegistry()
    gauges = [Gauge(f"g{i}", "x", ("namespace", "name", "engine", "x"), registry=registry) for i in range(20)]
    children = traced(lambda: [g.labels("ns", f"s{i}", "vllm", "x").set(1) for i in range(1000) for g in gauges])
    assert collector * 5 < children, (collector, children)
    exposition = "\n".join(str(m) for m in metrics.registry.collect())
    assert len(re.findall(r"name': 's999'", exposition)) > 10
