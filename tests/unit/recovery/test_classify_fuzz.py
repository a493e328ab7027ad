"""Fuzzing the classifier: random and adversarial text never raises, and 64 KiB takes milliseconds.

The adversarial alphabet is every marker, phase marker and extractor prefix the classifier knows,
plus digits, separators and line breaks: the texts most likely to make a regex backtrack.
Timing asserts a generous 50 ms (the issue's budget is 10 ms; measured worst ~2 ms) to keep CI stable.
"""

from __future__ import annotations

import random
import time

import pytest
from ctxfit.api import EngineKind
from ctxfit.recovery import Failure, FailureKind, Observation, classify
from ctxfit.recovery.classify import engine_patterns
from ctxfit.recovery.generic import EVENT_PATTERNS, GENERIC_PATTERNS, GENERIC_PHASE_MARKERS
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

SIZE = 64 * 1024
BUDGET_SECONDS = 0.050


def _fragments() -> list[str]:
    found: set[str] = set()
    for kind in EngineKind:
        patterns, phases = engine_patterns(kind)
        for pattern in patterns:
            found.update(pattern.markers)
            found.update(pattern.requires_any)
            for ex in pattern.extractors:
                found.add(ex.regex.pattern.split("(")[0].replace("\\", ""))
        found.update(m.marker for m in phases)
    for pattern in GENERIC_PATTERNS + EVENT_PATTERNS:
        found.update(pattern.markers)
        for ex in pattern.extractors:
            found.add(ex.regex.pattern.split("(")[0].replace("\\", ""))
    found.update(m.marker for m in GENERIC_PHASE_MARKERS)
    found.update([
        "(", ")", "1", "1,", "1.", "0.9113", "11.7 GiB", " GiB", " MiB", "bytes", "\n", "\r", " ", "/",
        "Traceback (most recent call last)\n", "max seq len (1", "(1.5 GiB KV cache is needed",
        "Tried to allocate 1", "GPU 1 ", "of which 1.0 MiB is free", "=", "٣", "\x00", "\ufffd",
    ])
    return sorted(f for f in found if f)


FRAGMENTS = _fragments()
ENGINES = st.sampled_from([None, EngineKind.VLLM, EngineKind.SGLANG])


def _observation(text: str, *, exit_code: int | None = 1, events: tuple[str, ...] = ()) -> Observation:
    return Observation(reason="Error", exit_code=exit_code, message=text[-2048:], log_tail=text, events=events)


def _timed(observation: Observation, engine: EngineKind | None) -> tuple[Failure, float]:
    start = time.perf_counter()
    failure = classify(observation, engine)
    return failure, time.perf_counter() - start


def _check(failure: Failure) -> None:
    assert isinstance(failure.kind, FailureKind)
    assert isinstance(failure.evidence, str)
    for name, value in failure.numbers.items():
        assert isinstance(name, str) and isinstance(value, int | float)


@settings(max_examples=300, deadline=None)
@given(text=st.text(max_size=4000), exit_code=st.one_of(st.none(), st.integers(-(2**31), 2**31)),
       reason=st.one_of(st.none(), st.text(max_size=20)), events=st.lists(st.text(max_size=200), max_size=4),
       engine=ENGINES)
def test_random_text_never_raises(text: str, exit_code: int | None, reason: str | None, events: list[str],
                                  engine: EngineKind | None) -> None:
    observation = Observation(reason=reason, exit_code=exit_code, message=text, log_tail=text[::-1],
                              events=tuple(events))
    _check(classify(observation, engine))


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(parts=st.lists(st.one_of(st.sampled_from(FRAGMENTS), st.text(max_size=12),
                                st.integers(0, 10**12).map(lambda n: f"{n:,}")), max_size=300),
       engine=ENGINES)
def test_adversarial_fragments_never_raise(parts: list[str], engine: EngineKind | None) -> None:
    failure, _ = _timed(_observation("".join(parts)), engine)
    _check(failure)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(unit=st.lists(st.sampled_from(FRAGMENTS), min_size=1, max_size=3).map("".join), engine=ENGINES)
def test_huge_repeated_fragments_are_fast(unit: str, engine: EngineKind | None) -> None:
    text = (unit * (SIZE // len(unit) + 1))[:SIZE]
    # best of 3: a catastrophic regex is slow every time; a busy CI machine is slow only sometimes
    failure, seconds = min((_timed(_observation(text), engine) for _ in range(3)), key=lambda r: r[1])
    _check(failure)
    assert seconds < BUDGET_SECONDS, f"{seconds * 1000:.1f} ms on 64 KiB of {unit[:40]!r}"


def test_worst_case_64_kib_timing() -> None:
    """Every fragment alone and 200 random pairs, repeated to 64 KiB; prints the slowest (best of 3)."""
    rnd = random.Random(20261129)
    units = FRAGMENTS + [rnd.choice(FRAGMENTS) + rnd.choice(FRAGMENTS) for _ in range(200)]
    worst, worst_unit = 0.0, ""
    for unit in units:
        text = (unit * (SIZE // len(unit) + 1))[:SIZE]
        seconds = min(_timed(Observation(exit_code=1, message=text), EngineKind.VLLM)[1] for _ in range(3))
        if seconds > worst:
            worst, worst_unit = seconds, unit
    print(f"classifier worst case on 64 KiB: {worst * 1000:.2f} ms ({worst_unit[:40]!r})")
    assert worst < BUDGET_SECONDS


@pytest.mark.parametrize("engine", [None, EngineKind.VLLM, EngineKind.SGLANG])
def test_realistic_64_kib_log(engine: EngineKind | None) -> None:
    line = "INFO 05-02 10:11:12 [core.py:58] loading shard 17 of 118, 1,234,560 bytes, 11.7 GiB\n"
    tail = ("ValueError: To serve at least one request with the models's max seq len (262144), (17.16 GiB KV cache "
            "is needed, which is larger than the available KV cache memory (11.70 GiB). Based on the available "
            "memory, the estimated maximum model length is 178752.")
    text = (line * (SIZE // len(line)))[: SIZE - len(tail)] + tail
    failure, seconds = min((_timed(_observation(text), engine) for _ in range(3)), key=lambda r: r[1])
    assert failure.kind is FailureKind.KV_CACHE_TOO_SMALL
    assert seconds < BUDGET_SECONDS


def test_oversized_input_is_cut_to_its_tail() -> None:
    text = "A" * (3 << 20) + "\nValueError: No available memory for the cache blocks."
    failure, seconds = _timed(Observation(message=text), EngineKind.VLLM)
    assert failure.kind is FailureKind.NO_KV_CACHE_MEMORY
    assert seconds < 1.0
