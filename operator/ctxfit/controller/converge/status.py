"""Every phase and condition transition of the pass, and the Events that announce them (pure).

The phase moves with Ready and ``status.message``; an Event is posted only when its condition changed.
See docs/design/status.md.
"""

from __future__ import annotations

from ctxfit.api import InferenceServerSpec
from ctxfit.api.status import ConditionStatus, ConditionType, InferenceServerStatus, Phase, Reason
from ctxfit.budget.planner import Plan

from .types import EventNote, Outcome, Refusal
from .wording import budget_condition

CLAMP_MARK = "ContextClamped:"
"""Start of a clamped attempt's evidence, for humans (``Attempt.clamped`` is what is read)."""
HELD_BY = (Reason.OBJECT_REJECTED, Reason.FOREIGN_OBJECT)
"""Ready reasons of a Ready held by a refusal (``converge/refusals.py``)."""


def set_condition(out: Outcome, kind: ConditionType, status: ConditionStatus, reason: Reason, message: str,
                  now: str, generation: int, event: EventNote | None = None) -> bool:
    """Set condition ``kind``; post ``event`` when it changed (status, reason or message). Returns changed."""
    changed = out.status.set_condition(kind, status, reason, message, now=now, generation=generation)
    if changed and event is not None:
        out.events.append(event)
    return changed


def drop_condition(out: Outcome, kind: ConditionType) -> None:
    """Remove condition ``kind`` (the feature it reports on is off)."""
    out.status.conditions = [c for c in out.status.conditions if c.type is not kind]


def mark_phase(out: Outcome, phase: Phase, reason: Reason, message: str, now: str, generation: int) -> bool:
    """Set ``phase``, the Ready condition (True only in phase Ready) and the human ``message``; Degraded
    follows; ``contextLength`` is cleared when Failed. Returns whether Ready changed."""
    st = out.status
    st.phase = phase
    if phase is Phase.FAILED:  # nothing runs (scaled to 0): the CONTEXT column shows none; effective keeps the last
        st.context_length = None
    ready: ConditionStatus = "True" if phase is Phase.READY else "False"
    changed = st.set_condition(ConditionType.READY, ready, reason, message, now=now, generation=generation)
    st.message = message
    _degraded(out, now, generation)
    return changed


def mark_kv_in_force(st: InferenceServerStatus) -> None:
    """``kvCacheTokens`` (tokens; printer column KV TOKENS) from ``observed`` when it is the newest attempt's and
    that attempt may run (``contextLength`` set), else None: a failed server or a step-down shows no figure of an
    attempt that no longer runs. Called last in the pass, after every phase change."""
    cur, observed = st.current_attempt, st.observed
    in_force = cur is not None and observed is not None and observed.attempt == cur.number \
        and st.context_length is not None
    st.kv_cache_tokens = observed.kv_cache_tokens if in_force and observed is not None else None


def mark_failed(out: Outcome, reason: Reason, message: str, now: str, generation: int) -> None:
    """Failed with ``reason`` (nothing runs); a Warning Event when the verdict is new."""
    if mark_phase(out, Phase.FAILED, reason, message, now, generation):
        out.events.append(EventNote("Warning", reason, message))


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


def mark_clamped(out: Outcome, now: str, generation: int) -> None:
    """Degraded True / ContextClamped while any attempt under this spec was clamped (after ``mark_phase``,
    which sets Degraded from the attempt in force)."""
    st = out.status
    clamped = [a for a in st.attempts if a.clamped]
    if not clamped:
        return
    last = clamped[-1]
    cur = st.current_attempt
    tail = f"; now attempt {cur.number} with context {cur.effective.context_length}" if cur is not last and cur else ""
    problem = (last.evidence or "").split(";")[0].removeprefix(CLAMP_MARK).strip()  # the sentence, for humans
    st.set_condition(ConditionType.DEGRADED, "True", Reason.CONTEXT_CLAMPED,
                     f"attempt {last.number} at context {last.effective.context_length}: {problem}{tail}", now=now,
                     generation=generation)


