"""The attempt lifecycle, the one place an attempt changes: start, succeed, fail (through the recovery policy),
supersede, reopen, and the startup deadline (pure).

Who calls these verbs and why a failure is recorded before the workload changes: docs/design/attempts.md.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime, timedelta

from ctxfit.api import InferenceServerSpec
from ctxfit.api.status import (
    Attempt,
    AttemptOutcome,
    ConditionType,
    EffectiveStatus,
    Phase,
    Reason,
    now_rfc3339,
    parse_rfc3339,
)
from ctxfit.recovery import CheckName, Decision, FailedAttempt, Failure, FailureKind, Replan, decide
from ctxfit.recovery.evidence import trim_words

from ..settings import Settings
from ..views.pods import GPUNode, PodView
from .status import mark_phase
from .types import EventNote, Outcome
from .wording import failure_phase

EVIDENCE_CHARS = 512
REOPEN_NOTE = "not an engine failure: the pod showed no termination, exit code or message"
"""The explanation a reopened attempt carries (for humans; ``Attempt.reopened`` is what is read)."""
SPEC_RETRY_REASONS = frozenset({Reason.IMAGE_PULL_FAILED, Reason.POD_CREATION_FAILED})
"""Failed verdicts retried when the spec's generation moves past the one they were given for."""


def start(out: Outcome, effective: EffectiveStatus, now: str, *, not_before: str | None = None) -> Attempt:
    """Append the next attempt (number 1, or the newest's + 1) with ``effective``; returns it."""
    st = out.status
    newest = st.current_attempt
    attempt = Attempt(number=newest.number + 1 if newest else 1, effective=effective, started_at=now,
                      not_before=not_before)
    st.attempts.append(attempt)
    return attempt


def succeed(out: Outcome, cur: Attempt, pod: str, now: str) -> None:
    """``cur`` became Ready in ``pod``: Succeeded, counted, and an ``EngineReady`` Event."""
    cur.outcome, cur.finished_at, cur.pod = AttemptOutcome.SUCCEEDED, now, pod
    out.finished.append(cur)
    out.events.append(EventNote("Normal", Reason.ENGINE_READY,
                                f"attempt {cur.number} is Ready with context {cur.effective.context_length}"))


def supersede(out: Outcome, cur: Attempt, now: str) -> None:
    """A running ``cur`` will never finish (the spec changed): Superseded, counted."""
    if cur.outcome is AttemptOutcome.RUNNING:
        cur.outcome, cur.finished_at = AttemptOutcome.SUPERSEDED, now
        out.finished.append(cur)


def start_over(out: Outcome, key: str, now: str, announce: bool = True) -> None:
    """What the plan depends on changed (``spec_key``, or a moving branch moved: ``announce`` False, its own
    Event): supersede the running attempt, forget the plan, the history and the engine's report of it
    (``observed``: attempt numbers start again at 1, whose start-up must be read again); ``key`` is the new
    ``spec_key``; the pass plans again."""
    st = out.status
    if st.spec_key is not None and announce:
        out.events.append(EventNote("Normal", Reason.SPEC_CHANGED, "spec changed: planning again"))
    if st.current_attempt is not None:
        supersede(out, st.current_attempt, now)
    st.spec_key, st.plan, st.effective, st.context_length, st.node_product = key, None, None, None, None
    st.attempts, st.excluded_products, st.observed = [], None, None


def startup_overdue(pod: PodView, attempt: Attempt, settings: Settings, now: datetime) -> float | None:
    """Seconds until the pod's startup deadline (<= 0: overdue); None while its engine container never started
    (scheduling, image pulls and init containers use no startup budget)."""
    if pod.facts.engine_started_at is None:
        return None
    deadline = parse_rfc3339(pod.facts.engine_started_at) + timedelta(
        seconds=attempt.effective.startup_timeout_seconds + settings.startup_grace_seconds)
    return (deadline - now).total_seconds()


