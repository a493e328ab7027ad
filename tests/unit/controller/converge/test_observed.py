"""Predict, then verify (controller/converge/verify.py through ``converge``, with fakes): status.observed and its
error, the Event, exactly one calibration sample per attempt, the ContextClamped contract and its step,
and a plan calibrated from a table."""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import Any

from ctxfit.api import GiB
from ctxfit.api.status import ConditionType, InferenceServerStatus, parse_rfc3339
from ctxfit.budget.calibrate import CalibrationKey, CalibrationTable, Sample
from ctxfit.controller.converge import Outcome, converge
from ctxfit.controller.telemetry.metrics import Metrics
from ctxfit.controller.views.pods import PodView

from tests.unit.controller.builders import REPO, SETTINGS, applied, never, pod, snapshot, spec

sys.path.insert(0, str(REPO / "hack"))
from sim_startup import sglang_startup_log, vllm_startup_log


def reader(text: str) -> Any:
    calls: list[str] = []

    def read(p: PodView) -> str:
        calls.append(p.name)
        return text
    read.calls = calls  # type: ignore[attr-defined]
    return read


def ready_pass(body: dict[str, Any], read: Callable[[PodView], str | None], status: InferenceServerStatus | None = None,
               attempt: int = 1) -> Outcome:
    first = converge(snapshot(body, status), SETTINGS, never)
    return converge(snapshot(body, first.status, pods=(pod(attempt, ready=True),), deployment=applied(first)),
                    SETTINGS, never, read)


def test_vllm_startup_is_observed_once_with_error_event_and_one_sample() -> None:
    body = spec()
    plan_kv = converge(snapshot(body), SETTINGS, never).status.plan
    assert plan_kv is not None
    observed_bytes = plan_kv.per_gpu.kv_cache_bytes - int(0.42 * GiB)
    read = reader(vllm_startup_log(kv_cache_bytes=observed_bytes, kv_bytes_per_token=plan_kv.kv_bytes_per_token,
                                   max_model_len=131072))
    out = ready_pass(body, read)
    obs = out.status.observed
    assert obs is not None and obs.attempt == 1 and obs.pod == "kimi-1"
    assert obs.kv_cache_bytes is not None and abs(obs.kv_cache_bytes - observed_bytes) < 0.006 * GiB
    assert obs.error_bytes is not None and abs(obs.error_bytes + int(0.42 * GiB)) < 0.006 * GiB
    assert obs.served_context_length == 131072 and obs.kv_cache_tokens and obs.kv_cache_tokens > 131072
    assert obs.load_seconds == 14.43 and obs.source_lines
    notes = [e for e in out.events if e.reason.value == "Observed"]
    predicted_gib = f"predicted {plan_kv.per_gpu.kv_cache_bytes / GiB:.2f} GiB"
    observed_gib = f"/ observed {observed_bytes / GiB:.2f} GiB"
    assert len(notes) == 1 and predicted_gib in notes[0].message and observed_gib in notes[0].message
    assert out.status.phase is not None and out.status.phase.value == "Ready"
    assert [s.sample_id for _, s in out.samples] == ["uid-1/1"]
    key, sample = out.samples[0]
    version = ".".join(str(body["engine"]["version"]).split(".")[:2])
    assert key.text() == f"vllm/{version}/NVIDIA-RTX-PRO-6000-Blackwell-Server-Edition/tp8/pp1"
    assert abs(sample.residual_bytes + int(0.42 * GiB)) < 0.006 * GiB
    again = converge(snapshot(body, out.status, pods=(pod(1, ready=True),)), SETTINGS, never, read)
    assert read.calls == ["kimi-1"], "read once per attempt"
    assert not again.samples and again.status.observed == obs
    metrics = Metrics()
    metrics.observe_status("ns", "kimi", "vllm", again.status, 131072)
    text = metrics.registry.get_sample_value
    assert text("ctxfit_kv_cache_tokens", {"namespace": "ns", "name": "kimi", "engine": "vllm",
                                           "source": "observed"}) == obs.kv_cache_tokens
    assert text("ctxfit_prediction_error_bytes", {"namespace": "ns", "name": "kimi", "engine": "vllm"}) == \
        obs.error_bytes
    assert text("ctxfit_context_clamped", {"namespace": "ns", "name": "kimi", "engine": "vllm"}) == 0


