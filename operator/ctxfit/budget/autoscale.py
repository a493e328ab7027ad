"""Autoscaling thresholds from the server's own KV capacity (pure): when KEDA should add a replica.

Inputs, per engine (one KV pool; a pod with data parallelism ``d`` holds ``d`` of them):

- ``C``: KV pool in tokens. Observed beats planned: ``status.observed.kvCacheTokens`` (the engine's own
  start-up line, vLLM "GPU KV cache size: N tokens", SGLang "max_total_num_tokens=N") when present for the
  attempt in force (the controller passes no earlier attempt's report), else the plan's
  ``kvPoolBytes // kvBytesPerToken``.
- ``L``: the context the server serves (``status.observed.servedContextLength``, else the plan's context).
- ``M``: requests of ``L`` tokens the pool holds at once (``status.observed.maxConcurrency``, vLLM's
  "Maximum concurrency for L tokens per request: Mx"; else ``C / L``). One full-context request
  occupies ``R = C / M`` tokens (``L`` for full attention; fewer with sliding-window layers).

**The full point** ``F``: the KV usage fraction above which the free part of the pool, ``(1 - u) x C``, is
smaller than one more request of the served context ``R``: ``F = 1 - R / C = 1 - 1 / M``. Above ``F``, a
new full-context request must wait in the queue (or, in vLLM, preempt a running one) even though the
engine is not "full". When the pool holds at most one such request (``M <= 1``: a pool smaller than one
full-context request, reported as ContextClamped), no usage level leaves room for one, so
``F`` is taken as the whole pool (``F = 1``) and the queue trigger (threshold 1 with one engine per pod)
does the work.

**The KV threshold** ``t = F x (1 - h) / (1 + tau)``: ``h`` is the server's headroom
(``spec.context.headroom``, default 0.25: the share of the pool kept free for bursts and fragmentation)
and ``tau = 0.1`` the HPA's default tolerance (kube-controller-manager
``--horizontal-pod-autoscaler-tolerance``: the HPA changes nothing while ``|metric / target - 1| <= tau``,
https://kubernetes.io/docs/tasks/run-application/horizontal-pod-autoscale/#algorithm-details), so the
average usage at which a replica is actually added is ``(1 + tau) x t <= F x (1 - h)``: the headroom
point, strictly below the full point even with ``h = 0``. Scaling out there, not at ``F``, is the point:
a new replica takes a whole cold start (minutes of weight loading) to help, and requests keep arriving
meanwhile. ``t`` is rounded down to whole thousandths and is at least 0.001 (KEDA's precision,
``KV_THRESHOLD_STEP``); a full point below ``0.001 x (1 + tau)`` counts as "at most one request" above.
``0 < t < F <= 1`` always holds. ``floor(t x C)`` is the same threshold in tokens.

**The queue threshold** ``q = max(1, floor(h x M_eff))`` waiting requests per replica, where ``M_eff =
min(M, maxNumSeqs) x d`` is the replica's concurrency at the served context: a backlog larger than the
headroom's share of that concurrency is more than the free part of the pool the plan kept can absorb.

**KEDA/HPA semantics** (``metricType: AverageValue``, KEDA's default for the Prometheus scaler; the HPA's
external-metric rule, https://kubernetes.io/docs/tasks/run-application/horizontal-pod-autoscale/): the
query returns the sum over the server's replicas and ``desired = ceil(sum(metric) / threshold)``, the
larger of the two triggers winning. Because the sum does not grow while a new replica is still loading,
the desired count does not run away during a cold start.

User overrides: ``spec.autoscaling.kvCacheUsageTarget`` and ``queueTarget`` replace ``t`` and ``q`` as
given (``ValueError`` outside [0.001, 1) / below 1); a KV target whose effective scale-out point
``(1 + tau) x t`` reaches the full point is kept but warned about.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Literal

from ctxfit.api import InferenceServerSpec
from ctxfit.api.autoscaling import AutoscalingSpec, AutoscalingStatus
from ctxfit.api.observed import ObservedStatus
from ctxfit.vocab.defaults import LOAD_BYTES_PER_SECOND

HPA_TOLERANCE = 0.1
"""kube-controller-manager ``--horizontal-pod-autoscaler-tolerance`` default."""
KV_THRESHOLD_STEP = 0.001
"""KEDA turns a trigger threshold into a quantity in thousandths (KEDA 2.20 ``pkg/scalers/scaler.go``
``GetMetricTargetMili`` -> ``quantityFromFloat64``: ``fmt.Sprintf("%.3f", value)``; older releases
``int64(value * 1000)``), so a derived KV threshold is a whole number of thousandths, at least one."""

CapacitySource = Literal["planned", "observed"]


@dataclass(frozen=True)
class Capacity:
    """One engine's KV capacity at its served context.

    Attributes:
        pool_tokens: KV pool, tokens (``C``).
        context_length: served context, tokens (``L``).
        max_concurrency: requests of ``context_length`` tokens the pool holds (``M``), not capped by maxNumSeqs.
        source: ``observed`` when any of the three came from the engine's start-up log, else ``planned``.
    """

    pool_tokens: int
    context_length: int
    max_concurrency: float
    source: CapacitySource = "planned"


def planned_capacity(*, kv_pool_bytes: int, kv_bytes_per_token: int, context_length: int) -> Capacity:
    """The plan's capacity: ``C = kv_pool_bytes // kv_bytes_per_token``, ``M = C / L``.

    Inputs are ``status.plan`` (or ``ctxfit plan``'s ``Plan``) fields: bytes per GPU, bytes per token per GPU,
    tokens. Raises ``ValueError`` when ``kv_bytes_per_token`` or ``context_length`` is not positive.
    """
    if kv_bytes_per_token <= 0 or context_length <= 0:
        raise ValueError("planned capacity needs kv_bytes_per_token > 0 and context_length > 0")
    tokens = max(0, kv_pool_bytes) // kv_bytes_per_token
    return Capacity(tokens, context_length, tokens / context_length, "planned")


def observed_capacity(observed: ObservedStatus | None, planned: Capacity) -> Capacity:
    """``planned`` with every number the engine reported replacing the prediction (observed beats planned).

    ``max_concurrency`` comes from the log when printed, else ``C / L`` of the resulting numbers.
    """
    if observed is None:
        return planned
    tokens = observed.kv_cache_tokens if observed.kv_cache_tokens and observed.kv_cache_tokens > 0 else None
    context = (observed.served_context_length
               if observed.served_context_length and observed.served_context_length > 0 else None)
    concurrency = observed.max_concurrency if observed.max_concurrency and observed.max_concurrency > 0 else None
    if tokens is None and context is None and concurrency is None:
        return planned
    pool = tokens if tokens is not None else planned.pool_tokens
    length = context if context is not None else planned.context_length
    return Capacity(pool, length, concurrency if concurrency is not None else pool / length, "observed")


@dataclass(frozen=True)
class Thresholds:
    """The autoscaling thresholds of one server (per replica) and why.

    Attributes:
        kv_usage_fraction: average KV usage per replica above which KEDA adds replicas (``t``), in (0, 1);
            a derived one is rounded down to whole thousandths, at least 0.001 (``KV_THRESHOLD_STEP``).
        kv_usage_tokens: the same in tokens of one engine's pool (``floor(t x C)``).
        full_fraction: the full point ``F`` (module docstring), in (0, 1].
        full_tokens: ``floor(F x C)``.
        queue: waiting requests per replica above which KEDA adds replicas (``q``), >= 1.
        capacity: the capacity the numbers come from.
        headroom: ``h`` used.
        kv_from_spec, queue_from_spec: the user's override was used.
        warnings: sentences about overrides or a pool below one full-context request.
    """

    kv_usage_fraction: float
    kv_usage_tokens: int
    full_fraction: float
    full_tokens: int
    queue: int
    capacity: Capacity
    headroom: float
    kv_from_spec: bool = False
    queue_from_spec: bool = False
    warnings: tuple[str, ...] = field(default_factory=tuple)


def full_fraction(max_concurrency: float) -> float:
    """``F = 1 - 1 / M``; 1 (the whole pool) when the pool holds at most one full-context request.

    "At most one" includes ``1 - 1 / M < KV_THRESHOLD_STEP x (1 + HPA_TOLERANCE)``: a full point so close to
    zero that no threshold KEDA can express lies below it.
    """
    if max_concurrency <= 1.0:
        return 1.0
    full = 1.0 - 1.0 / max_concurrency
    return full if full >= KV_THRESHOLD_STEP * (1.0 + HPA_TOLERANCE) else 1.0


def thresholds(
    capacity: Capacity,
    *,
    headroom: float,
    autoscaling: AutoscalingSpec | None = None,
    max_num_seqs: int | None = None,
    data_parallel: int = 1,
) -> Thresholds:
    """The KV and queue thresholds for ``capacity`` (rule and sources: module docstring).

    ``headroom`` is in [0, 1); ``max_num_seqs`` caps concurrency (None: uncapped); ``data_parallel`` is the
    number of engines (pools) per replica. Raises ``ValueError`` for a headroom outside [0, 1), a
    non-positive pool or context, or an override outside its range.
    """
    if not 0.0 <= headroom < 1.0:
        raise ValueError(f"headroom {headroom} is outside [0, 1)")
    if capacity.pool_tokens <= 0 or capacity.context_length <= 0 or data_parallel < 1:
        raise ValueError("thresholds need a positive KV pool, context and data-parallel size")
    warnings: list[str] = []
    concurrency = max(capacity.max_concurrency, 0.0)
    full = full_fraction(concurrency)
    if concurrency <= 1.0 or 1.0 - 1.0 / concurrency != full:
        warnings.append(
            f"the KV pool ({capacity.pool_tokens:,} tokens) holds {concurrency:.2f} requests of the served context "
            f"({capacity.context_length:,} tokens): the KV threshold is relative to the whole pool and any waiting "
            "request adds a replica")
    derived = max(1, math.floor(full * (1.0 - headroom) / (1.0 + HPA_TOLERANCE) / KV_THRESHOLD_STEP)) / 1000
    target = autoscaling.kv_cache_usage_target if autoscaling is not None else None
    if target is not None:
        if not KV_THRESHOLD_STEP <= target < 1.0:
            raise ValueError(f"autoscaling.kvCacheUsageTarget {target} is outside [{KV_THRESHOLD_STEP}, 1)")
        if target * (1.0 + HPA_TOLERANCE) >= full:
            warnings.append(
                f"autoscaling.kvCacheUsageTarget {target:g}: KEDA adds a replica only above "
                f"{target * (1.0 + HPA_TOLERANCE):.0%} KV usage (HPA tolerance 10%), at or past the {full:.0%} "
                f"at which one more {capacity.context_length:,}-token request no longer fits; "
                f"ctxfit would use {derived:.1%}")
    kv = target if target is not None else derived
    concurrent = min(concurrency, float(max_num_seqs)) if max_num_seqs else concurrency
    queue_override = autoscaling.queue_target if autoscaling is not None else None
    if queue_override is not None and queue_override < 1:
        raise ValueError(f"autoscaling.queueTarget {queue_override} is below 1")
    queue = queue_override if queue_override is not None else max(1, math.floor(headroom * concurrent * data_parallel))
    return Thresholds(
        kv_usage_fraction=kv,
        kv_usage_tokens=math.floor(kv * capacity.pool_tokens),
        full_fraction=full,
        full_tokens=math.floor(full * capacity.pool_tokens),
        queue=queue,
        capacity=capacity,
        headroom=headroom,
        kv_from_spec=target is not None,
        queue_from_spec=queue_override is not None,
        warnings=tuple(warnings),
    )


def server_thresholds(
    spec: InferenceServerSpec,
    *,
    kv_pool_bytes: int,
    kv_bytes_per_token: int,
    context_length: int,
    max_num_seqs: int | None,
    headroom: float,
    observed: ObservedStatus | None = None,
) -> Thresholds:
    """The thresholds of one server from its plan and, when present, ``status.observed`` (observed beats planned).

    The plan's numbers are ``status.plan`` (``kvPoolBytes``, ``kvBytesPerToken``, ``contextLength``,
    ``headroom``) with ``status.effective.maxNumSeqs``, or the same fields of ``ctxfit plan``'s ``Plan``;
    ``spec.autoscaling`` supplies the overrides and ``spec.parallelism.data`` the engines per replica.
    Raises ``ValueError`` as ``thresholds`` does (e.g. a plan with no context).
    """
    planned = planned_capacity(kv_pool_bytes=kv_pool_bytes, kv_bytes_per_token=kv_bytes_per_token,
                               context_length=context_length)
    return thresholds(observed_capacity(observed, planned), headroom=headroom, autoscaling=spec.autoscaling,
                      max_num_seqs=max_num_seqs, data_parallel=spec.parallelism.data)


def weights_per_replica_bytes(spec: InferenceServerSpec, weights_per_gpu_bytes: int) -> int:
    """Weight bytes one replica loads: per GPU x tensor x pipeline (as the startup budget counts them)."""
    return weights_per_gpu_bytes * spec.parallelism.tensor * spec.parallelism.pipeline


def cold_start_seconds(weights_per_replica_bytes: int, observed: ObservedStatus | None) -> tuple[int, str]:
    """Seconds a new replica spends loading weights, and where the number comes from.

    ``status.observed.loadSeconds`` (the engine's own "Model loading took" / "Load weight end" line) when
    known, else ``weights_per_replica_bytes / LOAD_BYTES_PER_SECOND`` (0.5 GB/s, ``vocab.defaults``). Engine
    start-up, graph capture, scheduling and the image pull come on top.
    """
    if observed is not None and observed.load_seconds is not None and observed.load_seconds >= 0:
        return math.ceil(observed.load_seconds), "observed"
    return math.ceil(max(0, weights_per_replica_bytes) / LOAD_BYTES_PER_SECOND), "estimated at 0.5 GB/s"


def _tokens_text(tokens: int) -> str:
    if tokens >= 10_000_000:
        return f"{tokens / 1_000_000:.0f}M"
    if tokens >= 10_000:
        return f"{tokens / 1000:.0f}k"
    return f"{tokens:,}"


def percent_text(fraction: float) -> str:
    """``fraction`` as a whole percentage ("63%"), or with one decimal, rounded down, when that would read 0% or
    100% for a fraction strictly between 0 and 1 ("0.1%", "99.9%")."""
    text = f"{fraction:.0%}"
    if 0.0 < fraction < 1.0 and text in ("0%", "100%"):
        return f"{math.floor(fraction * 1000) / 10:.1f}%"
    return text


def describe(found: Thresholds, autoscaling: AutoscalingSpec, cold_start: tuple[int, str]) -> str:
    """One sentence, e.g. "scale out at 63% KV = 280k of 444k tokens (planned; one more 32,768-token request no
    longer fits above 93%), or > 3 waiting requests per replica; 1..4 replicas; cold start ~33 s ...".

    Shown by ``ctxfit plan`` and written to ``status.autoscaling.rule``.
    """
    seconds, source = cold_start
    capacity = found.capacity
    why = "kvCacheUsageTarget" if found.kv_from_spec else (
        f"one more {capacity.context_length:,}-token request no longer fits above {percent_text(found.full_fraction)}")
    zero = ", scales to zero when idle" if autoscaling.min_replicas == 0 else ""
    return (
        f"scale out at {percent_text(found.kv_usage_fraction)} KV = {_tokens_text(found.kv_usage_tokens)} of "
        f"{_tokens_text(capacity.pool_tokens)} tokens ({capacity.source}; {why}), "
        f"or > {found.queue} waiting requests per replica; "
        f"{autoscaling.min_replicas}..{autoscaling.max_replicas} replicas{zero}; "
        f"cold start ~{seconds} s loading weights ({source})"
    )


def autoscaling_status(
    found: Thresholds, autoscaling: AutoscalingSpec, *, scaled_object: str, paused: bool,
    cold_start: tuple[int, str],
) -> AutoscalingStatus:
    """``status.autoscaling`` without the replica counts (the controller adds those from the HPA)."""
    return AutoscalingStatus(
        min_replicas=autoscaling.min_replicas,
        max_replicas=autoscaling.max_replicas,
        kv_cache_usage_threshold=found.kv_usage_fraction,
        kv_cache_tokens_threshold=found.kv_usage_tokens,
        kv_cache_tokens=found.capacity.pool_tokens,
        queue_threshold=found.queue,
        capacity_source=found.capacity.source,
        scaled_object=scaled_object,
        paused=paused,
        cold_start_seconds=cold_start[0],
        rule=describe(found, autoscaling, cold_start),
    )
