"""A concurrency limit that admits waiters by priority (lowest first), FIFO within one priority.

Used by ``WorkQueue``: a key's first reconcile since the operator started (for a new server: creating its
Deployment) goes ahead of follow-up passes (status, Events, Service, pod changes), so a burst of new
servers gets its engines started before the bookkeeping of the earlier ones. asyncio's ``Semaphore`` wakes
waiters strictly FIFO, which interleaves the two (bench/reconcile_bench.py: with 1,000 servers created in a
burst, the create -> Deployment p95 was most of the run).
"""

from __future__ import annotations

import asyncio
import heapq
import itertools
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager


class PriorityGate:
    """At most ``limit`` holders at a time; a freed slot goes to the waiter with the lowest ``priority``.

    Use inside the running event loop: ``async with gate.slot(priority): ...``. A waiter cancelled while
    waiting gives up its place (or the slot it was just handed). Raises ``ValueError`` for ``limit < 1``.
    """

    def __init__(self, limit: int) -> None:
        if limit < 1:
            raise ValueError(f"limit must be >= 1, got {limit}")
        self._free = limit
        self._waiters: list[tuple[int, int, asyncio.Future[None]]] = []
        self._order = itertools.count()

    @asynccontextmanager
    async def slot(self, priority: int) -> AsyncIterator[None]:
        """Hold one slot for the ``async with`` body; waits while all are held."""
        if self._free > 0 and not self._waiters:
            self._free -= 1
        else:
            future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
            heapq.heappush(self._waiters, (priority, next(self._order), future))
            try:
                await future
            except asyncio.CancelledError:
                if future.done() and not future.cancelled():
                    self._release()  # the slot was handed to us just before the cancellation
                else:
                    future.cancel()  # skipped by _release
                raise
        try:
            yield
        finally:
            self._release()

    def _release(self) -> None:
        while self._waiters:
            _, _, future = heapq.heappop(self._waiters)
            if not future.done():
                future.set_result(None)
                return
        self._free += 1

    @property
    def waiting(self) -> int:
        """Waiters not yet admitted (cancelled ones may be counted until skipped)."""
        return len(self._waiters)
