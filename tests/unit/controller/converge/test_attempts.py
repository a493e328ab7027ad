"""The attempt lifecycle reads typed state, never message text: ``silent``, ``reopened``, ``clamped`` and
``Decision.check``; statuses stored before those fields existed are read into them once; ``set_condition``
says whether anything changed."""

from __future__ import annotations

from datetime import timedelta

from ctxfit.api.status import (
    Attempt,
    AttemptOutcome,
    ConditionType,
    EffectiveStatus,
    InferenceServerStatus,
    Phase,
    Reason,
)
from ctxfit.controller.converge import Outcome, attempts, converge
from ctxfit.controller.converge.status import mark_clamped, mark_phase
from ctxfit.recovery import Failure, FailureKind, Observation, classify

from tests.unit.controller.builders import KV_FAILURE, NOW, SETTINGS, applied, diagnosed, never, pod, snapshot, spec

STAMP = "2026-01-01T12:00:00Z"


def _started() -> Outcome:
    return converge(snapshot(spec()), SETTINGS, never)


def _effective(out: Outcome) -> EffectiveStatus:
    return out.status.attempts[0].effective


def _failed_status(*found: Attempt, reason: Reason = Reason.ATTEMPTS_EXHAUSTED) -> InferenceServerStatus:
    out = Outcome(status=_started().status.model_copy(deep=True))
    out.status.attempts = list(found)
    mark_phase(out, Phase.FAILED, reason, "failed", STAMP, 1)
    return out.status


def test_statuses_stored_before_the_typed_flags_are_read_into_them() -> None:
    effective = _effective(_started()).to_wire()
    base = {"effective": effective, "startedAt": STAMP}
    silent = Attempt.model_validate({**base, "number": 1, "outcome": "Failed", "failureKind": "Unknown",
                                     "evidence": "terminated"})
    reopened = Attempt.model_validate({**base, "number": 2, "outcome": "Superseded", "explanation":
                                       "not an engine failure: the pod showed no termination, exit code or message "
                                       "(lost with its node or never started)"})
    clamped = Attempt.model_validate({**base, "number": 3, "outcome": "Failed", "failureKind": "KVCacheTooSmall",
                                      "evidence": "ContextClamped: the engine serves context 4096, below 131072"})
    plain = Attempt.model_validate({**base, "number": 4, "outcome": "Failed", "failureKind": "KVCacheTooSmall",
                                    "evidence": "the estimated maximum model length is 178752"})
    assert (silent.silent, reopened.reopened, clamped.clamped) == (True, True, True)
    assert (plain.silent, plain.reopened, plain.clamped) == (None, None, None)
    written = Attempt.model_validate({**base, "number": 5, "outcome": "Failed", "failureKind": "Unknown",
                                      "evidence": "terminated", "silent": False})
    assert written.silent is False, "a stored flag wins over the legacy text"


def test_a_silent_failure_is_recorded_typed_and_a_spoken_one_is_not() -> None:
    nothing = classify(Observation())
    assert nothing.kind is FailureKind.UNKNOWN and nothing.silent
    assert not classify(Observation(reason="Error", exit_code=1)).silent
    start = _started()
    crashed = (pod(1, terminated="Error"),)
    out = converge(snapshot(spec(), start.status, pods=crashed, deployment=applied(start)), SETTINGS,
                   diagnosed(nothing))
    assert out.status.attempts[0].silent is True
    spoke = converge(snapshot(spec(), start.status, pods=crashed, deployment=applied(start)), SETTINGS,
                     diagnosed(Failure(FailureKind.UNKNOWN, {}, "RuntimeError: boom")))
    assert spoke.status.attempts[0].silent is False
    assert "silent" in spoke.status.to_wire()["attempts"][0], "written explicitly: absent means legacy"  # type: ignore[index]


