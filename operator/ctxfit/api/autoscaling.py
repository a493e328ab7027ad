"""``spec.autoscaling`` and ``status.autoscaling``: KEDA scaling on the engine's own KV-cache and queue metrics.

Absent ``spec.autoscaling`` means no autoscaling: the operator writes ``spec.replicas`` to the workload as
before. Present, the operator renders a KEDA ``ScaledObject`` (``ctxfit.render.scaledobject``) whose HPA
owns the replica count between ``minReplicas`` and ``maxReplicas``; thresholds come from the server's own
numbers (``ctxfit.budget.autoscale``) unless the user sets them.

How ``spec.replicas`` relates: with autoscaling it is only the *initial* count, used when the workload is
first created (``initial_replicas``: clamped into ``[minReplicas, maxReplicas]``); after that the
autoscaler owns the count and the operator no longer writes it. An explicit ``spec.replicas`` outside
``[minReplicas, maxReplicas]`` is refused (CEL rule on the spec), because it could never hold.

Scale to zero: ``minReplicas: 0`` is allowed only with an explicit ``scaleToZero: true`` and the other way
round, since a cold start costs the whole model load (``status.observed.loadSeconds``, or ctxfit's estimate,
see the README). With zero pods the engine exports no metrics, so the engine's own triggers cannot wake the
server: KEDA scales it from zero only on another trigger (none is rendered by ctxfit) or by hand.
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field, model_validator

from .base import WireModel

MAX_REPLICAS = 100
"""Upper bound of ``minReplicas``/``maxReplicas``: the same as ``spec.replicas``."""
MAX_SCALE_DOWN_DELAY_SECONDS = 24 * 3600
MAX_QUEUE_TARGET = 100000
MIN_KV_CACHE_USAGE_TARGET = 0.001
"""Smallest ``kvCacheUsageTarget``: KEDA turns a trigger threshold into a quantity in thousandths (KEDA 2.20
``pkg/scalers/scaler.go`` ``GetMetricTargetMili``: ``fmt.Sprintf("%.3f", value)``), so a smaller target becomes
an HPA ``averageValue`` of 0, which the API server refuses ("must be positive", k8s.io/kubernetes
``pkg/apis/autoscaling/validation/validation.go`` ``validateMetricTarget``) and nothing scales. A CEL rule, not
the schema's ``minimum``: kube-openapi checks a JSON integer against an integer-truncated bound
(``validate/values.go`` ``MinimumInt``), so ``minimum: 0.001`` would let ``0`` through; ``exclusiveMinimum: 0``
keeps refusing it."""


class AutoscalingSpec(WireModel):
    """Autoscaling by KEDA on the engine's KV-cache usage and waiting requests (needs KEDA in the cluster).

    With it, ``spec.replicas`` is only the initial count (clamped into [minReplicas, maxReplicas]); the
    autoscaler owns the replica count afterwards.
    """

    min_replicas: Annotated[int, Field(ge=0, le=MAX_REPLICAS)] = 1
    """Fewest replicas (0-100). 0 only with scaleToZero: true: a cold start costs the model's load time, and with no
    pod the engine exports no metric to wake it.
    """
    max_replicas: Annotated[int, Field(ge=1, le=MAX_REPLICAS)]
    """Most replicas (1-100), at least minReplicas."""
    kv_cache_usage_target: Annotated[float, Field(gt=0.0, lt=1.0)] | None = None
    """Average KV-cache usage per replica (fraction in [0.001, 1): KEDA's precision is a thousandth) above which
    KEDA adds replicas. Unset: from the server's own capacity (status.autoscaling.kvCacheUsageThreshold: below the
    point where one more full-context request no longer fits).
    """
    queue_target: Annotated[int, Field(ge=1, le=MAX_QUEUE_TARGET)] | None = None
    """Average waiting requests per replica above which KEDA adds replicas (1-100000). Unset: from the server's
    concurrency at its context (status.autoscaling.queueThreshold).
    """
    scale_down_delay_seconds: Annotated[int, Field(ge=0, le=MAX_SCALE_DOWN_DELAY_SECONDS)] = 300
    """Seconds the metrics must stay low before replicas are removed (HPA scale-down stabilization window and KEDA
    cooldownPeriod), 0 to 86400.
    """
    scale_to_zero: bool = False
    """Allow zero replicas when idle; must be true exactly when minReplicas is 0."""

    @model_validator(mode="after")
    def _bounds(self) -> AutoscalingSpec:
        if self.max_replicas < self.min_replicas:
            raise ValueError(
                f"autoscaling.maxReplicas: {self.max_replicas} is below autoscaling.minReplicas {self.min_replicas}"
            )
        if self.min_replicas == 0 and not self.scale_to_zero:
            raise ValueError(SCALE_TO_ZERO_MESSAGE)
        if self.scale_to_zero and self.min_replicas != 0:
            raise ValueError(MIN_ZERO_MESSAGE)
        if self.kv_cache_usage_target is not None and self.kv_cache_usage_target < MIN_KV_CACHE_USAGE_TARGET:
            raise ValueError(f"{KV_TARGET_MESSAGE}, not {self.kv_cache_usage_target:g}")
        return self


SCALE_TO_ZERO_MESSAGE = (
    "autoscaling.minReplicas: 0 needs scaleToZero: true (a cold start costs the model's load time)"
)
MIN_ZERO_MESSAGE = "autoscaling.scaleToZero: true needs minReplicas: 0"
KV_TARGET_MESSAGE = (
    f"autoscaling.kvCacheUsageTarget: at least {MIN_KV_CACHE_USAGE_TARGET} (KEDA rounds thresholds to thousandths; "
    "a smaller one reaches the HPA as 0)"
)
REPLICAS_MESSAGE = (
    "replicas: with autoscaling it is the initial count and must lie within "
    "autoscaling.minReplicas..autoscaling.maxReplicas"
)


def initial_replicas(autoscaling: AutoscalingSpec, replicas: int) -> int:
    """The replica count the workload is created with when autoscaling is set.

    ``replicas`` is ``spec.replicas`` (default 1) clamped into ``[minReplicas, maxReplicas]``. With the default,
    a scale-to-zero server still starts once, so its plan is verified (``status.observed``) before KEDA may
    take it to zero; an explicit ``replicas: 0`` (allowed only with ``scaleToZero``) starts it at zero.
    """
    return min(autoscaling.max_replicas, max(autoscaling.min_replicas, replicas))


def _min_replicas(prefix: str) -> str:
    return f"(has({prefix}.minReplicas) ? {prefix}.minReplicas : 1)"


def _scale_to_zero(prefix: str) -> str:
    return f"(has({prefix}.scaleToZero) && {prefix}.scaleToZero)"


AUTOSCALING_CEL_RULES: dict[str, list[dict[str, str]]] = {
    "AutoscalingSpec": [
        {
            "rule": f"self.maxReplicas >= {_min_replicas('self')}",
            "message": "autoscaling.maxReplicas must be at least autoscaling.minReplicas (default 1)",
            "reason": "FieldValueInvalid",
        },
        {
            "rule": f"{_min_replicas('self')} != 0 || {_scale_to_zero('self')}",
            "message": SCALE_TO_ZERO_MESSAGE,
            "reason": "FieldValueForbidden",
        },
        {
            "rule": f"!{_scale_to_zero('self')} || {_min_replicas('self')} == 0",
            "message": MIN_ZERO_MESSAGE,
            "reason": "FieldValueInvalid",
        },
        {
            "rule": f"!has(self.kvCacheUsageTarget) || self.kvCacheUsageTarget >= {MIN_KV_CACHE_USAGE_TARGET}",
            "message": KV_TARGET_MESSAGE,
            "reason": "FieldValueInvalid",
        },
    ],
}
"""CEL for ``ctxfit.api.crd`` (the same rules as ``AutoscalingSpec._bounds``)."""

SPEC_CEL_RULES: list[dict[str, str]] = [
    {
        "rule": "!has(self.autoscaling) || !has(self.replicas) || "
        f"(self.replicas >= {_min_replicas('self.autoscaling')} && self.replicas <= self.autoscaling.maxReplicas)",
        "message": REPLICAS_MESSAGE,
        "reason": "FieldValueInvalid",
    },
]
"""CEL on ``InferenceServerSpec``: an explicit ``replicas`` must be a count the autoscaler could hold."""


CapacitySource = Literal["planned", "observed"]


class AutoscalingStatus(WireModel):
    """``status.autoscaling``: the thresholds in force, the ScaledObject, and the replica counts.

    Attributes:
        min_replicas: ``spec.autoscaling.minReplicas`` in force.
        max_replicas: ``spec.autoscaling.maxReplicas`` in force.
        current_replicas: replicas the workload has now (the HPA's ``status.currentReplicas``).
        desired_replicas: the workload's ``spec.replicas``: what the autoscaler wants (the HPA writes its
            ``status.desiredReplicas`` there), or the count the operator sets in the same pass (creation, 0 while
            Failed, the start count on resuming, the nearest bound).
        kv_cache_usage_threshold: average KV-cache usage per replica (fraction in (0, 1)) above which KEDA
            scales out.
        kv_cache_tokens_threshold: the same threshold in tokens of the KV pool per replica.
        kv_cache_tokens: KV pool per replica in tokens the threshold is a fraction of.
        queue_threshold: average waiting requests per replica above which KEDA scales out.
        capacity_source: ``observed`` (the engine's start-up log) or ``planned`` (ctxfit's prediction).
        scaled_object: name of the KEDA ScaledObject (the server's name).
        paused: the ScaledObject is paused (``autoscaling.keda.sh/paused``), e.g. while the server is Failed.
        cold_start_seconds: seconds a new replica spends loading weights (observed, else estimated at 0.5 GB/s).
        rule: the rule in one sentence, as ``ctxfit plan`` prints it.
    """

    min_replicas: int | None = None
    max_replicas: int | None = None
    current_replicas: int | None = None
    desired_replicas: int | None = None
    kv_cache_usage_threshold: float | None = None
    kv_cache_tokens_threshold: int | None = None
    kv_cache_tokens: int | None = None
    queue_threshold: int | None = None
    capacity_source: CapacitySource | None = None
    scaled_object: str | None = None
    paused: bool | None = None
    cold_start_seconds: int | None = None
    rule: str | None = None
