"""The autoscaling threshold rule (``ctxfit.budget.autoscale``): Hypothesis properties and worked cases.

Properties: thresholds always strictly inside (0, 1), below the full point (the usage at
which one more request of the served context no longer fits in the pool), and the HPA's effective scale-out
point (threshold x 1.1) below it too; observed capacity beats planned; user overrides are used as given.
"""

from __future__ import annotations

import math

import pytest
from ctxfit.api.autoscaling import AutoscalingSpec
from ctxfit.api.observed import ObservedStatus
from ctxfit.budget.autoscale import (
    HPA_TOLERANCE,
    Capacity,
    autoscaling_status,
    cold_start_seconds,
    describe,
    full_fraction,
    observed_capacity,
    planned_capacity,
    thresholds,
)
from hypothesis import given
from hypothesis import strategies as st

POOLS = st.integers(1, 1 << 26)
CONTEXTS = st.integers(16, 1 << 24)
HEADROOMS = st.floats(0.0, 0.99, allow_nan=False)


@st.composite
def capacities(draw: st.DrawFn) -> Capacity:
    pool = draw(POOLS)
    context = draw(CONTEXTS)
    # the engine may report its own concurrency (sliding windows hold more than C / L requests)
    concurrency = draw(st.one_of(st.just(pool / context), st.floats(0.001, 4096.0, allow_nan=False)))
    return Capacity(pool, context, concurrency, draw(st.sampled_from(["planned", "observed"])))


def _full_point_tokens(capacity: Capacity) -> float:
    """Usage in tokens above which the free pool is smaller than one full-context request (R = C / M)."""
    return capacity.pool_tokens - capacity.pool_tokens / capacity.max_concurrency


@given(capacities(), HEADROOMS, st.one_of(st.none(), st.integers(1, 65536)), st.integers(1, 8))
def test_derived_thresholds_inside_and_below_the_full_point(capacity: Capacity, headroom: float,
                                                            max_num_seqs: int | None, data_parallel: int) -> None:
    found = thresholds(capacity, headroom=headroom, max_num_seqs=max_num_seqs, data_parallel=data_parallel)
    assert 0.0 < found.kv_usage_fraction < 1.0
    assert 0.0 < found.full_fraction <= 1.0
    assert found.kv_usage_fraction < found.full_fraction
    # the HPA acts only past its tolerance: that point is below the full point as well
    assert found.kv_usage_fraction * (1 + HPA_TOLERANCE) < found.full_fraction * (1 + 1e-3)
    assert found.kv_usage_tokens <= found.full_tokens <= capacity.pool_tokens
    # KEDA keeps thousandths (GetMetricTargetMili): a derived threshold is a whole number of them, >= 1
    assert found.kv_usage_fraction >= 0.001
    assert round(found.kv_usage_fraction * 1000, 6) == int(round(found.kv_usage_fraction * 1000, 6))
    if capacity.max_concurrency > 1.0 and 1 - 1 / capacity.max_concurrency >= 0.0011:
        # a pool that holds more than one full-context request
        assert found.full_fraction == pytest.approx(1 - 1 / capacity.max_concurrency)
        assert found.kv_usage_fraction * capacity.pool_tokens < _full_point_tokens(capacity)
        assert not found.warnings
    else:  # at most one full-context request: relative to the whole pool, and said so
        assert found.full_fraction == 1.0
        assert found.warnings and "whole pool" in found.warnings[0]
    assert found.queue >= 1


@given(capacities(), HEADROOMS, HEADROOMS)
def test_more_headroom_never_raises_the_threshold(capacity: Capacity, low: float, high: float) -> None:
    low, high = sorted((low, high))
    assert thresholds(capacity, headroom=high).kv_usage_fraction <= thresholds(capacity, headroom=low).kv_usage_fraction


@given(capacities(), capacities(), HEADROOMS)
def test_more_concurrency_never_lowers_the_full_point(a: Capacity, b: Capacity, headroom: float) -> None:
    small, large = sorted((a, b), key=lambda c: c.max_concurrency)
    if small.max_concurrency > 1.0 and 1 - 1 / small.max_concurrency >= 0.0011:  # both above one request
        assert full_fraction(small.max_concurrency) <= full_fraction(large.max_concurrency)


