"""Policy properties, over random specs, configurations, failures and histories:

- the policy never returns a configuration in the history;
- every non-permanent step (Unknown excepted: it retries unchanged) changes at least one knob, and
  every knob it changes moves in the safe direction for that failure;
- the context never rises (in particular after a memory failure), and never exceeds the ceiling
  min(the model's maximum, context.target); a current context above it is capped there;
- an operator loop that keeps failing ends in a permanent verdict within ``spec.attempts`` starts.
"""

from __future__ import annotations

from typing import Any

from ctxfit.api import EffectiveConfig, InferenceServerSpec, MiB
from ctxfit.recovery import MEMORY_KINDS, Decision, FailedAttempt, Failure, FailureKind, decide
from ctxfit.recovery.limits import context_ceiling
from ctxfit.vocab.kinds import DOWNLOAD_KINDS
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.unit.recovery.policykit import configs, failures, specs

K = FailureKind
SIXTEEN_BIT = ("auto", "bfloat16", "float16")
ESCAPE = {"cuda_graph_max_batch_size": "down", "context_length": "down", "kv_cache_dtype": "8-bit"}
"""Other knobs a GPU-memory check may move when history brackets its fraction (checks.escape)."""
SAFE: dict[FailureKind, dict[str, str]] = {
    K.KV_CACHE_TOO_SMALL: {"context_length": "down", "gpu_memory_utilization": "up", "mem_fraction_static": "up"},
    # (the fraction rises only when no context >= context.minimum fits at the current one: checks/context.py)
    K.CONTEXT_EXCEEDS_MODEL_LIMIT: {"context_length": "down"},
    K.NO_KV_CACHE_MEMORY: {"gpu_memory_utilization": "up", "mem_fraction_static": "up", **ESCAPE},
    K.STATIC_MEMORY_TOO_SMALL: {"mem_fraction_static": "up", "gpu_memory_utilization": "up", **ESCAPE},
    K.GRAPH_CAPTURE_OOM: {"gpu_memory_utilization": "down", "mem_fraction_static": "down", **ESCAPE},
    K.GPU_OUT_OF_MEMORY: {"gpu_memory_utilization": "down", "mem_fraction_static": "down", "max_num_seqs": "down",
                          **ESCAPE},
    K.SAMPLER_WARMUP_OOM: {"max_num_seqs": "down"},
    K.MAMBA_CACHE_TOO_SMALL: {"max_num_seqs": "down"},
    K.INSUFFICIENT_FREE_GPU_MEMORY: {"gpu_memory_utilization": "down", **ESCAPE},
    K.HOST_OOM_KILLED: {"memory_limit_bytes": "up"},
    K.STARTUP_PROBE_TIMEOUT: {"startup_timeout_seconds": "up"},
    K.SHARED_MEMORY_TOO_SMALL: {"shm_bytes": "up"},
    K.KV_CACHE_DTYPE_UNSUPPORTED: {"kv_cache_dtype": "16-bit or e5m2", "context_length": "down"},
    # (fp8 -> fp8_e5m2 when the message names fp8e5 among the GPU's FP8 types: checks/context.py)
    K.LORA_BUFFERS_OOM: {"max_loras": "down", "mem_fraction_static": "down"},
    K.DRAFT_MODEL_OOM: {"num_speculative_tokens": "down", "gpu_memory_utilization": "down",
                        "mem_fraction_static": "down"},
    K.WEIGHTS_DO_NOT_FIT: {},
    K.INVALID_PARALLELISM: {},
    K.CUDA_DRIVER_TOO_OLD: {},
    K.UNSUPPORTED_GPU: {},
    K.MODEL_ACCESS_DENIED: {},
    K.UNKNOWN: {},
}
RETRY_UNCHANGED = (K.UNKNOWN, K.GPU_OUT_OF_MEMORY)
"""Kinds that may retry the same configuration once (GPUOutOfMemory: when its numbers are missing)."""
def replans() -> st.SearchStrategy[Any]:
    def make(result: int | None) -> Any:
        def replan(spec: InferenceServerSpec, pin: dict[str, Any]) -> tuple[int, str]:
            if result is None:
                raise ValueError("cannot plan")
            return result, f"fits {result}\nsecond line"

        return replan

    return st.one_of(st.none(), st.one_of(st.none(), st.integers(0, 1 << 21)).map(make))


def assert_safe(kind: FailureKind, before: EffectiveConfig, after: EffectiveConfig, *, above_ceiling: bool) -> None:
    a, b = before.model_dump(), after.model_dump()
    changed = [k for k in a if a[k] != b[k]]
    assert changed, f"{kind}: a non-permanent step must change a knob"
    allowed = {**SAFE[kind], "context_length": "down"} if above_ceiling else SAFE[kind]
    for knob in changed:
        assert knob in allowed, f"{kind} changed {knob}: {a[knob]} -> {b[knob]}"
        direction = allowed[knob]
        if direction == "up":
            assert b[knob] > a[knob], (kind, knob, a[knob], b[knob])
        elif direction == "down":
            assert b[knob] < a[knob], (kind, knob, a[knob], b[knob])
        elif direction == "8-bit":
            assert a[knob] in SIXTEEN_BIT and b[knob] == "fp8", (kind, knob, a[knob], b[knob])
        elif direction == "16-bit or e5m2":
            assert b[knob] in SIXTEEN_BIT or (b[knob] == "fp8_e5m2" and a[knob] in ("fp8", "fp8_e4m3")), (
                kind, knob, a[knob], b[knob])
        else:
            assert b[knob] in SIXTEEN_BIT, (kind, knob, b[knob])