def test_unknown_wording_is_not_observed_and_not_sampled() -> None:
    """Text without KV accounting is read again for STARTUP_WORDING_PATIENCE_SECONDS after Ready (the log file
    may still be behind the engine: only its first line written), then recorded as not observed."""
    from datetime import timedelta

    from ctxfit.controller.converge.verify import STARTUP_WORDING_PATIENCE_SECONDS

    body = spec()
    read = reader("fake-engine: vllm serve sim\n")
    early = ready_pass(body, read)
    assert early.status.observed is None and early.requeue_after is not None
    assert not [e for e in early.events if e.reason.value == "Observed"]
    ready_at = parse_rfc3339(early.status.attempts[0].finished_at or "")
    late = ready_at + timedelta(seconds=STARTUP_WORDING_PATIENCE_SECONDS + 1)
    out = converge(snapshot(body, early.status, pods=(pod(1, ready=True),), now=late), SETTINGS, never, read)
    assert read.calls == ["kimi-1", "kimi-1"]
    obs = out.status.observed
    assert obs is not None and obs.kv_cache_bytes is None and obs.error_bytes is None
    assert not out.samples
    assert out.status.phase is not None and out.status.phase.value == "Ready"
    assert any("not observed" in e.message for e in out.events)


def test_sglang_pool_below_context_is_clamped_and_steps_to_what_it_holds() -> None:
    body = spec("dsv4-flash-512k.yaml")
    pool = 300_000  # below the planned 524288
    read = reader(sglang_startup_log(max_total_num_tokens=pool, context_len=524288, kv_bytes_per_token=3800))
    out = ready_pass(body, read)
    st = out.status
    first, second = st.attempts
    assert first.outcome.value == "Failed" and first.failure_kind == "KVCacheTooSmall"
    assert first.clamped is True and first.evidence is not None and first.evidence.startswith("ContextClamped:")
    assert "KV pool holds 300000 tokens" in first.evidence
    assert 131072 <= second.effective.context_length <= pool
    degraded = st.condition(ConditionType.DEGRADED)
    assert degraded is not None and (degraded.status, degraded.reason.value) == ("True", "ContextClamped")
    assert "300000" in degraded.message
    assert any(e.type == "Warning" and e.reason.value == "ContextClamped" for e in out.events)
    assert st.phase is not None and st.phase.value == "SteppingDown"
    assert len(out.samples) == 1, "the observation is a valid sample even when clamped"
    fits = reader(sglang_startup_log(max_total_num_tokens=pool, context_len=second.effective.context_length,
                                     kv_bytes_per_token=3800))
    step = converge(snapshot(body, st, pods=(pod(2, ready=True),), deployment=None), SETTINGS, never, fits)
    ready = converge(snapshot(body, step.status, pods=(pod(2, ready=True),)), SETTINGS, never, fits)
    assert ready.status.phase is not None and ready.status.phase.value == "Ready"
    assert ready.status.observed is not None and ready.status.observed.attempt == 2
    degraded = ready.status.condition(ConditionType.DEGRADED)
    assert degraded is not None and degraded.reason.value == "ContextClamped"
    assert f"now attempt 2 with context {second.effective.context_length}" in degraded.message


def test_served_context_below_effective_is_clamped() -> None:
    body = spec("dsv4-flash-512k.yaml")
    read = reader(sglang_startup_log(max_total_num_tokens=2_000_000, context_len=262144, kv_bytes_per_token=3800))
    out = ready_pass(body, read)
    assert out.status.attempts[0].failure_kind == "KVCacheTooSmall"
    assert out.status.attempts[1].effective.context_length <= 262144


def test_calibration_table_moves_the_plan_and_says_so() -> None:
    body = spec()
    base = converge(snapshot(body), SETTINGS, never).status.plan
    assert base is not None and base.calibration_key
    key = CalibrationKey.parse(base.calibration_key)
    assert key is not None
    table = CalibrationTable()
    for i in range(3):
        table.add(key, Sample(f"u{i}/1", f"ns/s{i}", -int(3 * GiB), 0, 0, "t"))
    snap = snapshot(body)
    out = converge(type(snap)(**{**snap.__dict__, "calibration": table}), SETTINGS, never)
    plan = out.status.plan
    assert plan is not None and plan.calibration_bytes == -int(2 * GiB * 3 / 4)
    assert plan.reasons[0].startswith(f"calibrated from 3 start-ups of vLLM {key.version} on NVIDIA-RTX-PRO-6000")
    assert plan.per_gpu.kv_cache_bytes == base.per_gpu.kv_cache_bytes + plan.calibration_bytes
    assert plan.max_context_length < base.max_context_length


