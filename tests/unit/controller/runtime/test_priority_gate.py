"""PriorityGate (controller/runtime/priority.py) and the WorkQueue's first-reconcile-first order."""

from __future__ import annotations

import asyncio
from collections.abc import Hashable

import pytest
from ctxfit.controller.runtime.priority import PriorityGate, Ticket
from ctxfit.controller.runtime.workqueue import WorkQueue


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
    with pytest.raises(ValueError, match="reserved"):
        PriorityGate(2, reserved=2)


def test_reserved_slots_keep_room_for_first_passes() -> None:
    """Follow-ups (priority > 0) hold at most limit - reserved slots; a first pass arriving while they fill
    their share is admitted at once, and follow-ups waiting for their share do not block it."""

    async def scenario() -> tuple[int, bool, int]:
        gate = PriorityGate(3, reserved=1)
        release = asyncio.Event()
        peak_later = holding_later = 0

        async def follow_up() -> None:
            nonlocal peak_later, holding_later
            async with gate.slot(1):
                holding_later += 1
                peak_later = max(peak_later, holding_later)
                await release.wait()
                holding_later -= 1

        later = [asyncio.create_task(follow_up()) for _ in range(5)]
        await asyncio.sleep(0)
        admitted = asyncio.Event()

        async def first_pass() -> None:
            async with gate.slot(0):
                admitted.set()

        first = asyncio.create_task(first_pass())
        await asyncio.sleep(0.01)
        was_admitted = admitted.is_set()
        waiting = gate.waiting
        release.set()
        await asyncio.gather(first, *later)
        return peak_later, was_admitted, waiting

    peak_later, admitted, waiting = asyncio.run(scenario())
    assert peak_later == 2
    assert admitted, "the reserved slot went to the first pass"
    assert waiting == 3, "three follow-ups wait for their share"


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


def test_a_promoted_waiter_goes_ahead_of_follow_ups_behind_first_passes_already_waiting() -> None:
    async def scenario() -> tuple[list[str], int, bool, bool]:
        gate = PriorityGate(1)
        order: list[str] = []
        release = asyncio.Event()
        tickets = {name: Ticket() for name in ("late-1", "late-2", "first-1")}

        async def holder() -> None:
            async with gate.slot(0):
                await release.wait()

        async def waiter(name: str, priority: int) -> None:
            async with gate.slot(priority, tickets.get(name)):
                order.append(name)
                await asyncio.sleep(0)

        busy = asyncio.create_task(holder())
        await asyncio.sleep(0)
        tasks = [asyncio.create_task(waiter(n, p)) for n, p in [("late-1", 1), ("first-1", 0), ("late-2", 1)]]
        await asyncio.sleep(0)
        moved = gate.promote(tickets["late-2"], 0)
        again = gate.promote(tickets["late-2"], 0)  # already there: nothing changes
        tasks.append(asyncio.create_task(waiter("first-2", 0)))  # arrives after the promotion
        await asyncio.sleep(0)
        waiting = gate.waiting
        release.set()
        await asyncio.gather(busy, *tasks)
        return order, waiting, moved, again

    order, waiting, moved, again = asyncio.run(scenario())
    assert order == ["first-1", "late-2", "first-2", "late-1"]
    assert waiting == 4, "a promoted waiter is counted once"
    assert moved and not again


def test_promoting_an_admitted_or_cancelled_waiter_changes_nothing_and_leaks_no_slot() -> None:
    async def scenario() -> tuple[bool, bool, int]:
        gate = PriorityGate(2, reserved=1)
        admitted, cancelled = Ticket(), Ticket()
        release = asyncio.Event()

        async def hold(ticket: Ticket, priority: int) -> None:
            async with gate.slot(priority, ticket):
                await release.wait()

        running = asyncio.create_task(hold(admitted, 1))
        await asyncio.sleep(0)
        doomed = asyncio.create_task(hold(cancelled, 1))  # waits: later passes hold at most one slot
        await asyncio.sleep(0)
        doomed.cancel()
        await asyncio.gather(doomed, return_exceptions=True)
        moved = gate.promote(admitted, 0), gate.promote(cancelled, 0)
        release.set()
        await running
        async with gate.slot(0), gate.slot(0):  # both slots came back
            held = gate.held
        return moved[0], moved[1], held

    assert asyncio.run(scenario()) == (False, False, 2)


def test_queue_add_first_runs_a_key_seen_before_with_first_pass_priority() -> None:
    """``add(key, first=True)``: a key reconciled before goes ahead of follow-ups, behind first passes already
    waiting; a pass of it already waiting for a slot is moved up (and runs once)."""

    async def scenario() -> tuple[list[Hashable], list[bool]]:
        seen: list[Hashable] = []
        firsts: list[bool] = []
        hold = asyncio.Event()

        async def worker(key: Hashable) -> float | None:
            seen.append(key)
            if key == "busy":
                await hold.wait()
            return None

        queue = WorkQueue(worker, concurrency=1, observe_wait=lambda first, _: firsts.append(first))
        for key in ("woken", "waiting", "other"):
            queue.add(key)
            await asyncio.sleep(0.01)  # each has had its first reconcile
        queue.add("busy")
        await asyncio.sleep(0.01)
        queue.add("other")  # follow-ups, waiting for the slot
        queue.add("waiting")
        queue.add("new-1")  # a first pass, waiting
        await asyncio.sleep(0.01)
        queue.add("woken", first=True)
        queue.add("waiting", first=True)  # already in line: moved up
        queue.add("new-2")
        await asyncio.sleep(0.01)
        hold.set()
        await asyncio.sleep(0.05)
        await queue.close()
        return seen, firsts

    seen, firsts = asyncio.run(scenario())
    assert seen == ["woken", "waiting", "other", "busy", "new-1", "waiting", "woken", "new-2", "other"]
    assert firsts == [True] * 8 + [False], "a pass moved up counts as a first pass"


def test_queue_add_first_while_the_key_runs_is_followed_by_a_first_priority_pass() -> None:
    async def scenario() -> list[Hashable]:
        seen: list[Hashable] = []
        hold = asyncio.Event()

        async def worker(key: Hashable) -> float | None:
            seen.append(key)
            if key == "woken" and seen.count("woken") == 2:
                await hold.wait()  # running when it is woken
            await asyncio.sleep(0.001)
            return None

        queue = WorkQueue(worker, concurrency=1)
        for key in ("a", "b", "woken", "woken"):  # first passes, then a follow-up of "woken" that runs on
            queue.add(key)
            await asyncio.sleep(0.01)
        queue.add("a")  # follow-ups, waiting
        queue.add("b")
        await asyncio.sleep(0.01)
        queue.add("woken", first=True)
        hold.set()
        await asyncio.sleep(0.05)
        await queue.close()
        return seen

    assert asyncio.run(scenario()) == ["a", "b", "woken", "woken", "a", "woken", "b"]
