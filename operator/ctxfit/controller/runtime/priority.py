"""A concurrency limit that admits waiters by priority (lowest first), FIFO within one priority, with slots reserved
for priority 0; a waiter can be moved up while it waits (``Ticket``, ``promote``). See docs/design/io-performance.md."""

from __future__ import annotations

import asyncio
import heapq
import itertools
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager


class Ticket:
    """One waiter's place in a ``PriorityGate`` line: pass it to ``slot`` to be able to ``promote`` the waiter later.
    ``priority`` is the one it waits (or was admitted) with."""

    __slots__ = ("future", "priority")

    def __init__(self) -> None:
        self.priority = 0
        self.future: asyncio.Future[None] | None = None

    @property
    def waiting(self) -> bool:
        """In the line, not admitted yet."""
        return self.future is not None and not self.future.done()


class PriorityGate:
    """At most ``limit`` holders at a time; a freed slot goes to the waiter with the lowest ``priority``;
    holders of a priority above 0 never exceed ``limit - reserved``.

    Use inside the running event loop: ``async with gate.slot(priority): ...``. A waiter cancelled while
    waiting gives up its place (or the slot it was just handed). A waiter that passed a ``Ticket`` can be moved
    to a lower priority while it waits (``promote``: it then queues behind the waiters already at that priority).
    Raises ``ValueError`` for ``limit < 1`` or ``reserved`` outside ``[0, limit)``.
    """

    def __init__(self, limit: int, reserved: int = 0) -> None:
        if limit < 1:
            raise ValueError(f"limit must be >= 1, got {limit}")
        if not 0 <= reserved < limit:
            raise ValueError(f"reserved must be in [0, {limit}), got {reserved}")
        self._limit, self._reserved = limit, reserved
        self._held = 0
        self._held_later = 0
        self._waiters: list[tuple[int, int, Ticket]] = []  # a promoted ticket's old entry stays, skipped
        self._order = itertools.count()

    def _admissible(self, priority: int) -> bool:
        if self._held >= self._limit:
            return False
        return priority <= 0 or self._held_later < self._limit - self._reserved

    def _dispatch(self) -> None:
        """Hand free slots to the waiters in (priority, arrival) order while the head is admissible."""
        while self._waiters:
            priority, _, ticket = self._waiters[0]
            if not ticket.waiting or priority != ticket.priority:  # cancelled while waiting, or promoted since
                heapq.heappop(self._waiters)
                continue
            if not self._admissible(priority):
                return
            heapq.heappop(self._waiters)
            self._take(priority)
            assert ticket.future is not None
            ticket.future.set_result(None)

    def _take(self, priority: int) -> None:
        self._held += 1
        if priority > 0:
            self._held_later += 1

    def _release(self, priority: int) -> None:
        self._held -= 1
        if priority > 0:
            self._held_later -= 1
        self._dispatch()

    def promote(self, ticket: Ticket, priority: int) -> bool:
        """Move a waiting ``ticket`` to ``priority`` (lower than its own), behind the waiters already there. False
        (nothing changed) when it is not waiting or already waits at ``priority`` or lower."""
        if not ticket.waiting or priority >= ticket.priority:
            return False
        ticket.priority = priority
        heapq.heappush(self._waiters, (priority, next(self._order), ticket))
        self._dispatch()
        return True

    @asynccontextmanager
    async def slot(self, priority: int, ticket: Ticket | None = None) -> AsyncIterator[None]:
        """Hold one slot for the ``async with`` body; waits while none may be given to ``priority`` (or to the
        priority ``ticket`` was promoted to meanwhile)."""
        ticket = ticket if ticket is not None else Ticket()
        ticket.priority = priority
        if not self._waiters and self._admissible(priority):
            self._take(priority)
        else:
            future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
            ticket.future = future
            heapq.heappush(self._waiters, (priority, next(self._order), ticket))
            self._dispatch()
            try:
                await future
            except asyncio.CancelledError:
                if future.done() and not future.cancelled():
                    self._release(ticket.priority)  # the slot was handed to us just before the cancellation
                else:
                    future.cancel()  # skipped by _dispatch
                raise
        try:
            yield
        finally:
            self._release(ticket.priority)

    @property
    def waiting(self) -> int:
        """Waiters not yet admitted."""
        return sum(1 for priority, _, ticket in self._waiters if ticket.waiting and priority == ticket.priority)

    @property
    def held(self) -> int:
        """Slots held now."""
        return self._held
