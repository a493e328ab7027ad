"""A failed start -> the recovery policy -> the next attempt or a permanent verdict (pure).

``record_failure`` writes, in one status update: the failed attempt's outcome, kind, evidence and
explanation; then either attempt N+1 (the policy's configuration, with ``notBefore`` = now + backoff)
and phase SteppingDown (Retrying when the configuration is the same), or phase Failed with the policy's
reason (the Deployment then scales to 0).
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import TYPE_CHECKING

from ctxfit.api import InferenceServerSpec
from ctxfit.api.status import Attempt, AttemptOutcome, EffectiveStatus, Phase, Reason, now_rfc3339
from ctxfit.recovery import Attempt as PolicyAttempt
from ctxfit.recovery import Decision, Failure, FailureKind, Replan, decide
from ctxfit.recovery.evidence import trim_words

from ..settings import Settings
from ..views.pods import GPUNode, PodView
from .status import EventNote, mark_phase
from .wording import failure_phase

if TYPE_CHECKING:
    from .flow import Outcome

EVIDENCE_CHARS = 512


def policy_history(attempts: list[Attempt]) -> list[PolicyAttempt]:
    """Earlier failed attempts (all but the newest) as the policy's ``history``, oldest first."""
    out: list[PolicyAttempt] = []
    for attempt in attempts[:-1]:
        if attempt.outcome is not AttemptOutcome.FAILED or not attempt.failure_kind:
            continue
        try:
            kind = FailureKind(attempt.failure_kind)
        except ValueError:
            kind = FailureKind.UNKNOWN
        out.append(PolicyAttempt(attempt.effective.to_config(), kind))
    return out


def record_failure(
    out: Outcome, spec: InferenceServerSpec, cur: Attempt, pod: PodView, failure: Failure,
    node: GPUNode | None, settings: Settings, now: datetime, generation: int, replan: Replan,
    decision: Decision | None = None,
) -> None:
    """Record that ``cur`` failed in ``pod`` with ``failure`` and decide what comes next (see module doc).

    ``decision``: already made by the caller (a download failure with the claim's facts); else the policy's.
    """
    st = out.status
    stamp = now_rfc3339(now)
    limit = min(spec.attempts, settings.max_attempts)
    decision = decision or decide(
        spec.model_copy(update={"attempts": limit}), cur.effective.to_config(), failure,
        policy_history(st.attempts), replan=replan, memory_cap_bytes=node.memory_bytes if node else None,
    )
    cur.outcome, cur.finished_at, cur.pod = AttemptOutcome.FAILED, stamp, pod.name
    cur.node = pod.node
    cur.failure_kind = failure.kind.value
    cur.evidence = trim_words(failure.evidence, EVIDENCE_CHARS) or None
    cur.explanation = decision.explanation
    out.finished.append(cur)
    seen = f"attempt {cur.number} failed ({failure.kind.value}"
    seen += f": {trim_words(failure.evidence, 200)})" if failure.evidence else ")"
    if decision.permanent or decision.next is None:
        reason = Reason.ATTEMPTS_EXHAUSTED if decision.check == "AttemptsExhausted" else Reason.PERMANENT_FAILURE
        message = f"{seen}; {decision.explanation}; no further attempts, scaled to 0"
        mark_phase(out, Phase.FAILED, reason, message, stamp, generation)
        out.events.append(EventNote("Warning", reason, message))
        return
    failed_so_far = sum(1 for a in st.attempts if a.outcome is AttemptOutcome.FAILED)
    wait = max(settings.backoff(failed_so_far), float(decision.retry_after_seconds))
    nxt = Attempt(
        number=cur.number + 1,
        effective=EffectiveStatus.of(decision.next),
        started_at=stamp,
        not_before=now_rfc3339(now + timedelta(seconds=wait)) if wait >= 1 else None,
    )
    st.attempts.append(nxt)
    out.step_down_reasons.append(failure.kind.value)
    message = f"{seen}; {decision.explanation}; attempt {nxt.number} in {wait:.0f} s"
    phase, ready_reason = failure_phase(cur.effective.to_config(), decision.next)
    mark_phase(out, phase, ready_reason, message, stamp, generation)
    out.events.append(EventNote("Warning", Reason.ATTEMPT_FAILED, message))