def mark_failed_spec(out: Outcome, message: str, now: str, generation: int) -> None:
    """The spec passed the API server but not the models or the planner: Failed, BudgetFits False."""
    set_condition(out, ConditionType.BUDGET_FITS, "False", Reason.INVALID_SPEC, message, now, generation,
                  EventNote("Warning", Reason.INVALID_SPEC, message))
    mark_phase(out, Phase.FAILED, Reason.INVALID_SPEC, message, now, generation)


def mark_no_node(out: Outcome, message: str, now: str, generation: int) -> None:
    """No eligible node: Planning, BudgetFits Unknown, nothing created; re-checked on node changes."""
    set_condition(out, ConditionType.BUDGET_FITS, "Unknown", Reason.NO_ELIGIBLE_NODE, message, now, generation,
                  EventNote("Warning", Reason.NO_ELIGIBLE_NODE, message))
    mark_phase(out, Phase.PLANNING, Reason.NO_ELIGIBLE_NODE, message, now, generation)


def mark_does_not_fit(out: Outcome, result: Plan | str, now: str, generation: int) -> None:
    """The plan does not fit: BudgetFits False and Failed with the planner's reasons (or one verdict sentence
    found before planning, e.g. more pipeline stages than layers); nothing starts."""
    text = result if isinstance(result, str) else "; ".join(result.reasons)
    out.status.set_condition(ConditionType.BUDGET_FITS, "False", Reason.DOES_NOT_FIT, text, now=now,
                             generation=generation)
    mark_phase(out, Phase.FAILED, Reason.DOES_NOT_FIT, f"does not fit: {text}", now, generation)
    out.events.append(EventNote("Warning", Reason.DOES_NOT_FIT, f"nothing started: {text}"))


def mark_fits(out: Outcome, result: Plan, spec: InferenceServerSpec, headroom: float, now: str,
              generation: int) -> None:
    """BudgetFits from a plan that fits (``wording.budget_condition``: at or below the target)."""
    status, reason, text = budget_condition(result, spec, headroom)
    out.status.set_condition(ConditionType.BUDGET_FITS, status, reason, text, now=now, generation=generation)


def mark_refused(out: Outcome, message: str, now: str, generation: int,
                 reason: Reason = Reason.REFUSED_BY_POLICY) -> None:
    """Refused: Failed, ``Admitted`` False, Ready False, no endpoint; a Warning Event when new. ``reason``:
    RefusedByPolicy (operator policy), or PoolModelMismatch (the server disagrees with its InferencePool,
    ``converge/routing.py``)."""
    text = f"refused by operator policy: {message}" if reason is Reason.REFUSED_BY_POLICY else f"refused: {message}"
    set_condition(out, ConditionType.ADMITTED, "False", reason, text, now, generation,
                  EventNote("Warning", reason, text))
    mark_phase(out, Phase.FAILED, reason, text, now, generation)
    out.status.endpoint = None


def mark_groups_missing(out: Outcome, nodes: int, recheck_seconds: float, now: str, generation: int) -> None:
    """``spec.nodes`` > 1 while the API server serves no LeaderWorkerSets: Failed (nothing can run), Ready False
    (reason ``LeaderWorkerSetNotInstalled``) saying what to install, one Warning Event; planned again as soon as
    LeaderWorkerSets are served (looked at every ``recheck_seconds``)."""
    text = (f"spec.nodes {nodes} runs as a LeaderWorkerSet (leaderworkerset.x-k8s.io/v1), which this cluster does "
            f"not serve: install the LeaderWorkerSet controller (README: multi-node); looking again every "
            f"{recheck_seconds:.0f} s")
    old = out.status.condition(ConditionType.READY)
    if old is None or old.reason is not Reason.LWS_NOT_INSTALLED:
        out.events.append(EventNote("Warning", Reason.LWS_NOT_INSTALLED, text))
    mark_phase(out, Phase.FAILED, Reason.LWS_NOT_INSTALLED, text, now, generation)
    out.status.endpoint = None


