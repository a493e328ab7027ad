"""Operator metrics: one dedicated registry, prefix ``ctxfit_``, labels namespace/name/engine (+ one more).

State (the configuration in force, the plan, the phase) is set from each reconciled status; events
(attempt outcomes, step-downs, reconcile errors) are counters. Built in ``@kopf.on.startup`` and kept
on ``memo.metrics``; ``start_http_server`` serves ``/metrics`` on ``CTXFIT_METRICS_PORT``.
"""

from __future__ import annotations

import threading
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, start_http_server

from ctxfit.api import quantity_to_bytes
from ctxfit.api.status import Attempt, ConditionType, InferenceServerStatus, Phase, Reason

LABELS = ("namespace", "name", "engine")


class Metrics:
    """All ctxfit metric families, on ``self.registry``."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        r = self.registry

        def gauge(name: str, doc: str, extra: tuple[str, ...] = ()) -> Gauge:
            return Gauge(f"ctxfit_{name}", doc, (*LABELS, *extra), registry=r)

        self.context_length = gauge("server_context_length_tokens", "Effective context length in force (tokens).")
        self.target_context_length = gauge("server_target_context_length_tokens",
                                           "Context length the spec asks for (tokens).")
        self.planned_context_length = gauge("server_planned_context_length_tokens",
                                            "Context length the first plan chose (tokens); above the effective "
                                            "context after a step-down.")
        self.predicted_max_context_length = gauge("server_predicted_max_context_length_tokens",
                                                  "Planner's predicted largest context (tokens).")
        self.kv_bytes_per_token = gauge("server_kv_bytes_per_token", "KV cache bytes per token per GPU.")
        self.kv_pool_bytes = gauge("server_kv_pool_bytes", "Planned KV cache pool per GPU (bytes).")
        self.headroom_ratio = gauge("server_headroom_ratio", "KV headroom fraction kept free.")
        self.phase = gauge("server_phase", "1 for the server's current phase, 0 for the others.", ("phase",))
        self.memory_limit_bytes = gauge("server_memory_limit_bytes", "Engine container memory limit (bytes).")
        self.kv_cache_tokens = Gauge("ctxfit_kv_cache_tokens", "KV cache pool per GPU in tokens: the plan's "
                                     "(source=predicted) and the engine's own start-up report (source=observed).",
                                     (*LABELS, "source"), registry=r)
        self.prediction_error_bytes = Gauge("ctxfit_prediction_error_bytes", "Observed minus predicted KV cache "
                                            "pool per GPU of the newest Ready attempt (bytes).", LABELS, registry=r)
        self.context_clamped = Gauge("ctxfit_context_clamped", "1 when the engine served less than the effective "
                                     "context (condition Degraded/ContextClamped), else 0.", LABELS, registry=r)
        self.attempts = Counter("ctxfit_attempts", "Engine starts by outcome.", (*LABELS, "outcome"), registry=r)
        self.step_downs = Counter("ctxfit_step_downs", "Automatic configuration changes after a failed start, "
                                  "by failure kind.", (*LABELS, "reason"), registry=r)
        self.reconcile_duration = Histogram("ctxfit_reconcile_duration_seconds", "Time of one reconcile.",
                                            registry=r, buckets=(.005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10))
        self.queue_wait = Histogram("ctxfit_workqueue_wait_seconds", "Time a reconcile waited for a worker slot "
                                    "after its server was enqueued, by pass (first: a server's first reconcile "
                                    "since the operator started; later: the others).", ("pass",), registry=r,
                                    buckets=(.001, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30))
        self.api_requests = Counter("ctxfit_api_requests", "Requests the operator's reconciles sent to the API "
                                    "server, by verb, resource and status code (0: no answer).",
                                    ("verb", "resource", "code"), registry=r)
        self.api_request_duration = Histogram("ctxfit_api_request_duration_seconds", "Time of one request to the "
                                              "API server (reconciles, Events), by verb and resource.",
                                              ("verb", "resource"), registry=r,
                                              buckets=(.005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30))
        self.reconcile_errors = Counter("ctxfit_reconcile_errors", "Reconciles that raised, by reason.",
                                        ("reason",), registry=r)
        self._lock = threading.Lock()
        self._server: Any = None

    def observe_queue_wait(self, first: bool, seconds: float) -> None:
        """``WorkQueue``'s ``observe_wait``: one reconcile's wait for a slot."""
        self.queue_wait.labels("first" if first else "later").observe(seconds)

    def observe_api_request(self, verb: str, resource: str, code: int, seconds: float) -> None:
        """``rest.Rest``'s ``observe``: one request's outcome and time."""
        self.api_requests.labels(verb, resource, str(code)).inc()
        self.api_request_duration.labels(verb, resource).observe(seconds)

    def serve(self, port: int) -> None:
        """Serve ``/metrics`` on 0.0.0.0:``port`` (no-op for port 0)."""
        if port:
            self._server, _ = start_http_server(port, registry=self.registry)

    def close(self) -> None:
        """Stop the HTTP server, if any."""
        if self._server is not None:
            self._server.shutdown()
            self._server = None

    def observe_status(self, namespace: str, name: str, engine: str, status: InferenceServerStatus,
                       target: int | None) -> None:
        """Set the per-server gauges from a reconciled status."""
        labels = (namespace, name, engine)
        with self._lock:
            if status.context_length is not None:
                self.context_length.labels(*labels).set(status.context_length)
            if target is not None:
                self.target_context_length.labels(*labels).set(target)
            if status.plan is not None:
                self.predicted_max_context_length.labels(*labels).set(status.plan.max_context_length)
                self.planned_context_length.labels(*labels).set(status.plan.context_length)
                self.kv_bytes_per_token.labels(*labels).set(status.plan.kv_bytes_per_token)
                self.kv_pool_bytes.labels(*labels).set(status.plan.kv_pool_bytes)
                self.headroom_ratio.labels(*labels).set(status.plan.headroom)
            if status.effective is not None:
                self.memory_limit_bytes.labels(*labels).set(quantity_to_bytes(status.effective.memory_limit))
            for phase in Phase:
                self.phase.labels(*labels, phase.value).set(1 if status.phase is phase else 0)
            self._observe_verification(labels, status)

    def _observe_verification(self, labels: tuple[str, str, str], status: InferenceServerStatus) -> None:
        """Predicted vs observed KV tokens, the prediction error, and the clamped flag (issue 12)."""
        if status.plan is not None and status.plan.kv_bytes_per_token > 0:
            predicted = max(0, status.plan.kv_pool_bytes) // status.plan.kv_bytes_per_token
            self.kv_cache_tokens.labels(*labels, "predicted").set(predicted)
        observed = status.observed
        if observed is not None and observed.kv_cache_tokens is not None:
            self.kv_cache_tokens.labels(*labels, "observed").set(observed.kv_cache_tokens)
        if observed is not None and observed.error_bytes is not None:
            self.prediction_error_bytes.labels(*labels).set(observed.error_bytes)
        degraded = status.condition(ConditionType.DEGRADED)
        clamped = degraded is not None and degraded.status == "True" and degraded.reason is Reason.CONTEXT_CLAMPED
        self.context_clamped.labels(*labels).set(1 if clamped else 0)

    def observe_attempts(self, namespace: str, name: str, engine: str, finished: list[Attempt],
                         step_down_reasons: list[str]) -> None:
        """Count finished attempts (by outcome) and step-downs (by failure kind)."""
        for attempt in finished:
            self.attempts.labels(namespace, name, engine, attempt.outcome.value).inc()
        for reason in step_down_reasons:
            self.step_downs.labels(namespace, name, engine, reason).inc()

    def forget(self, namespace: str, name: str) -> None:
        """Drop every series of a deleted server (bounded cardinality)."""
        families: list[Any] = [self.context_length, self.target_context_length, self.predicted_max_context_length,
                               self.kv_bytes_per_token, self.kv_pool_bytes, self.headroom_ratio, self.phase,
                               self.memory_limit_bytes, self.attempts, self.step_downs, self.kv_cache_tokens,
                               self.prediction_error_bytes, self.context_clamped]
        with self._lock:
            for family in families:
                for labels in list(family._metrics):  # noqa: SLF001 - prometheus_client has no public lister
                    if labels[0] == namespace and labels[1] == name:
                        family.remove(*labels)
