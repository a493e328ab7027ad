"""The calibration table is shared input, never trusted (budget/calibrate.py).

Every entry and sample is validated on read and a bad one dropped (never raised); the table's size is bounded; and one
namespace's start-ups never move another namespace's plans: a namespace with samples uses only its own, one without
uses only what at least ``MIN_TENANTS`` namespaces agree on, one vote each (docs/design/calibration-trust.md).
"""

from __future__ import annotations

import math
from typing import Any

from ctxfit.api import GiB
from ctxfit.budget.calibrate import (
    CLIP_BYTES,
    MAX_BYTES,
    MAX_ENTRIES,
    MIN_TENANTS,
    CalibrationKey,
    CalibrationTable,
    Sample,
    correction,
    median_toward_zero,
)
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

KEY = CalibrationKey("vllm", "0.19", "NVIDIA-H100-80GB-HBM3", 1, 1)
H200 = CalibrationKey("vllm", "0.19", "NVIDIA-H200", 1, 1)


def sample(namespace: str, i: int, residual: int, **extra: Any) -> Sample:
    return Sample(f"{namespace}-uid-{i}/1", f"{namespace}/s{i}", residual, 40 * GiB, 40 * GiB,
                  f"2026-12-01T00:00:{i % 60:02d}Z", **extra)


junk = st.recursive(
    st.one_of(st.none(), st.booleans(), st.integers(min_value=-(1 << 80), max_value=1 << 80),
              st.floats(allow_nan=True, allow_infinity=True), st.text(max_size=20),
              st.sampled_from(["vllm", "sglang", "0.19", "NVIDIA-H100-80GB-HBM3", "../x", "a" * 300])),
    lambda inner: st.one_of(st.lists(inner, max_size=4), st.dictionaries(st.sampled_from(
        ["engine", "version", "gpu", "tp", "pp", "count", "samples", "id", "server", "residualBytes",
         "observedKvCacheBytes", "predictedKvCacheBytes", "time", "cudaTotalBytes", "gpuMemoryBytes", "entries"]),
        inner, max_size=8)),
    max_leaves=30)


def entry_of(samples: list[Any], **key: Any) -> dict[str, Any]:
    return {"engine": "vllm", "version": "0.19", "gpu": "NVIDIA-H100-80GB-HBM3", "tp": 1, "pp": 1, **key,
            "samples": samples}


@settings(max_examples=300, deadline=None, suppress_health_check=list(HealthCheck))
@given(st.lists(st.one_of(junk, st.builds(lambda s: entry_of(s), st.lists(junk, max_size=4))), max_size=6))
def test_any_table_reads_without_raising_and_keeps_only_valid_samples(entries: list[Any]) -> None:
    table = CalibrationTable.from_wire({"entries": entries})
    for key, entry in table.entries.items():
        assert key.engine in ("vllm", "sglang") and 1 <= key.tp <= 64 and 1 <= key.pp <= 64
        for s in entry.samples:
            assert isinstance(s.residual_bytes, int) and abs(s.residual_bytes) <= MAX_BYTES
            assert 0 <= s.observed_kv_bytes <= MAX_BYTES and 0 <= s.predicted_kv_bytes <= MAX_BYTES
    for namespace in (None, "team-a"):
        view = table if namespace is None else table.scoped(namespace)
        for key in table.entries:
            found = view.lookup(key, "vLLM")
            assert found is None or (abs(found.offset_bytes) < CLIP_BYTES and math.isfinite(found.offset_bytes))
            view.driver_reserve(key.gpu)


def test_inf_nan_and_out_of_range_numbers_are_dropped_and_said() -> None:
    good = {"id": "ok/1", "server": "a/x", "residualBytes": -GiB}
    bads = [float("inf"), float("-inf"), float("nan"), 1e999, 0.5, "12", True, None, [1], {"a": 1}, 1 << 60]
    samples = [{"id": f"bad/{i}", "server": "a/x", "residualBytes": b} for i, b in enumerate(bads)]
    table = CalibrationTable.from_wire({"entries": [entry_of([*samples, good])]})
    (entry,) = table.entries.values()
    assert [s.sample_id for s in entry.samples] == ["ok/1"]
    assert len(table.problems) == len(bads) and all("residualBytes" in p for p in table.problems)
    assert table.lookup(KEY, "vLLM") is not None


def test_keys_that_are_not_an_engine_version_and_gpu_label_are_dropped() -> None:
    good = [{"id": "ok/1", "server": "a/x", "residualBytes": -GiB}]
    table = CalibrationTable.from_wire({"entries": [
        entry_of(good, engine="llamacpp"), entry_of(good, version="latest"), entry_of(good, gpu="../../etc"),
        entry_of(good, tp=0), entry_of(good, pp=float("inf")), entry_of(good, tp=1e999), "junk", entry_of(good)]})
    assert list(table.entries) == [KEY] and len(table.problems) == 7


def test_an_unquoted_time_is_read() -> None:
    from datetime import UTC, datetime

    table = CalibrationTable.from_wire({"entries": [entry_of([{"id": "a/1", "residualBytes": 0,
                                                               "time": datetime(2026, 12, 1, tzinfo=UTC)}])]})
    assert table.entries[KEY].samples[0].time == "2026-12-01T00:00:00Z"


