"""Reconcile threads (runtime/threads.py) and the Event poster (runtime/lanes.py): started on demand up
to a limit, ended when idle, and a stop that neither waits for a slow API server nor raises."""

from __future__ import annotations

import asyncio
import threading
import time
from typing import Any

import pytest
from ctxfit.controller.runtime.lanes import EventPoster
from ctxfit.controller.runtime.threads import Stopped, WorkerThreads


def test_threads_start_on_demand_up_to_the_limit_and_end_when_idle() -> None:
    async def scenario() -> tuple[list[int], int, int, int]:
        pool = WorkerThreads(3, idle_seconds=0.2)
        peak = running = 0
        lock = threading.Lock()

        def work(i: int) -> int:
            nonlocal peak, running
            with lock:
                running += 1
                peak = max(peak, running)
            time.sleep(0.05)
            with lock:
                running -= 1
            return i * 2

        assert pool.threads == 0, "no thread before there is work"
        results = await asyncio.gather(*(pool.run(work, i) for i in range(10)))
        busy = pool.threads
        await asyncio.sleep(0.5)
        return list(results), peak, busy, pool.threads

    results, peak, busy, idle = asyncio.run(scenario())
    assert results == [i * 2 for i in range(10)]
    assert peak == 3 and busy == 3
    assert idle == 0, "idle threads end"


def test_errors_reach_the_caller() -> None:
    def fail() -> None:
        raise ValueError("boom")

    async def scenario() -> None:
        await WorkerThreads(1).run(fail)

    with pytest.raises(ValueError, match="boom"):
        asyncio.run(scenario())


def test_close_drops_queued_work_and_does_not_wait_for_a_stuck_call() -> None:
    async def scenario() -> tuple[bool, int, list[Any]]:
        pool = WorkerThreads(1)
        release = threading.Event()
        stuck = asyncio.ensure_future(pool.run(release.wait, 30))  # a request the API server never answers
        queued = asyncio.ensure_future(pool.run(lambda: "never"))
        await asyncio.sleep(0.05)
        running = await asyncio.to_thread(pool.close, 0.2)
        still_stuck = not stuck.done() and not release.is_set()  # close returned while the call was in flight
        outcomes = await asyncio.gather(queued, return_exceptions=True)
        with pytest.raises(Stopped):
            await pool.run(lambda: None)
        release.set()
        await asyncio.wait_for(stuck, 5)
        return still_stuck, running, outcomes

    still_stuck, running, outcomes = asyncio.run(scenario())
    assert still_stuck and running == 1, "close waited for the stuck call"
    assert isinstance(outcomes[0], Stopped)


def test_event_poster_posts_in_order_bounded_and_stops_cleanly() -> None:
    posted: list[str] = []
    gate = threading.Event()

    def post(server: dict[str, Any], type_: str, reason: str, message: str) -> None:
        gate.wait(5)
        assert set(server["metadata"]) <= {"name", "namespace", "uid", "resourceVersion"}, "identity only"
        posted.append(reason)

    poster = EventPoster(post, threads=1, limit=3)
    body = {"metadata": {"name": "s", "namespace": "ns", "uid": "u", "resourceVersion": "1",
                         "managedFields": [{"manager": "x"}]}, "spec": {"big": "x" * 1000}}
    accepted = [poster.post(body, "Normal", f"R{i}", "m") for i in range(6)]
    time.sleep(0.05)
    assert accepted[:3] == [True, True, True] and not all(accepted), "the backlog is bounded"
    gate.set()
    deadline = time.monotonic() + 5
    while len(posted) < accepted.count(True) and time.monotonic() < deadline:
        time.sleep(0.01)
    assert posted == [f"R{i}" for i, ok in enumerate(accepted) if ok]
    gate.clear()
    poster.post(body, "Normal", "InFlight", "m")
    time.sleep(0.05)
    poster.post(body, "Normal", "Queued", "m")
    assert poster.close(grace=0.2) == 1, "the queued one is dropped"
    assert "InFlight" not in posted, "a post stuck on the API server (gate.wait(5)) does not hold the stop"
    assert poster.post(body, "Normal", "Late", "m") is False, "after the stop: dropped, no exception"
    gate.set()
