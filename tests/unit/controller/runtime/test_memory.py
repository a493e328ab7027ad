"""``runtime/memory.py``: the C heap is trimmed when the resident set grew, never in a steady state, and the real
glibc call gives freed memory back (bench/hostile_rss.py measures it in the operator)."""

from __future__ import annotations

import json
import threading
from concurrent.futures import ThreadPoolExecutor

import pytest
from ctxfit.controller.runtime.memory import TRIM_GROWTH_BYTES, Trimmer, glibc_trim, resident_bytes

MIB = 1 << 20


class Heap:
    """A fake resident set and a trim that gives back all but ``floor``."""

    def __init__(self, size: int, floor: int) -> None:
        self.size, self.floor, self.calls = size, floor, 0

    def trim(self) -> int:
        self.calls += 1
        self.size = self.floor
        return 1


def test_trims_only_after_growth() -> None:
    heap = Heap(100 * MIB, 100 * MIB)
    trimmer = Trimmer(heap.trim, lambda: heap.size)
    for _ in range(100):  # steady: never
        assert not trimmer.check()
    heap.size += TRIM_GROWTH_BYTES - 1
    assert not trimmer.check() and heap.calls == 0
    heap.size += 1
    assert trimmer.check() and heap.calls == 1 and heap.size == 100 * MIB
    heap.floor = 130 * MIB  # memory really in use: growth is measured from after the trim
    heap.size = 140 * MIB
    assert trimmer.check() and heap.size == 130 * MIB
    heap.size = 140 * MIB
    assert not trimmer.check(), "10 MiB above the last trim's result"
    assert trimmer.trims == 2


def test_growth_counts_from_the_lowest_size_seen() -> None:
    heap = Heap(200 * MIB, 50 * MIB)
    trimmer = Trimmer(heap.trim, lambda: heap.size)
    heap.size = 60 * MIB  # freed by itself
    assert not trimmer.check()
    heap.size = 60 * MIB + TRIM_GROWTH_BYTES
    assert trimmer.check()


def test_without_glibc_nothing_is_called() -> None:
    trimmer = Trimmer(None, lambda: 10**12)
    assert not trimmer.check() and trimmer.trims == 0


def test_run_stops_when_asked() -> None:
    stopping = threading.Event()
    heap = Heap(0, 0)
    trimmer = Trimmer(heap.trim, lambda: heap.size)
    thread = threading.Thread(target=trimmer.run, args=(stopping, 0.01))
    thread.start()
    stopping.set()
    thread.join(5)
    assert not thread.is_alive()


def test_glibc_trim_gives_freed_memory_back() -> None:
    trim = glibc_trim()
    if trim is None:
        pytest.fail("no malloc_trim: this suite runs on glibc (Debian), the operator image too")
    before = resident_bytes()

    def churn(i: int) -> int:  # what a hostile body costs: large strings decoded in worker threads, then freed
        text = json.dumps([f"{i}-{j}" + "x" * 32768 for j in range(33)])
        return len(json.loads(json.dumps(json.loads(text))))

    with ThreadPoolExecutor(16) as pool:
        for _ in range(4):
            list(pool.map(churn, range(32)))
    grown = resident_bytes()
    trim()
    trimmed = resident_bytes()
    assert trimmed < grown, (before, grown, trimmed)
