"""History bounds the policy: properties over random failure sequences, and table cases.

Properties (an operator loop: start, fail with a random kind and numbers, decide, repeat):
- no proposal repeats a failed configuration (only Unknown, and a GPUOutOfMemory without numbers, retry the
  same configuration, and never twice);
- no proposal crosses a failed bound: for one-knob kinds, checked directly (a limit that was OOM-killed is
  never proposed again or below; a fraction with no KV memory never again or below; ...); for every kind,
  no earlier failure rules the proposal out (``bounds.ruled_out_by``);
- permanent kinds never retry.
"""

from __future__ import annotations

from typing import Any

from ctxfit.api import EffectiveConfig, GiB
from ctxfit.recovery import FailedAttempt, Failure, FailureKind, decide
from ctxfit.recovery.bounds import Failed, knob_value, ruled_out_by
from ctxfit.vocab.kinds import DOWNLOAD_KINDS, PERMANENT_KINDS
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.unit.recovery.policykit import VLLM_BASE, configs, failures, make_spec, specs

K = FailureKind
ONE_KNOB: dict[FailureKind, tuple[str, str]] = {
    K.HOST_OOM_KILLED: ("memory_limit_bytes", "above"),
    K.SHARED_MEMORY_TOO_SMALL: ("shm_bytes", "above"),
    K.STARTUP_PROBE_TIMEOUT: ("startup_timeout_seconds", "above"),
    K.CONTEXT_EXCEEDS_MODEL_LIMIT: ("context_length", "below"),
    K.NO_KV_CACHE_MEMORY: ("memory_fraction", "above"),
    K.STATIC_MEMORY_TOO_SMALL: ("memory_fraction", "above"),
    K.INSUFFICIENT_FREE_GPU_MEMORY: ("memory_fraction", "below"),
}
"""One-knob kinds: the knob and the side later proposals must stay on (strictly)."""


def assert_respects(nxt: EffectiveConfig, failed: list[FailedAttempt]) -> None:
    for attempt in failed:
        assert nxt != attempt.config, "repeats a failed configuration"
        assert not ruled_out_by(nxt, Failed(attempt.config, attempt.failure)), (attempt.failure, attempt.config, nxt)
        if attempt.failure in ONE_KNOB:
            knob, side = ONE_KNOB[attempt.failure]
            new, old = knob_value(nxt, knob), knob_value(attempt.config, knob)
            assert isinstance(new, int | float) and isinstance(old, int | float)
            assert (new > old) if side == "above" else (new < old), (attempt.failure, knob, old, new)


@settings(max_examples=300, deadline=None)
@given(data=st.data())
def test_random_failure_sequences_respect_history(data: st.DataObject) -> None:
    spec = data.draw(specs())
    current = data.draw(configs(spec))
    history: list[FailedAttempt] = []
    retried: set[str] = set()
    # Download failures use no attempt (waiting is not failing), so they do not count towards the
    # spec.attempts + 1 failures within which a permanent verdict must come; the draws are capped all the same.
    counted = 0
    for _ in range(4 * (spec.attempts + 1)):
        if counted > spec.attempts:
            raise AssertionError("no permanent verdict within spec.attempts")
        failure = data.draw(failures())
        decision = decide(spec, current, failure, history)
        if failure.kind in PERMANENT_KINDS:
            assert decision.permanent, (failure.kind, decision.explanation)
        if decision.permanent:
            assert decision.next is None
            break
        nxt = decision.next
        assert nxt is not None
        if failure.kind in DOWNLOAD_KINDS:
            # getting the weights failed: never an engine flag change, never a failed configuration
            assert nxt == current, (failure.kind, decision.explanation)
            continue
        if nxt == current:
            assert failure.kind in (K.UNKNOWN, K.GPU_OUT_OF_MEMORY), failure.kind
            key = current.model_dump_json()
            assert key not in retried, "retried unchanged twice"
            assert all(a.config != current for a in history)
            retried.add(key)
        else:
            assert_respects(nxt, [*history, FailedAttempt(current, failure.kind)])
        history.append(FailedAttempt(current, failure.kind))
        current = nxt
        counted += 1
    else:
        assert counted <= spec.attempts, "no permanent verdict within spec.attempts"


@settings(max_examples=200, deadline=None)
@given(data=st.data())
def test_random_histories_never_cross_a_bound(data: st.DataObject) -> None:
    """Arbitrary earlier failures (not produced by the policy) bound the next proposal too."""
    spec = data.draw(specs())
    current = data.draw(configs(spec))
    history = [FailedAttempt(c, data.draw(st.sampled_from(list(FailureKind))))
               for c in data.draw(st.lists(configs(spec), max_size=4))]
    failure = data.draw(failures())
    decision = decide(spec, current, failure, history)
    if decision.permanent or decision.next is None or decision.next == current:
        return
    assert_respects(decision.next, [*history, FailedAttempt(current, failure.kind)])


def decide_row(kind: FailureKind, history: list[tuple[dict[str, Any], FailureKind]], engine: str = "vllm",
               current: dict[str, Any] | None = None, numbers: dict[str, Any] | None = None, **spec: Any) -> Any:
    base = VLLM_BASE if engine == "vllm" else VLLM_BASE.model_copy(
        update={"gpu_memory_utilization": None, "mem_fraction_static": 0.85, "cuda_graph_max_batch_size": 256})
    now = base.model_copy(update=current or {})
    past = [FailedAttempt(base.model_copy(update=c), k) for c, k in history]
    return decide(make_spec(engine, **spec), now, Failure(kind, numbers or {}, "line"), past)


def test_bracketed_fraction_with_nothing_else_left_stops_with_both_numbers() -> None:
    decision = decide_row(
        K.NO_KV_CACHE_MEMORY, [({"gpu_memory_utilization": 0.91, "cuda_graph_max_batch_size": 16},
                                K.GRAPH_CAPTURE_OOM)],
        current={"gpu_memory_utilization": 0.90, "cuda_graph_max_batch_size": 16},
        context={"target": 131072, "minimum": 131072})
    assert decision.permanent
    assert "gpu-memory-utilization 0.9 failed with NoKVCacheMemory (too low)" in decision.explanation
    assert "gpu-memory-utilization 0.91 failed with GraphCaptureOOM (too high)" in decision.explanation


def test_bracketed_fraction_changes_another_knob() -> None:
    decision = decide_row(K.NO_KV_CACHE_MEMORY, [({"gpu_memory_utilization": 0.91}, K.GRAPH_CAPTURE_OOM)])
    assert not decision.permanent and decision.next is not None
    assert decision.next.cuda_graph_max_batch_size == 256
    assert "no room left" in decision.explanation


def test_graph_oom_bound_keeps_later_no_kv_steps_below_it() -> None:
    decision = decide_row(K.NO_KV_CACHE_MEMORY, [({"gpu_memory_utilization": 0.93}, K.GRAPH_CAPTURE_OOM)],
                          current={"gpu_memory_utilization": 0.88})
    assert decision.next is not None and decision.next.gpu_memory_utilization == 0.92


def test_host_oom_bound_is_never_crossed_by_a_later_proposal() -> None:
    decision = decide_row(K.HOST_OOM_KILLED, [({"memory_limit_bytes": 96 * GiB}, K.HOST_OOM_KILLED)],
                          current={"memory_limit_bytes": 64 * GiB})
    assert decision.next is not None and decision.next.memory_limit_bytes > 96 * GiB


def test_permanent_kinds_never_retry() -> None:
    for kind in PERMANENT_KINDS:
        decision = decide_row(kind, [])
        assert decision.permanent and decision.next is None, kind
