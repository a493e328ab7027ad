"""The pool gauges: a pooled server exports its pool (info), the context its Ready replicas hold (0 with
none) and what it promised; a server that leaves its pool exports none of them."""

from __future__ import annotations

from ctxfit.api.routing import RoutingStatus
from ctxfit.api.status import InferenceServerStatus
from ctxfit.controller.telemetry.metrics import Metrics

LABELS = {"namespace": "team", "name": "llama-l4", "engine": "vllm"}


def _status(ready: int, context: int = 24576) -> InferenceServerStatus:
    return InferenceServerStatus(routing=RoutingStatus(pool="llama", role="Joined", context_length=context,
                                                       ready_replicas=ready))


def test_a_pooled_server_exports_its_pool_and_contexts() -> None:
    metrics = Metrics()
    sample = metrics.registry.get_sample_value
    metrics.observe_status("team", "llama-l4", "vllm", _status(ready=2), 131072)
    pool = {**LABELS, "pool": "llama"}
    assert sample("ctxfit_server_pool_info", {**pool, "role": "Joined"}) == 1
    assert sample("ctxfit_server_pool_context_length_tokens", pool) == 24576
    assert sample("ctxfit_server_pool_target_context_length_tokens", pool) == 131072
    metrics.observe_status("team", "llama-l4", "vllm", _status(ready=0), 131072)
    assert sample("ctxfit_server_pool_context_length_tokens", pool) == 0  # no Ready replica holds anything
    metrics.observe_status("team", "llama-l4", "vllm", InferenceServerStatus(), 131072)
    assert sample("ctxfit_server_pool_info", {**pool, "role": "Joined"}) is None
    assert sample("ctxfit_server_pool_context_length_tokens", pool) is None


def test_forget_drops_the_pool_series() -> None:
    metrics = Metrics()
    metrics.observe_status("team", "llama-l4", "vllm", _status(ready=1), None)
    assert metrics.registry.get_sample_value("ctxfit_server_pool_target_context_length_tokens",
                                             {**LABELS, "pool": "llama"}) is None  # nothing promised, no sample
    metrics.forget("team", "llama-l4")
    assert "llama-l4" not in "\n".join(str(m) for m in metrics.registry.collect())
