"""Fuzzing the classifier: random and adversarial text never raises and still classifies what it knows.

The adversarial alphabet is every marker, phase marker and extractor prefix the classifier knows,
plus digits, separators and line breaks: the texts most likely to make a regex backtrack. How fast it is
on them (64 KiB in milliseconds) is measured by bench/classify_bench.py, not asserted here.
"""

from __future__ import annotations

import pytest
from ctxfit.api import EngineKind
from ctxfit.recovery import Failure, FailureKind, Observation, classify
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from bench.classify_bench import adversarial_fragments, realistic_log, repeated

FRAGMENTS = adversarial_fragments()
ENGINES = st.sampled_from([None, EngineKind.VLLM, EngineKind.SGLANG])


def _observation(text: str, *, exit_code: int | None = 1, events: tuple[str, ...] = ()) -> Observation:
    return Observation(reason="Error", exit_code=exit_code, message=text[-2048:], log_tail=text, events=events)


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
    _check(classify(_observation("".join(parts)), engine))


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(unit=st.lists(st.sampled_from(FRAGMENTS), min_size=1, max_size=3).map("".join), engine=ENGINES)
def test_huge_repeated_fragments_never_raise(unit: str, engine: EngineKind | None) -> None:
    _check(classify(_observation(repeated(unit)), engine))


@pytest.mark.parametrize("engine", [None, EngineKind.VLLM, EngineKind.SGLANG])
def test_realistic_64_kib_log_is_classified(engine: EngineKind | None) -> None:
    assert classify(_observation(realistic_log()), engine).kind is FailureKind.KV_CACHE_TOO_SMALL


def test_oversized_input_is_cut_to_its_tail() -> None:
    text = "A" * (3 << 20) + "\nValueError: No available memory for the cache blocks."
    assert classify(Observation(message=text), EngineKind.VLLM).kind is FailureKind.NO_KV_CACHE_MEMORY


def test_every_fragment_repeated_to_64_kib_never_raises() -> None:
    """Each fragment alone, repeated to 64 KiB (bench/classify_bench.py times the same texts)."""
    for unit in FRAGMENTS:
        _check(classify(Observation(exit_code=1, message=repeated(unit)), EngineKind.VLLM))