def check_decision(spec: InferenceServerSpec, current: EffectiveConfig, failure: Failure,
                   history: list[FailedAttempt], decision: Decision) -> None:
    assert decision.explanation and "\n" not in decision.explanation
    if decision.permanent:
        assert decision.next is None
        return
    if failure.kind in DOWNLOAD_KINDS:  # retried as it was: never an engine flag, never a step-down
        assert decision.next == current, (failure.kind, decision.explanation)
        return
    assert decision.next is not None
    assert all(decision.next != attempt.config for attempt in history), "returned a configuration in history"
    assert decision.next.context_length <= current.context_length, "context rose"
    if failure.kind in MEMORY_KINDS:
        assert decision.next.context_length <= current.context_length
    ceiling = context_ceiling(spec)
    above = ceiling is not None and current.context_length > ceiling[0]
    if ceiling is not None:
        assert decision.next.context_length <= ceiling[0], ("above the ceiling", ceiling, decision.explanation)
    capped = current.model_copy(update={"context_length": ceiling[0]}) if ceiling and above else current
    if failure.kind is K.UNKNOWN:
        assert decision.next == capped
    elif failure.kind in RETRY_UNCHANGED and decision.next == capped:
        pass
    else:
        assert_safe(failure.kind, current, decision.next, above_ceiling=above)


@settings(max_examples=400, deadline=None)
@given(data=st.data())
def test_policy_properties(data: st.DataObject) -> None:
    spec = data.draw(specs())
    current = data.draw(configs(spec))
    failure = data.draw(failures())
    history = [FailedAttempt(c, data.draw(st.sampled_from(list(FailureKind))))
               for c in data.draw(st.lists(configs(spec), max_size=3))]
    replan = data.draw(replans())
    cap = data.draw(st.one_of(st.none(), st.integers(1, 1 << 21).map(lambda n: n * MiB)))
    # put the policy's own preferred answers into the history, to force its fallbacks
    for _ in range(data.draw(st.integers(0, 3))):
        first = decide(spec, current, failure, history, replan=replan, memory_cap_bytes=cap)
        if first.next is None or first.next == current:
            break
        history.append(FailedAttempt(first.next, data.draw(st.sampled_from(list(FailureKind)))))
    history = history[: max(0, spec.attempts - 2)] if data.draw(st.booleans()) else history
    decision = decide(spec, current, failure, history, replan=replan, memory_cap_bytes=cap)
    check_decision(spec, current, failure, history, decision)


@settings(max_examples=200, deadline=None)
@given(data=st.data())
def test_operator_loop_ends_within_attempts(data: st.DataObject) -> None:
    """Start, fail, decide, repeat: permanent within spec.attempts starts; context never rises after a
    memory failure; no configuration runs twice (except Unknown's single retry)."""
    spec = data.draw(specs())
    current = data.draw(configs(spec))
    history: list[FailedAttempt] = []
    memory_ceiling: int | None = None
    starts = 0
    while True:
        starts += 1
        failure = data.draw(failures())
        decision = decide(spec, current, failure, history)
        check_decision(spec, current, failure, history, decision)
        if failure.kind in MEMORY_KINDS:
            memory_ceiling = min(memory_ceiling or current.context_length, current.context_length)
        if decision.permanent:
            break
        assert decision.next is not None
        if memory_ceiling is not None:
            assert decision.next.context_length <= memory_ceiling
        history.append(FailedAttempt(current, failure.kind))
        current = decision.next
    assert starts <= spec.attempts


@settings(max_examples=300, deadline=None)
@given(data=st.data())
def test_download_failures_never_change_an_engine_flag(data: st.DataObject) -> None:
    """No download/network failure (any kind in DOWNLOAD_KINDS, any numbers, any history) changes an engine
    flag or steps down: the decision is permanent or the same configuration again."""
    spec = data.draw(specs())
    current = data.draw(configs(spec))
    failure = data.draw(failures())
    failure = Failure(data.draw(st.sampled_from(sorted(DOWNLOAD_KINDS))), failure.numbers, failure.evidence)
    history = [FailedAttempt(c, data.draw(st.sampled_from(list(FailureKind))))
               for c in data.draw(st.lists(st.one_of(st.just(current), configs(spec)), max_size=4))]
    decision = decide(spec, current, failure, history, replan=data.draw(replans()),
                      memory_cap_bytes=data.draw(st.one_of(st.none(), st.integers(1, 1 << 21).map(lambda n: n * MiB))))
    assert decision.permanent or decision.next == current, decision
    assert decision.next is None or decision.next.context_length == current.context_length