def policy_history(attempts: list[Attempt]) -> list[FailedAttempt]:
    """Earlier failed attempts (all but the newest) as the policy's ``history``, oldest first."""
    out: list[FailedAttempt] = []
    for attempt in attempts[:-1]:
        if attempt.outcome is not AttemptOutcome.FAILED or not attempt.failure_kind:
            continue
        try:
            kind = FailureKind(attempt.failure_kind)
        except ValueError:
            kind = FailureKind.UNKNOWN
        out.append(FailedAttempt(attempt.effective.to_config(), kind))
    return out


def _end_failed(out: Outcome, cur: Attempt, pod: str | None, node: str | None, kind: FailureKind, evidence: str,
                explanation: str, now: str) -> None:
    """The fields of a failed attempt; an attempt that succeeded earlier in this pass (a clamped context) is
    counted once, as the failed start it turned out to be."""
    cur.outcome, cur.finished_at, cur.pod, cur.node = AttemptOutcome.FAILED, now, pod, node
    cur.failure_kind = kind.value
    cur.evidence = trim_words(evidence, EVIDENCE_CHARS) or None
    cur.explanation = explanation
    if cur in out.finished:
        out.finished.remove(cur)
    out.finished.append(cur)


def fail(
    out: Outcome, spec: InferenceServerSpec, cur: Attempt, pod: PodView, failure: Failure,
    node: GPUNode | None, settings: Settings, now: datetime, generation: int, replan: Replan,
    decision: Decision | None = None, *, clamped: bool = False, elsewhere: Callable[[str], bool] | None = None,
) -> Decision:
    """``cur`` failed in ``pod`` with ``failure``: record it and what comes next, in one status update.

    Next is attempt N+1 (the policy's configuration, ``notBefore`` = now + backoff; phase SteppingDown, or
    Retrying when the configuration is the same) or phase Failed with the policy's reason (the workload then
    scales to 0). ``decision``: already made by the caller (a download failure with the claim's facts); else
    the policy's (``recovery.decide``). ``clamped``: the engine served less than the effective context.
    ``elsewhere``: called with what was seen when the verdict is permanent; True when the pass moved on to another
    GPU product (``products.move_on``: it recorded the next attempt), so the server does not end here.
    """
    st = out.status
    stamp = now_rfc3339(now)
    limit = min(spec.attempts, settings.max_attempts)
    decision = decision or decide(
        spec.model_copy(update={"attempts": limit}), cur.effective.to_config(), failure,
        policy_history(st.attempts), replan=replan, memory_cap_bytes=node.memory_bytes if node else None,
    )
    _end_failed(out, cur, pod.name, pod.node, failure.kind, failure.evidence, decision.explanation, stamp)
    silent = failure.kind is FailureKind.UNKNOWN and (failure.silent or not failure.evidence.strip())
    cur.silent, cur.clamped = silent, clamped or None  # silent always written: absent means "stored before it existed"
    seen = f"attempt {cur.number} failed ({failure.kind.value}"
    seen += f": {trim_words(failure.evidence, 200)})" if failure.evidence else ")"
    if decision.permanent or decision.next is None:
        if decision.permanent and elsewhere is not None and elsewhere(seen):
            return decision
        reason = Reason.ATTEMPTS_EXHAUSTED if decision.check is CheckName.ATTEMPTS_EXHAUSTED else \
            Reason.PERMANENT_FAILURE
        avoided = sorted(st.excluded_names())
        also = f"; no other eligible GPU product (excluded: {', '.join(avoided)})" if avoided else ""
        message = f"{seen}; {decision.explanation}{also}; no further attempts, scaled to 0"
        mark_phase(out, Phase.FAILED, reason, message, stamp, generation)
        out.events.append(EventNote("Warning", reason, message))
        return decision
    failed_so_far = sum(1 for a in st.attempts if a.outcome is AttemptOutcome.FAILED)
    wait = max(settings.backoff(failed_so_far), float(decision.retry_after_seconds))
    nxt = start(out, EffectiveStatus.of(decision.next), stamp,
                not_before=now_rfc3339(now + timedelta(seconds=wait)) if wait >= 1 else None)
    out.step_down_reasons.append(failure.kind.value)
    message = f"{seen}; {decision.explanation}; attempt {nxt.number} in {wait:.0f} s"
    phase, ready_reason = failure_phase(cur.effective.to_config(), decision.next)
    mark_phase(out, phase, ready_reason, message, stamp, generation)
    out.events.append(EventNote("Warning", Reason.ATTEMPT_FAILED, message))
    return decision


