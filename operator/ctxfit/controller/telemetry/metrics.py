"""Operator metrics: one dedicated registry, prefix ``ctxfit_``, labels namespace/name/engine (+ one more).

State via one collector (``gauges.ServerGauges``), events via counters; served on ``CTXFIT_METRICS_PORT``.
See docs/design/telemetry.md.
"""

from __future__ import annotations

import threading
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, start_http_server

from ctxfit.api.status import Attempt, InferenceServerStatus

from ..converge.resolution import REASONS
from .gauges import LABELS, ServerGauges

RESOLUTION_KINDS = frozenset({"hub", "token", "volume", "adapter"})
RESOLUTION_OUTCOMES = frozenset({"Resolved", *REASONS})
"""The label values of the resolution metrics (anything else is counted as ``other``: bounded cardinality)."""


class Metrics:
    """All ctxfit metric families, on ``self.registry``."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        r = self.registry
        self.servers = ServerGauges()  # the per-server state gauges (gauges.py)
        r.register(self.servers)
        self.attempts = Counter("ctxfit_attempts", "Engine starts by outcome.", (*LABELS, "outcome"), registry=r)
        self.step_downs = Counter("ctxfit_step_downs", "Automatic configuration changes after a failed start, "
                                  "by failure kind.", (*LABELS, "reason"), registry=r)
        self.reconcile_duration = Histogram("ctxfit_reconcile_duration_seconds", "Time of one reconcile.",
                                            registry=r, buckets=(.005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10))
        self.queue_wait = Histogram("ctxfit_workqueue_wait_seconds", "Time a reconcile waited for a worker slot "
                                    "after its server was enqueued, by pass (first: a server's first reconcile "
                                    "since the operator started, or its pass after the model resolution it waited "
                                    "for; later: the others).", ("pass",), registry=r,
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
        self.resolution_duration = Histogram(
            "ctxfit_model_resolution_duration_seconds", "Time of one model resolution (config.json and safetensors "
            "headers; one per repo and revision, shared by its servers), from its start to its end, by source kind "
            "(hub: the operator's own reads; token, volume: a resolver pod; adapter: adapter_config.json) and "
            "outcome (Resolved or the error kind).", ("kind", "outcome"), registry=r,
            buckets=(.1, .25, .5, 1, 2.5, 5, 10, 30, 60, 120, 300))
        self.resolution_end = Gauge("ctxfit_model_resolution_end_timestamp_seconds", "When the last model "
                                    "resolution of that kind and outcome ended (Unix time).", ("kind", "outcome"),
                                    registry=r)
        self._lock = threading.Lock()
        self._server: Any = None

    def observe_queue_wait(self, first: bool, seconds: float) -> None:
        """``WorkQueue``'s ``observe_wait``: one reconcile's wait for a slot."""
        self.queue_wait.labels("first" if first else "later").observe(seconds)

    def observe_resolution(self, kind: str, outcome: str, seconds: float) -> None:
        """``kube.resolution.Resolutions``'s ``finished``: one model resolution ended after ``seconds``."""
        labels = (kind if kind in RESOLUTION_KINDS else "other", outcome if outcome in RESOLUTION_OUTCOMES else "other")
        self.resolution_duration.labels(*labels).observe(seconds)
        self.resolution_end.labels(*labels).set_to_current_time()

    def observe_api_request(self, verb: str, resource: str, code: int, seconds: float) -> None:
        """``kube.rest.Rest``'s ``observe``: one request's outcome and time."""
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
        """Set the per-server gauges from a reconciled status (``ServerGauges.observe``)."""
        self.servers.observe((namespace, name, engine), status, target)

    def observe_attempts(self, namespace: str, name: str, engine: str, finished: list[Attempt],
                         step_down_reasons: list[str]) -> None:
        """Count finished attempts (by outcome) and step-downs (by failure kind)."""
        for attempt in finished:
            self.attempts.labels(namespace, name, engine, attempt.outcome.value).inc()
        for reason in step_down_reasons:
            self.step_downs.labels(namespace, name, engine, reason).inc()

    def forget(self, namespace: str, name: str) -> None:
        """Drop every series of a deleted server (bounded cardinality)."""
        self.servers.forget(namespace, name)
        families: list[Any] = [self.attempts, self.step_downs]
        with self._lock:
            for family in families:
                for labels in list(family._metrics):  # prometheus_client has no public lister
                    if labels[0] == namespace and labels[1] == name:
                        family.remove(*labels)