@given(capacities(), HEADROOMS, st.floats(0.001, 0.999, allow_nan=False), st.integers(1, 1000))
def test_overrides_are_used_as_given(capacity: Capacity, headroom: float, kv: float, queue: int) -> None:
    spec = AutoscalingSpec(max_replicas=3, kv_cache_usage_target=kv, queue_target=queue)
    found = thresholds(capacity, headroom=headroom, autoscaling=spec)
    assert (found.kv_usage_fraction, found.queue, found.kv_from_spec, found.queue_from_spec) == (kv, queue, True, True)
    assert found.kv_usage_tokens == math.floor(kv * capacity.pool_tokens)
    if kv * (1 + HPA_TOLERANCE) >= found.full_fraction:
        assert any("kvCacheUsageTarget" in w for w in found.warnings)


@given(st.floats(1.0, 1.0011, allow_nan=False), HEADROOMS)
def test_concurrency_just_above_one_counts_as_one_request(concurrency: float, headroom: float) -> None:
    """A full point below KEDA's smallest threshold x 1.1 cannot hold a threshold below it: whole pool."""
    found = thresholds(Capacity(100_000, 100_000, concurrency), headroom=headroom)
    assert found.full_fraction == 1.0
    assert 0.001 <= found.kv_usage_fraction < 1.0