def test_reopen_reads_the_silent_flag_not_the_evidence_text() -> None:
    effective = _effective(_started())
    worded = _failed_status(Attempt(number=1, effective=effective, started_at=STAMP, outcome=AttemptOutcome.FAILED,
                                    failure_kind="Unknown", evidence="terminated", silent=False))
    out = converge(snapshot(spec(), worded), SETTINGS, never)
    assert out.status.phase is Phase.FAILED and len(out.status.attempts) == 1, "evidence text alone reopens nothing"
    silent = _failed_status(Attempt(number=1, effective=effective, started_at=STAMP, outcome=AttemptOutcome.FAILED,
                                    failure_kind="Unknown", evidence="whatever it said", silent=True))
    out = converge(snapshot(spec(), silent), SETTINGS, never)
    assert [a.outcome for a in out.status.attempts] == [AttemptOutcome.SUPERSEDED, AttemptOutcome.RUNNING]
    assert out.status.attempts[0].reopened is True and out.status.phase is Phase.STARTING


def test_a_history_reopened_once_is_not_reopened_again_whatever_its_explanation_says() -> None:
    effective = _effective(_started())
    status = _failed_status(
        Attempt(number=1, effective=effective, started_at=STAMP, outcome=AttemptOutcome.SUPERSEDED,
                explanation="reworded", reopened=True),
        Attempt(number=2, effective=effective, started_at=STAMP, outcome=AttemptOutcome.FAILED,
                failure_kind="Unknown", silent=True))
    out = converge(snapshot(spec(), status, now=NOW + timedelta(minutes=5)), SETTINGS, never)
    assert out.status.phase is Phase.FAILED and len(out.status.attempts) == 2 and not out.events


def test_degraded_context_clamped_follows_the_clamped_flag() -> None:
    effective = _effective(_started())
    out = Outcome(status=InferenceServerStatus(attempts=[
        Attempt(number=1, effective=effective, started_at=STAMP, outcome=AttemptOutcome.FAILED,
                failure_kind="KVCacheTooSmall", evidence="the engine serves less", clamped=True)]))
    mark_clamped(out, STAMP, 1)
    degraded = out.status.condition(ConditionType.DEGRADED)
    assert degraded is not None and degraded.reason is Reason.CONTEXT_CLAMPED
    worded = Outcome(status=InferenceServerStatus(attempts=[
        Attempt(number=1, effective=effective, started_at=STAMP, outcome=AttemptOutcome.FAILED,
                failure_kind="KVCacheTooSmall", evidence="ContextClamped: text only", clamped=False)]))
    mark_clamped(worded, STAMP, 1)
    assert worded.status.condition(ConditionType.DEGRADED) is None


def test_attempts_exhausted_is_read_from_the_typed_check() -> None:
    body = {**spec(), "attempts": 2}
    start = converge(snapshot(body), SETTINGS, never)
    state = start.status
    for step in range(2):
        cur = state.attempts[-1].number
        state = converge(snapshot(body, state, pods=(pod(cur, terminated="Error"),), deployment=applied(start),
                                  now=NOW + timedelta(minutes=10 * step)), SETTINGS, diagnosed(KV_FAILURE)).status
    ready = state.condition(ConditionType.READY)
    assert state.phase is Phase.FAILED and ready is not None and ready.reason is Reason.ATTEMPTS_EXHAUSTED


def test_set_condition_returns_whether_anything_changed() -> None:
    st = InferenceServerStatus()
    assert st.set_condition(ConditionType.READY, "False", Reason.ENGINE_STARTING, "starting", now=STAMP)
    assert not st.set_condition(ConditionType.READY, "False", Reason.ENGINE_STARTING, "starting", now=STAMP)
    assert st.set_condition(ConditionType.READY, "False", Reason.ENGINE_STARTING, "loading", now=STAMP)
    assert st.set_condition(ConditionType.READY, "True", Reason.ENGINE_STARTING, "loading", now=STAMP)
    assert st.set_condition(ConditionType.READY, "True", Reason.ENGINE_STARTING, "x" * 2000, now=STAMP)
    assert not st.set_condition(ConditionType.READY, "True", Reason.ENGINE_STARTING, "x" * 2000, now=STAMP), \
        "compared as stored (cut to 1024 characters)"


def test_start_numbers_attempts_and_fail_counts_an_attempt_once() -> None:
    out = Outcome(status=InferenceServerStatus())
    effective = _effective(_started())
    first = attempts.start(out, effective, STAMP)
    second = attempts.start(out, effective, STAMP, not_before=STAMP)
    assert (first.number, second.number, second.not_before) == (1, 2, STAMP)
    attempts.succeed(out, second, "kimi-2", STAMP)
    assert out.finished == [second] and out.events[-1].reason is Reason.ENGINE_READY