def test_the_table_holds_at_most_max_entries_on_read_and_on_add() -> None:
    many = [entry_of([{"id": f"{i}/1", "residualBytes": 0}], gpu=f"GPU-{i}") for i in range(MAX_ENTRIES * 10)]
    table = CalibrationTable.from_wire({"entries": many})
    assert len(table.entries) == MAX_ENTRIES and table.problems
    for i in range(5):
        table.add(CalibrationKey("vllm", "0.19", f"NEW-{i}", 1, 1), sample("a", 10_000 + i, 0))
    assert len(table.entries) == MAX_ENTRIES


def test_one_tenant_never_moves_another_tenants_plan() -> None:
    """The issue's case: crafted start-ups in one namespace shifted other namespaces' plans by +1.8 GiB, also
    through the "any GPU" fallback."""
    table = CalibrationTable()
    for i in range(50):
        table.add(KEY, sample("evil", i, 40 * GiB))
        table.add(H200, sample("evil", 100 + i, 40 * GiB, cuda_total_bytes=70 * GiB, gpu_memory_bytes=78 * GiB))
    assert table.scoped("victim").lookup(KEY, "vLLM") is None
    assert table.scoped("victim").lookup(CalibrationKey("vllm", "0.19", "NVIDIA-A100", 2, 1), "vLLM") is None
    assert table.scoped("victim").driver_reserve("NVIDIA-H200") is None
    own = table.scoped("evil").lookup(KEY, "vLLM")
    assert own is not None and own.offset_bytes > 0 and "samples of this namespace only" in own.reason
    # the victim's own start-ups are what its plans follow
    table.add(KEY, sample("victim", 1, -GiB))
    mine = table.scoped("victim").lookup(KEY, "vLLM")
    assert mine is not None and mine.offset_bytes == -GiB // 2 and mine.samples == 1


def test_namespaces_agreeing_calibrate_a_new_namespace_one_vote_each() -> None:
    table = CalibrationTable()
    for n, namespace in enumerate(("a", "b")):
        table.add(KEY, sample(namespace, n, -GiB))
    for i in range(40):
        table.add(KEY, sample("evil", 100 + i, 40 * GiB))
    found = table.scoped("new").lookup(KEY, "vLLM")
    assert MIN_TENANTS == 3 and found is not None
    assert found.offset_bytes == correction([-GiB, -GiB, CLIP_BYTES]) < 0, "two honest namespaces outvote forty"
    assert "one vote per namespace, 3 namespaces" in found.reason


tenant_values = st.lists(st.integers(min_value=-8 * GiB, max_value=8 * GiB), min_size=1, max_size=3)
"""At most 3 samples per honest namespace, at most 5 of them: 15 < ``KEEP_SAMPLES``, so the window never evicts an
honest sample (a flood evicts the flooding namespace's own), and the honest medians are those of all their samples."""


@settings(max_examples=300, deadline=None)
@given(honest=st.lists(tenant_values, min_size=2, max_size=5), hostile=st.lists(
    st.integers(min_value=-MAX_BYTES, max_value=MAX_BYTES), min_size=0, max_size=40))
def test_a_hostile_minority_stays_inside_the_honest_namespaces_range(honest: list[list[int]],
                                                                     hostile: list[int]) -> None:
    """Whatever one namespace records (any count, any value), another namespace's correction lies within the
    (shrunk) range of the honest namespaces' own medians, as long as the honest ones are the majority."""
    table = CalibrationTable()
    for t, values in enumerate(honest):
        for i, value in enumerate(values):
            table.add(KEY, sample(f"honest{t}", t * 100 + i, value))
    for i, value in enumerate(hostile):
        table.add(KEY, sample("evil", 10_000 + i, value))
    found = table.scoped("new").lookup(KEY, "vLLM")
    clip = lambda v: max(-CLIP_BYTES, min(CLIP_BYTES, v))  # noqa: E731
    medians = [median_toward_zero(v) for v in honest]
    if len(honest) + (1 if hostile else 0) < MIN_TENANTS:
        assert found is None
        return
    assert found is not None
    low, high = clip(min(min(medians), 0)), clip(max(max(medians), 0))
    assert low <= found.offset_bytes <= high, (found, medians)


def test_a_flood_of_one_namespace_evicts_its_own_samples_only() -> None:
    from ctxfit.budget.calibrate import KEEP_SAMPLES

    table = CalibrationTable()
    table.add(KEY, sample("victim", 1, -GiB))
    table.add(KEY, sample("other", 2, -GiB))
    for i in range(5 * KEEP_SAMPLES):
        table.add(KEY, sample("evil", 100 + i, 40 * GiB))
    kept = table.entries[KEY].samples
    assert len(kept) == KEEP_SAMPLES and {s.server for s in kept if not s.server.startswith("evil/")} == \
        {"victim/s1", "other/s2"}
    assert kept[-1].sample_id == f"evil-uid-{100 + 5 * KEEP_SAMPLES - 1}/1", "the newest is kept"
    assert table.entries[KEY].count == 2 + 5 * KEEP_SAMPLES
    mine = table.scoped("victim").lookup(KEY, "vLLM")
    assert mine is not None and mine.offset_bytes == -GiB // 2


def test_a_key_written_twice_is_one_entry_with_both_samples() -> None:
    table = CalibrationTable.from_wire({"entries": [entry_of([{"id": "a/1", "server": "a/x", "residualBytes": -GiB}]),
                                                    entry_of([{"id": "b/1", "server": "a/y", "residualBytes": .5}])]})
    assert [s.sample_id for s in table.entries[KEY].samples] == ["a/1"] and len(table.problems) == 1
