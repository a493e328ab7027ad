"""Status transitions shared by the reconcile steps: phase + the three conditions, Events (pure).

Every helper writes the phase and the Ready condition together so they never disagree, and adds an
Event only when the condition's reason or message changes (running twice posts nothing new).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal

from ctxfit.api import InferenceServerSpec
from ctxfit.api.status import BudgetBytes, ConditionStatus, ConditionType, Phase, PlanStatus, Reason
from ctxfit.budget.planner import Plan

from ..views.pods import GPUNode

if TYPE_CHECKING:
    from .flow import Outcome


@dataclass(frozen=True)
class EventNote:
    """A Kubernetes Event to post on the InferenceServer (type Normal/Warning, CamelCase reason)."""

    type: Literal["Normal", "Warning"]
    reason: Reason
    message: str


def mark_phase(out: Outcome, phase: Phase, reason: Reason, message: str, now: str, generation: int) -> None:
    """Set ``phase``, the Ready condition (True only in phase Ready) and the human ``message``."""
    st = out.status
    st.phase = phase
    ready: ConditionStatus = "True" if phase is Phase.READY else "False"
    st.set_condition(ConditionType.READY, ready, reason, message, now=now, generation=generation)
    st.message = message
    _degraded(out, now, generation)


def _degraded(out: Outcome, now: str, generation: int) -> None:
    """Degraded True when the configuration in force is below the target or was stepped down."""
    st = out.status
    cur = st.current_attempt
    if cur is None or out.spec is None:
        return
    target = out.spec.context.target
    if cur.number > 1:
        failed = [a for a in st.attempts if a.failure_kind]
        kinds = ", ".join(sorted({str(a.failure_kind) for a in failed}))
        st.set_condition(ConditionType.DEGRADED, "True", Reason.STEPPED_DOWN,
                         f"attempt {cur.number} after {len(failed)} failed start(s) ({kinds}); context "
                         f"{cur.effective.context_length}", now=now, generation=generation)
    elif target is not None and cur.effective.context_length < target:
        st.set_condition(ConditionType.DEGRADED, "True", Reason.BELOW_TARGET,
                         f"context {cur.effective.context_length} is below the target {target}: "
                         f"{st.plan.reasons[-1] if st.plan and st.plan.reasons else ''}", now=now,
                         generation=generation)
    else:
        st.set_condition(ConditionType.DEGRADED, "False", Reason.AS_PLANNED, "running as planned", now=now,
                         generation=generation)


def _changed(out: Outcome, kind: ConditionType, reason: Reason, message: str) -> bool:
    old = out.status.condition(kind)
    return old is None or old.reason is not reason or old.message != message[:1024]


def mark_failed_spec(out: Outcome, message: str, now: str, generation: int) -> None:
    """The spec passed the API server but not the models or the planner: Failed, BudgetFits False."""
    st = out.status
    if _changed(out, ConditionType.BUDGET_FITS, Reason.INVALID_SPEC, message):
        out.events.append(EventNote("Warning", Reason.INVALID_SPEC, message))
    st.set_condition(ConditionType.BUDGET_FITS, "False", Reason.INVALID_SPEC, message, now=now,
                     generation=generation)
    mark_phase(out, Phase.FAILED, Reason.INVALID_SPEC, message, now, generation)


def mark_no_node(out: Outcome, message: str, now: str, generation: int) -> None:
    """No eligible node: Planning, BudgetFits Unknown, nothing created; re-checked on node changes."""
    st = out.status
    if _changed(out, ConditionType.BUDGET_FITS, Reason.NO_ELIGIBLE_NODE, message):
        out.events.append(EventNote("Warning", Reason.NO_ELIGIBLE_NODE, message))
    st.set_condition(ConditionType.BUDGET_FITS, "Unknown", Reason.NO_ELIGIBLE_NODE, message, now=now,
                     generation=generation)
    mark_phase(out, Phase.PLANNING, Reason.NO_ELIGIBLE_NODE, message, now, generation)


def plan_status(result: Plan, spec: InferenceServerSpec, node: GPUNode | None, default_headroom: float) -> PlanStatus:
    """The planner's result as ``status.plan`` (bytes as integers)."""
    t = result.per_gpu
    return PlanStatus(
        fits=result.fits,
        target_fits=result.target_fits,
        context_length=result.context_length,
        max_context_length=result.max_context_length,
        kv_bytes_per_token=result.kv_bytes_per_token,
        kv_pool_bytes=result.kv_pool_bytes,
        headroom=spec.context.headroom if spec.context.headroom is not None else default_headroom,
        per_gpu=BudgetBytes(
            total_bytes=t.total_bytes, usable_bytes=t.usable_bytes, weights_bytes=t.weights_bytes,
            activation_bytes=t.activation_bytes, cuda_graph_bytes=t.cuda_graph_bytes,
            other_bytes=t.other_bytes, kv_cache_bytes=t.kv_cache_bytes,
        ),
        gpu_product=spec.gpu.product or (node.product if node else None),
        gpu_memory_bytes=t.total_bytes,
        reasons=list(result.reasons),
        calibration_key=result.calibration_key,
        calibration_bytes=result.calibration_bytes or None,
    )