def mark_admitted(out: Outcome, now: str, generation: int) -> None:
    """A previously refused server is allowed now: ``Admitted`` True (set only once it was False)."""
    old = out.status.condition(ConditionType.ADMITTED)
    if old is not None and old.status != "True":
        out.status.set_condition(ConditionType.ADMITTED, "True", Reason.ALLOWED_BY_POLICY,
                                 "allowed by operator policy" if old.reason is Reason.REFUSED_BY_POLICY
                                 else "admitted: nothing refuses it any more", now=now, generation=generation)


def mark_weights_cached(out: Outcome, status: ConditionStatus, reason: Reason, message: str, now: str,
                        generation: int) -> None:
    """``WeightsCached``; a Normal Event when it becomes True."""
    old = out.status.condition(ConditionType.WEIGHTS_CACHED)
    if status == "True" and (old is None or old.status != "True"):
        out.events.append(EventNote("Normal", reason, message))
    out.status.set_condition(ConditionType.WEIGHTS_CACHED, status, reason, message, now=now, generation=generation)


def mark_objects_refused(out: Outcome, refusal: Refusal, now: str, generation: int) -> None:
    """``ObjectsAccepted`` False with the refusal's message and reason (``converge/refusals.py``); Ready held when
    the refused write is one the server needs to serve (``Write.holds_ready``)."""
    out.status.set_condition(ConditionType.OBJECTS_ACCEPTED, "False", refusal.reason, refusal.message, now=now,
                             generation=generation)
    if refusal.write.holds_ready:
        hold_ready_for_refusal(out, refusal.message, now, generation, refusal.reason)


def hold_ready_for_refusal(out: Outcome, message: str, now: str, generation: int,
                           reason: Reason = Reason.OBJECT_REJECTED) -> None:
    """Ready False (reason ``ObjectRejected``/``ForeignObject``) and no endpoint while an object is refused; a Ready
    phase becomes Starting, any other phase stays (Degraded is not looked at again)."""
    st = out.status
    if st.phase is Phase.READY:
        st.phase = Phase.STARTING
    st.set_condition(ConditionType.READY, "False", reason, message, now=now, generation=generation)
    st.endpoint = None
    st.message = message


def mark_objects_accepted(out: Outcome, now: str, generation: int) -> None:
    """Every object was accepted: ``ObjectsAccepted`` True; a Ready held by a refusal (``HELD_BY``) goes back to
    waiting for the engine (the phase stays)."""
    st = out.status
    st.set_condition(ConditionType.OBJECTS_ACCEPTED, "True", Reason.OBJECTS_ACCEPTED,
                     "the API server accepted the Deployment and Service", now=now, generation=generation)
    ready = st.condition(ConditionType.READY)
    if ready is not None and ready.reason in HELD_BY:
        st.set_condition(ConditionType.READY, "False", Reason.ENGINE_STARTING,
                         "objects accepted; waiting for the engine", now=now, generation=generation)
        st.message = "objects accepted; waiting for the engine"


def mark_model_resolved(out: Outcome, status: ConditionStatus, reason: Reason, message: str, now: str,
                        generation: int) -> bool:
    """``ModelResolved`` (``converge/resolution.py``). An Event only when its reason is new, not on every new
    message (a wait's "retrying in N s" moves): Normal for HubUnreachable (waiting, not failing), Warning for
    another False. Returns changed (status, reason or message)."""
    old = out.status.condition(ConditionType.MODEL_RESOLVED)
    if old is None or old.reason is not reason:
        if reason is Reason.HUB_UNREACHABLE:
            out.events.append(EventNote("Normal", reason, message))
        elif status == "False":
            out.events.append(EventNote("Warning", reason, message))
    return out.status.set_condition(ConditionType.MODEL_RESOLVED, status, reason, message, now=now,
                                    generation=generation)
