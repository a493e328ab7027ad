"""PriorityGate (controller/priority.py) and the WorkQueue's first-reconcile-first order."""

from __future__ import annotations

import asyncio
from collections.abc import Hashable

import pytest
from ctxfit.controller.priority import PriorityGate
from ctxfit.controller.workqueue import WorkQueue


def test_gate_admits_lowest_priority_first_fifo_within_one() -> None:
    async def scenario() -> list[str]:
        gate = PriorityGate(1)
        order: list[str] = []
        release = asyncio.Event()

        async def holder() -> None:
            async with gate.slot(5):
                await release.wait()

        async def waiter(name: str, priority: int) -> None:
            async with gate.slot(priority):
                order.append(name)
                await asyncio.sleep(0)

        first = asyncio.create_task(holder())
        await asyncio.sleep(0)
        tasks = [asyncio.create_task(waiter(n, p)) for n, p in
                 [("late-1", 1), ("first-1", 0), ("late-2", 1), ("first-2", 0)]]
        await asyncio.sleep(0)
        assert gate.waiting == 4
        release.set()
        await asyncio.gather(first, *tasks)
        return order

    assert asyncio.run(scenario()) == ["first-1", "first-2", "late-1", "late-2"]


def test_gate_never_exceeds_its_limit_and_survives_cancellation() -> None:
    async def scenario() -> tuple[int, int]:
        gate = PriorityGate(3)
        holding = peak = 0
        done = 0

        async def work(i: int) -> None:
            nonlocal holding, peak, done
            async with gate.slot(i % 2):
                holding += 1
                peak = max(peak, holding)
                await asyncio.sleep(0.001)
                holding -= 1
                done += 1

        tasks = [asyncio.create_task(work(i)) for i in range(40)]
        await asyncio.sleep(0)
        for task in tasks[10:20]:  # cancelled while waiting: their places must not leak slots
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        async with gate.slot(0):  # every slot came back
            pass
        return peak, done

    peak, done = asyncio.run(scenario())
    assert peak == 3
    assert done == 30


def test_gate_rejects_a_zero_limit() -> None:
    with pytest.raises(ValueError, match="limit"):
        PriorityGate(0)


def test_queue_runs_new_keys_before_follow_ups() -> None:
    """With one worker slot busy, a key seen before waits behind keys never reconciled yet."""

    async def scenario() -> list[Hashable]:
        seen: list[Hashable] = []
        gate = asyncio.Event()

        async def worker(key: Hashable) -> float | None:
            seen.append(key)
            if key == "busy":
                await gate.wait()
            return None

        queue = WorkQueue(worker, concurrency=1)
        queue.add("old")
        await asyncio.sleep(0.01)  # "old" has had its first reconcile
        queue.add("busy")
        await asyncio.sleep(0.01)
        queue.add("old")  # a follow-up
        queue.add("new-1")
        queue.add("new-2")
        await asyncio.sleep(0.01)
        gate.set()
        await asyncio.sleep(0.05)
        queue.forget("old")
        queue.add("old")  # forgotten (deleted, then created again): first again
        await asyncio.sleep(0.01)
        await queue.close()
        return seen

    assert asyncio.run(scenario()) == ["old", "busy", "new-1", "new-2", "old", "old"]