@pytest.mark.parametrize(("kwargs", "message"), [
    ({"headroom": 1.0}, "headroom"),
    ({"headroom": -0.1}, "headroom"),
    ({"headroom": 0.2, "data_parallel": 0}, "data-parallel"),
], ids=["headroom-1", "headroom-negative", "dp-0"])
def test_bad_inputs_raise(kwargs: dict[str, float], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        thresholds(Capacity(1000, 100, 10.0), **kwargs)  # type: ignore[arg-type]


@pytest.mark.parametrize("target", [1.5, 0.0004], ids=["above-1", "below-keda-precision"])
def test_override_out_of_range_raises(target: float) -> None:
    """0.0004 would reach KEDA as "0.000" (``%.3f``): an HPA averageValue of 0, which the API server refuses."""
    spec = AutoscalingSpec.model_construct(min_replicas=1, max_replicas=2, kv_cache_usage_target=target,
                                           queue_target=None, scale_down_delay_seconds=300, scale_to_zero=False)
    with pytest.raises(ValueError, match="kvCacheUsageTarget"):
        thresholds(Capacity(1000, 100, 10.0), headroom=0.25, autoscaling=spec)


def test_worked_example_gqa_server() -> None:
    """A 226,000-token pool serving 32,768 tokens: M = 6.9, F = 1 - 1/6.9 = 85.5%, t = F x 0.75 / 1.1 = 58.2%."""
    capacity = planned_capacity(kv_pool_bytes=226_000 * 131072, kv_bytes_per_token=131072, context_length=32768)
    assert (capacity.pool_tokens, capacity.source) == (226_000, "planned")
    found = thresholds(capacity, headroom=0.25, max_num_seqs=256)
    assert found.full_fraction == pytest.approx(1 - 32768 / 226_000)
    assert found.kv_usage_fraction == math.floor((1 - 32768 / 226_000) * 0.75 / 1.1 * 1000) / 1000 == 0.582
    assert found.kv_usage_tokens == math.floor(found.kv_usage_fraction * 226_000)
    assert found.queue == 1  # floor(0.25 x 6.9)


def test_queue_uses_concurrency_capped_by_max_num_seqs_and_data_parallel() -> None:
    capacity = Capacity(1_000_000, 1000, 1000.0)
    assert thresholds(capacity, headroom=0.25, max_num_seqs=16).queue == 4
    assert thresholds(capacity, headroom=0.25, max_num_seqs=16, data_parallel=2).queue == 8
    assert thresholds(capacity, headroom=0.0, max_num_seqs=16).queue == 1


def test_observed_beats_planned() -> None:
    planned = Capacity(200_000, 32768, 200_000 / 32768)
    observed = ObservedStatus(attempt=1, kv_cache_tokens=150_000, max_concurrency=4.58, served_context_length=32768)
    capacity = observed_capacity(observed, planned)
    assert capacity == Capacity(150_000, 32768, 4.58, "observed")
    assert thresholds(capacity, headroom=0.25).kv_usage_fraction < thresholds(planned, headroom=0.25).kv_usage_fraction


@pytest.mark.parametrize(("observed", "expected"), [
    (None, Capacity(200_000, 32768, 200_000 / 32768)),
    (ObservedStatus(attempt=1), Capacity(200_000, 32768, 200_000 / 32768)),
    (ObservedStatus(attempt=1, kv_cache_tokens=100_000), Capacity(100_000, 32768, 100_000 / 32768, "observed")),
    (ObservedStatus(attempt=1, served_context_length=16384), Capacity(200_000, 16384, 200_000 / 16384, "observed")),
], ids=["none", "nothing-observed", "tokens-only", "clamped-context"])
def test_observed_fields_fall_back_one_by_one(observed: ObservedStatus | None, expected: Capacity) -> None:
    assert observed_capacity(observed, Capacity(200_000, 32768, 200_000 / 32768)) == expected


def test_pool_below_one_request() -> None:
    """SGLang serving 131,072 tokens from a 90,000-token pool (a ContextClamped case)."""
    found = thresholds(Capacity(90_000, 131072, 90_000 / 131072), headroom=0.25)
    assert found.full_fraction == 1.0
    assert found.kv_usage_fraction == 0.681  # floor(0.75 / 1.1, thousandths)
    assert found.queue == 1


def test_cold_start() -> None:
    assert cold_start_seconds(40 * 10**9, None) == (80, "estimated at 0.5 GB/s")
    assert cold_start_seconds(40 * 10**9, ObservedStatus(attempt=1, load_seconds=41.2)) == (42, "observed")


@pytest.mark.parametrize(("capacity", "target", "shown", "hidden"), [
    (Capacity(444_000, 16, 444_000 / 16), None, "no longer fits above 99.9%", "above 100%"),
    (Capacity(444_000, 32768, 444_000 / 32768), 0.001, "scale out at 0.1% KV = 444 of", "at 0% KV"),
], ids=["full-point-near-1", "smallest-target"])
def test_sentence_never_rounds_a_fraction_to_0_or_100_percent(capacity: Capacity, target: float | None, shown: str,
                                                               hidden: str) -> None:
    """A tiny context (F = 0.99996) or the smallest target (0.001) would read "above 100%" / "at 0% KV"."""
    spec = AutoscalingSpec(max_replicas=4, kv_cache_usage_target=target)
    text = describe(thresholds(capacity, headroom=0.25, autoscaling=spec), spec, (33, "estimated at 0.5 GB/s"))
    assert shown in text and hidden not in text, text


def test_sentence_and_status() -> None:
    spec = AutoscalingSpec(max_replicas=4)
    found = thresholds(Capacity(226_000, 32768, 226_000 / 32768), headroom=0.25)
    text = describe(found, spec, (80, "estimated at 0.5 GB/s"))
    assert text.startswith("scale out at 58% KV = 132k of 226k tokens (planned; one more 32,768-token request no "
                           "longer fits above 86%)")
    assert "or > 1 waiting requests per replica; 1..4 replicas; cold start ~80 s" in text
    status = autoscaling_status(found, spec, scaled_object="s", paused=False, cold_start=(80, "observed"))
    assert (status.kv_cache_usage_threshold, status.kv_cache_tokens_threshold, status.queue_threshold) == \
        (found.kv_usage_fraction, found.kv_usage_tokens, 1)
    assert (status.min_replicas, status.max_replicas, status.scaled_object, status.paused) == (1, 4, "s", False)
    assert status.current_replicas is None and status.capacity_source == "planned"