def test_an_unreadable_log_is_read_again_later_not_recorded_as_not_observed() -> None:
    """A Ready attempt whose log could not be read (None: no kubelet answer, a timeout) or was still empty (the
    runtime's log file lags the engine) is not "not observed": it is read on a later pass; past the patience it
    is recorded as not observed, saying the log could not be read."""
    from datetime import timedelta

    from ctxfit.controller.converge.verify import STARTUP_LOG_PATIENCE_SECONDS, STARTUP_LOG_RETRY_SECONDS

    body = spec()
    plan = converge(snapshot(body), SETTINGS, never).status.plan
    assert plan is not None
    for unreadable in (None, "", "\n"):
        calls: list[str] = []

        def gone(p: PodView, answer: str | None = unreadable, seen: list[str] = calls) -> str | None:
            seen.append(p.name)
            return answer
        out = ready_pass(body, gone)
        assert calls == ["kimi-1"] and out.status.observed is None, unreadable
        assert out.requeue_after is not None and out.requeue_after <= STARTUP_LOG_RETRY_SECONDS
        assert not [e for e in out.events if e.reason.value == "Observed"]
        assert out.status.phase is not None and out.status.phase.value == "Ready"
        text = vllm_startup_log(kv_cache_bytes=plan.per_gpu.kv_cache_bytes, kv_bytes_per_token=plan.kv_bytes_per_token,
                                max_model_len=131072)
        later = converge(snapshot(body, out.status, pods=(pod(1, ready=True),)), SETTINGS, never, reader(text))
        assert later.status.observed is not None and later.status.observed.kv_cache_bytes is not None
        assert len(later.samples) == 1
        ready_at = parse_rfc3339(out.status.attempts[0].finished_at or "")
        later_on = converge(snapshot(body, out.status, pods=(pod(1, ready=True),), now=ready_at + timedelta(
            seconds=100), deployment=applied(converge(snapshot(body), SETTINGS, never))), SETTINGS, never, gone)
        assert later_on.status.observed is None and later_on.requeue_after is not None
        assert later_on.requeue_after >= 100, "backs off: again after as long as it has been Ready"
        late = ready_at + timedelta(seconds=STARTUP_LOG_PATIENCE_SECONDS + 1)
        given_up = converge(snapshot(body, out.status, pods=(pod(1, ready=True),), now=late), SETTINGS, never, gone)
        obs = given_up.status.observed
        assert obs is not None and obs.attempt == 1 and obs.kv_cache_bytes is None and not given_up.samples
        notes = [e.message for e in given_up.events if e.reason.value == "Observed"]
        assert len(notes) == 1 and "could not be read" in notes[0] and "not observed" in notes[0]


def test_a_hand_edited_ready_time_neither_crashes_nor_polls_the_log_forever() -> None:
    """Reviewer: a Ready attempt's finishedAt written without an offset made the pass raise TypeError (naive minus
    aware); a missing one, or one far in the future (a clock stepped back, another replica's clock), kept the log
    read every 15 s forever (Ready for 0 s, or less). Without a zone (unknown, as group_restarts ranks it), missing
    or more than the patience ahead, the patience is over: recorded as not observed once; a little ahead waits."""
    from datetime import timedelta

    from ctxfit.api.status import now_rfc3339
    from ctxfit.controller.converge.verify import STARTUP_LOG_PATIENCE_SECONDS

    body = spec()
    out = ready_pass(body, lambda p: None)
    ready_at = parse_rfc3339(out.status.attempts[0].finished_at or "")
    for stamp, gives_up in [(now_rfc3339(ready_at).replace("Z", ""), True), (None, True),
                            (now_rfc3339(ready_at + timedelta(days=365)), True),
                            (now_rfc3339(ready_at + timedelta(seconds=30)), False)]:
        status = out.status.model_copy(deep=True)
        status.attempts[0].finished_at = stamp
        again = converge(snapshot(body, status, pods=(pod(1, ready=True),), now=ready_at + timedelta(seconds=20)),
                         SETTINGS, never, lambda p: None)
        notes = [e.message for e in again.events if e.reason.value == "Observed"]
        if gives_up:
            obs = again.status.observed
            assert obs is not None and obs.kv_cache_bytes is None and len(notes) == 1, stamp
            assert f"{STARTUP_LOG_PATIENCE_SECONDS:.0f} s" in notes[0], notes
        else:
            assert again.status.observed is None and not notes, stamp
            assert again.requeue_after is not None, stamp
