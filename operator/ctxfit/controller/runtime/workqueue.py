"""A per-key work queue with coalescing and delayed requeue (controller-runtime style), on asyncio. See
docs/design/io-performance.md."""

from __future__ import annotations

import asyncio
import contextvars
import logging
import time
from collections.abc import Awaitable, Callable, Hashable

from .priority import PriorityGate, Ticket

logger = logging.getLogger(__name__)

Worker = Callable[[Hashable], Awaitable[float | None]]
"""``worker(key) -> seconds until the key wants another look, or None``."""
ObserveWait = Callable[[bool, float], None]
"""``observe_wait(first_pass, seconds_waited)``: first pass = admitted with a first reconcile's priority."""


class WorkQueue:
    """The per-key work queue (docs/design/io-performance.md, "The work queue"). Create and use it inside the
    running event loop.

    Passes, their done callbacks and requeue timers run in a copy of the context the queue was created in, not
    the caller's: made inside a kopf handler they would copy kopf's ``cause_var`` and keep that event's decoded
    body alive while the pass waits and until its requeue fires (docs/design/io-performance.md, "Memory: the
    queue's own context")."""

    def __init__(self, worker: Worker, concurrency: int, reserved: int = 0,
                 observe_wait: ObserveWait | None = None) -> None:
        self._worker = worker
        self._gate = PriorityGate(concurrency, reserved)
        self._observe_wait = observe_wait
        self._started: set[Hashable] = set()
        self._running: set[Hashable] = set()
        self._dirty: set[Hashable] = set()
        self._waiting: dict[Hashable, Ticket] = {}  # keys whose pass waits for a worker slot
        self._timers: dict[Hashable, asyncio.TimerHandle] = {}
        self._tasks: set[asyncio.Task[None]] = set()
        self._context = contextvars.copy_context()
        self._closed = False

    def add(self, key: Hashable, first: bool = False) -> None:
        """Reconcile ``key`` as soon as a worker slot is free.

        ``first``: that pass goes ahead with a first reconcile's priority although the key was reconciled before
        (a server whose model resolution just ended: this pass plans it and creates its engine's workload, the
        work a new server's first pass does). A pass of the key already waiting for a slot is moved up; one
        already running is followed by a pass with that priority."""
        if self._closed:
            return
        timer = self._timers.pop(key, None)
        if timer is not None:
            timer.cancel()
        if first:
            self._started.discard(key)
        if key in self._running:
            ticket = self._waiting.get(key)
            if not (first and ticket is not None and (ticket.future is None or self._gate.promote(ticket, 0))):
                self._dirty.add(key)  # (a pass not yet in the gate's line takes the first priority as it enters)
            return
        self._running.add(key)
        self._waiting[key] = Ticket()
        context = self._context.copy()
        task = asyncio.get_running_loop().create_task(self._run(key), context=context)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard, context=context)  # (else it copies the caller's context too)

    def add_after(self, key: Hashable, seconds: float) -> None:
        """Reconcile ``key`` in ``seconds`` unless an earlier look is already due."""
        if self._closed:
            return
        loop = asyncio.get_running_loop()
        when = loop.time() + max(0.0, seconds)
        timer = self._timers.get(key)
        if timer is not None:
            if timer.when() <= when:
                return
            timer.cancel()
        self._timers[key] = loop.call_at(when, self._fire, key, context=self._context.copy())

    def _fire(self, key: Hashable) -> None:
        self._timers.pop(key, None)
        self.add(key)

    def forget(self, key: Hashable) -> None:
        """Drop pending work for a deleted object."""
        timer = self._timers.pop(key, None)
        if timer is not None:
            timer.cancel()
        self._dirty.discard(key)
        self._started.discard(key)

    async def _run(self, key: Hashable) -> None:
        requeue: float | None = None
        added = time.monotonic()
        ticket = self._waiting.get(key) or Ticket()
        try:
            async with self._gate.slot(0 if key not in self._started else 1, ticket):
                self._waiting.pop(key, None)
                if self._observe_wait is not None:
                    self._observe_wait(ticket.priority == 0, time.monotonic() - added)
                self._started.add(key)
                requeue = await self._worker(key)
        except Exception:  # the worker reports its own errors; keep the queue alive
            logger.exception("reconcile of %s crashed", key)
            requeue = 10.0
        finally:
            self._waiting.pop(key, None)
            self._running.discard(key)
        if key in self._dirty:
            self._dirty.discard(key)
            self.add(key)
        elif requeue is not None:
            self.add_after(key, requeue)

    @property
    def pending(self) -> int:
        """Keys running or waiting on a timer (for tests and diagnostics)."""
        return len(self._running) + len(self._timers)

    async def close(self) -> None:
        """Cancel timers and in-flight reconciles."""
        self._closed = True
        for timer in self._timers.values():
            timer.cancel()
        self._timers.clear()
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
