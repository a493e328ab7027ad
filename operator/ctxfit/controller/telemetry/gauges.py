"""Per-server state gauges as one Prometheus collector: the values are kept as a small record per server and
turned into samples only when ``/metrics`` is scraped.

Why a collector, and when a series is removed: docs/design/telemetry.md.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from typing import Any

from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

from ctxfit.api import quantity_to_bytes
from ctxfit.api.status import ConditionType, InferenceServerStatus, Phase, Reason

LABELS = ("namespace", "name", "engine")
Key = tuple[str, str, str]
"""(namespace, name, engine)."""

GAUGES: dict[str, tuple[str, str]] = {
    "context_length": ("ctxfit_server_context_length_tokens", "Effective context length in force (tokens); "
                       "absent while Failed (no replica runs)."),
    "target": ("ctxfit_server_target_context_length_tokens", "Context length the spec asks for (tokens)."),
    "planned": ("ctxfit_server_planned_context_length_tokens", "Context length the first plan chose (tokens); "
                "above the effective context after a step-down."),
    "predicted_max": ("ctxfit_server_predicted_max_context_length_tokens",
                      "Planner's predicted largest context (tokens)."),
    "kv_bytes_per_token": ("ctxfit_server_kv_bytes_per_token", "KV cache bytes per token per GPU."),
    "kv_pool_bytes": ("ctxfit_server_kv_pool_bytes", "Planned KV cache pool per GPU (bytes)."),
    "headroom": ("ctxfit_server_headroom_ratio", "KV headroom fraction kept free."),
    "memory_limit": ("ctxfit_server_memory_limit_bytes", "Engine container memory limit (bytes)."),
    "prediction_error": ("ctxfit_prediction_error_bytes", "Observed minus predicted KV cache pool per GPU of the "
                         "newest Ready attempt (bytes)."),
    "clamped": ("ctxfit_context_clamped", "1 when the engine served less than the effective context (condition "
                "Degraded/ContextClamped), else 0."),
}
"""Record field -> (metric name, help) of the gauges labelled (namespace, name, engine) only."""
IN_FORCE = frozenset({"context_length", "kv_observed"})
"""Record fields whose None means "none in force" (the series is removed), not "unknown this time"."""
PHASE = ("ctxfit_server_phase", "1 for the server's current phase, 0 for the others.")
POOL_INFO = ("ctxfit_server_pool_info", "1 for the InferencePool a server's pods serve in (label pool) and its role "
             "(Created, Joined); join it onto any server metric with `* on (namespace, name) group_left (pool)`.")
POOL_CONTEXT = ("ctxfit_server_pool_context_length_tokens", "Context the server's Ready pods hold in its InferencePool "
                "(their llm-d.ai/context-length-range label, tokens); 0 while it has no Ready replica.")
POOL_TARGET = ("ctxfit_server_pool_target_context_length_tokens", "Context the server promised its InferencePool "
               "(spec.context.target, else the planned context; tokens).")
KV_TOKENS = ("ctxfit_kv_cache_tokens", "KV cache pool per GPU in tokens: the plan's (source=predicted) and the "
             "engine's own start-up report of the attempt in force (source=observed; absent while Failed or "
             "before the newest attempt reported).")


def _values(status: InferenceServerStatus, target: int | None) -> dict[str, float | None]:
    """The record fields a reconciled ``status`` gives (None: unknown this time; for ``IN_FORCE``: none)."""
    plan, observed = status.plan, status.observed
    degraded = status.condition(ConditionType.DEGRADED)
    clamped = degraded is not None and degraded.status == "True" and degraded.reason is Reason.CONTEXT_CLAMPED
    predicted_tokens = None
    if plan is not None and plan.kv_bytes_per_token > 0:
        predicted_tokens = max(0, plan.kv_pool_bytes) // plan.kv_bytes_per_token
    return {
        "context_length": status.context_length, "target": target,
        "planned": plan.context_length if plan else None,
        "predicted_max": plan.max_context_length if plan else None,
        "kv_bytes_per_token": plan.kv_bytes_per_token if plan else None,
        "kv_pool_bytes": plan.kv_pool_bytes if plan else None, "headroom": plan.headroom if plan else None,
        "memory_limit": quantity_to_bytes(status.effective.memory_limit) if status.effective is not None else None,
        "prediction_error": observed.error_bytes if observed is not None else None,
        "clamped": 1 if clamped else 0,
        "kv_predicted": predicted_tokens,
        "kv_observed": status.kv_cache_tokens,  # the attempt in force's report (KV TOKENS; converge/status.py)
    }


def _pool(status: InferenceServerStatus, target: int | None) -> tuple[str, str, float, float | None] | None:
    """(pool, role, context held by Ready replicas or 0, promised context) of a pooled server, else None."""
    routing = status.routing
    if routing is None:
        return None
    held = float(routing.context_length or 0) if (routing.ready_replicas or 0) > 0 else 0.0
    plan = status.plan
    promised = target if target is not None else (plan.context_length if plan is not None and plan.fits else None)
    return routing.pool, routing.role, held, float(promised) if promised is not None else None


class ServerGauges(Collector):
    """Records of reconciled servers (thread-safe) and their samples at scrape time."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._records: dict[Key, dict[str, float]] = {}
        self._phases: dict[Key, str | None] = {}
        self._pools: dict[Key, tuple[str, str, float, float | None]] = {}

    def observe(self, key: Key, status: InferenceServerStatus, target: int | None) -> None:
        """Fold one reconciled status into ``key``'s record (unknown values keep the last known; an ``IN_FORCE``
        value that is None removes its series)."""
        values = _values(status, target)
        known = {field: float(v) for field, v in values.items() if v is not None}
        pool = _pool(status, target)
        with self._lock:
            record = self._records.setdefault(key, {})
            record.update(known)
            for field in IN_FORCE:
                if values[field] is None:
                    record.pop(field, None)
            self._phases[key] = status.phase.value if status.phase is not None else None
            if pool is None:
                self._pools.pop(key, None)
            else:
                self._pools[key] = pool

    def forget(self, namespace: str, name: str) -> None:
        """Drop every record of a deleted server (any engine)."""
        with self._lock:
            for key in [k for k in self._records if k[0] == namespace and k[1] == name]:
                self._records.pop(key, None)
                self._phases.pop(key, None)
                self._pools.pop(key, None)

    def describe(self) -> Iterator[GaugeMetricFamily]:
        """The families, without samples (registration does not call ``collect``)."""
        yield from self._families()

    def _families(self) -> Iterator[GaugeMetricFamily]:
        for name, doc in GAUGES.values():
            yield GaugeMetricFamily(name, doc, labels=LABELS)
        yield GaugeMetricFamily(*PHASE, labels=(*LABELS, "phase"))
        yield GaugeMetricFamily(*KV_TOKENS, labels=(*LABELS, "source"))
        yield GaugeMetricFamily(*POOL_INFO, labels=(*LABELS, "pool", "role"))
        yield GaugeMetricFamily(*POOL_CONTEXT, labels=(*LABELS, "pool"))
        yield GaugeMetricFamily(*POOL_TARGET, labels=(*LABELS, "pool"))

    def collect(self) -> Iterator[GaugeMetricFamily]:
        """Every family with one sample per known value (phase: one per phase, 1 for the current one)."""
        with self._lock:
            records = [(key, dict(values), self._phases.get(key)) for key, values in self._records.items()]
            pools = list(self._pools.items())
        families: dict[str, Any] = {field: GaugeMetricFamily(name, doc, labels=LABELS)
                                    for field, (name, doc) in GAUGES.items()}
        phase = GaugeMetricFamily(*PHASE, labels=(*LABELS, "phase"))
        tokens = GaugeMetricFamily(*KV_TOKENS, labels=(*LABELS, "source"))
        for key, values, current in records:
            labels = list(key)
            for field, family in families.items():
                if field in values:
                    family.add_metric(labels, values[field])
            for each in Phase:
                phase.add_metric([*labels, each.value], 1 if current == each.value else 0)
            for source in ("predicted", "observed"):
                if f"kv_{source}" in values:
                    tokens.add_metric([*labels, source], values[f"kv_{source}"])
        info = GaugeMetricFamily(*POOL_INFO, labels=(*LABELS, "pool", "role"))
        held = GaugeMetricFamily(*POOL_CONTEXT, labels=(*LABELS, "pool"))
        promised = GaugeMetricFamily(*POOL_TARGET, labels=(*LABELS, "pool"))
        for key, (pool, role, context, target) in pools:
            info.add_metric([*key, pool, role], 1)
            held.add_metric([*key, pool], context)
            if target is not None:
                promised.add_metric([*key, pool], target)
        yield from families.values()
        yield phase
        yield tokens
        yield info
        yield held
        yield promised