def fail_group(out: Outcome, cur: Attempt, leader: PodView, seen: str, explanation: str, now: str,
               generation: int) -> None:
    """A multi-node group was recreated past its budget without a failure the engine reported: the attempt and
    the server end Failed (``GroupRestartsExhausted``), no policy step (nothing to step down from)."""
    _end_failed(out, cur, leader.name, leader.node, FailureKind.UNKNOWN, seen, explanation, now)
    message = f"{seen}; {explanation}; no further attempts, scaled to 0"
    mark_phase(out, Phase.FAILED, Reason.GROUP_RESTARTS_EXHAUSTED, message, now, generation)
    out.events.append(EventNote("Warning", Reason.GROUP_RESTARTS_EXHAUSTED, message))


def reopen(out: Outcome, generation: int, now: str) -> None:
    """Retry a Failed server whose verdict was not the engine's.

    - an image or pod-creation failure (``SPEC_RETRY_REASONS``), or a group recreated past its budget, once the
      spec's generation moved past the verdict's: a fresh attempt with the same configuration;
    - attempts that ended the history ``silent`` (no word from the engine: lost with the node, never started)
      are superseded and a fresh attempt starts at once, at most once per history (``Attempt.reopened``), so an
      engine that hangs without a word still ends Failed.
    """
    st = out.status
    ready = st.condition(ConditionType.READY)
    newest = st.current_attempt
    if st.phase is not Phase.FAILED or ready is None or newest is None:
        return
    edited = ready.observed_generation is not None and generation > ready.observed_generation
    if ready.reason in SPEC_RETRY_REASONS:
        if edited:
            message = f"spec changed (generation {generation}) after {ready.reason.value}: starting again"
            out.events.append(EventNote("Normal", Reason.REOPENED, message))
            mark_phase(out, Phase.STARTING, Reason.ENGINE_STARTING, message, now, generation)
        return
    if ready.reason is Reason.GROUP_RESTARTS_EXHAUSTED:
        if edited:
            nxt = start(out, newest.effective.model_copy(deep=True), now)
            message = (f"spec changed (generation {generation}) after {Reason.GROUP_RESTARTS_EXHAUSTED.value}: "
                       f"starting attempt {nxt.number}")
            out.events.append(EventNote("Normal", Reason.REOPENED, message))
            mark_phase(out, Phase.STARTING, Reason.ENGINE_STARTING, message, now, generation)
        return
    if ready.reason not in (Reason.ATTEMPTS_EXHAUSTED, Reason.PERMANENT_FAILURE):
        return
    trailing: list[Attempt] = []
    for attempt in reversed(st.attempts):
        if attempt.outcome is not AttemptOutcome.FAILED or not attempt.silent:
            break
        trailing.append(attempt)
    if not trailing or any(a.reopened for a in st.attempts):
        return
    for attempt in trailing:
        attempt.outcome = AttemptOutcome.SUPERSEDED
        attempt.reopened = True
        attempt.explanation = f"{REOPEN_NOTE} (lost with its node or never started)"
    nxt = start(out, newest.effective.model_copy(deep=True), now)
    message = (f"{len(trailing)} failed attempt(s) had no evidence from the engine (pod lost, e.g. with its node): "
               f"not counted; starting attempt {nxt.number}")
    out.events.append(EventNote("Normal", Reason.REOPENED, message))
    mark_phase(out, Phase.STARTING, Reason.ENGINE_STARTING, message, now, generation)
