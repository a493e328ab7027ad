"""A pass queued from inside a kopf handler keeps nothing of that handler's context: kopf sets ``cause_var`` (the
cause, with the event's whole body) while a handler runs, and a task or timer copies the context it is created
in, so a pass waiting for a slot, and its requeue timer, would keep the body alive (WorkQueue's docstring)."""

from __future__ import annotations

import asyncio
import gc
import weakref

from ctxfit.controller.runtime.workqueue import WorkQueue
from kopf._core.actions.execution import cause_var
from kopf._core.actions.invocation import context


class Body(dict[str, object]):
    """Stands in for the event's decoded body (a dict subclass: plain dicts cannot be weakly referenced)."""


def test_neither_a_waiting_pass_nor_its_requeue_timer_keeps_the_handlers_cause() -> None:
    async def run() -> tuple[bool, bool, int]:
        release = asyncio.Event()
        passes: list[object] = []

        async def worker(key: object) -> float | None:
            passes.append(key)
            await release.wait()
            return 300.0  # a requeue timer, as a server waiting for its pod gets

        queue = WorkQueue(worker, concurrency=1)
        body = Body(kind="Pod", spec={"containers": [{"name": "engine"}]})
        held = weakref.ref(body)
        with context([(cause_var, body)]):  # as kopf runs a handler (kopf/_core/actions/execution.py)
            queue.add("server")
        del body
        await asyncio.sleep(0)
        gc.collect()
        while_waiting = held() is not None
        release.set()
        for _ in range(5):
            await asyncio.sleep(0)
        gc.collect()
        while_timer_pending = held() is not None
        pending = queue.pending
        await queue.close()
        return while_waiting, while_timer_pending, pending

    while_waiting, while_timer_pending, pending = asyncio.run(run())
    assert pending == 1, "the requeue timer is set"
    assert not while_waiting, "the pass (a task) keeps the handler's cause"
    assert not while_timer_pending, "the requeue timer keeps the handler's cause"


def test_the_pass_still_runs_in_the_queues_own_context() -> None:
    """What the queue's creator set (kopf's startup context: settings, the event loop) is seen by every pass."""
    import contextvars

    marker: contextvars.ContextVar[str] = contextvars.ContextVar("marker")

    async def run() -> list[str]:
        seen: list[str] = []

        async def worker(key: object) -> float | None:
            seen.append(marker.get("unset"))
            return None

        marker.set("startup")
        queue = WorkQueue(worker, concurrency=1)
        marker.set("a handler")
        queue.add("server")
        for _ in range(5):
            await asyncio.sleep(0)
        await queue.close()
        return seen

    assert asyncio.run(run()) == ["startup"]
