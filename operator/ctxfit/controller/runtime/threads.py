"""Threads for reconciles (the API client is synchronous): as many as the backlog needs, up to a limit, and a stop
that does not wait for the API server. See docs/design/io-performance.md."""

from __future__ import annotations

import asyncio
import collections
import contextlib
import threading
import time
from collections.abc import Callable
from typing import Any, TypeVar

T = TypeVar("T")
IDLE_SECONDS = 30.0
"""A worker thread idle this long ends (a new one starts on demand)."""


class Stopped(Exception):
    """The pool is closed: the call was not run."""


class WorkerThreads:
    """At most ``limit`` daemon threads running submitted calls, FIFO (thread-safe ``close``)."""

    def __init__(self, limit: int, name: str = "ctxfit-reconcile", idle_seconds: float = IDLE_SECONDS) -> None:
        if limit < 1:
            raise ValueError(f"limit must be >= 1, got {limit}")
        self.limit, self.name, self.idle_seconds = limit, name, idle_seconds
        self._items: collections.deque[tuple[Callable[[], None], Callable[[], None]]] = collections.deque()
        lock = threading.Lock()
        self._cond = threading.Condition(lock)  # idle workers wait here for items
        self._done = threading.Condition(lock)  # close() waits here for the running calls
        self._threads = 0
        self._idle = 0
        self._busy = 0
        self._serial = 0
        self._closed = False

    @property
    def threads(self) -> int:
        """Worker threads alive now."""
        with self._cond:
            return self._threads

    async def run(self, fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        """``fn(*args, **kwargs)`` in a worker thread. Raises ``Stopped`` when closed before it started, or
        what ``fn`` raised. Cancelling the awaiting task does not interrupt a call that already started."""
        loop = asyncio.get_running_loop()
        future: asyncio.Future[T] = loop.create_future()

        def settle(outcome: Callable[[], None]) -> None:
            if not future.done():
                outcome()

        def hand_over(outcome: Callable[[], None]) -> None:
            with contextlib.suppress(RuntimeError):  # the loop is closed: the operator has stopped, nobody waits
                loop.call_soon_threadsafe(settle, outcome)

        def call() -> None:
            try:
                result = fn(*args, **kwargs)
            except BaseException as exc:  # noqa: BLE001 - handed to the awaiting task
                error = exc
                hand_over(lambda: future.set_exception(error))
            else:
                hand_over(lambda: future.set_result(result))

        with self._cond:
            if self._closed:
                raise Stopped
            self._items.append((call, lambda: hand_over(lambda: future.set_exception(Stopped()))))
            if len(self._items) <= self._idle:
                self._cond.notify()
            elif self._threads < self.limit:
                self._threads += 1
                self._serial += 1
                threading.Thread(target=self._work, name=f"{self.name}-{self._serial}", daemon=True).start()
        return await future

    def _work(self) -> None:
        while True:
            with self._cond:
                idle_since = time.monotonic()
                while not self._items and not self._closed:
                    left = self.idle_seconds - (time.monotonic() - idle_since)
                    if left <= 0:
                        self._threads -= 1
                        return
                    self._idle += 1
                    self._cond.wait(left)
                    self._idle -= 1
                if self._closed:
                    self._threads -= 1
                    return
                call, _ = self._items.popleft()
                self._busy += 1
            try:
                call()
            finally:
                with self._cond:
                    self._busy -= 1
                    if self._closed:  # only close() waits for this (waking idle workers costs CPU)
                        self._done.notify_all()

    def close(self, grace: float = 2.0) -> int:
        """Take no more calls, drop the ones not started (their callers get ``Stopped``), wait up to ``grace``
        s for the running ones. Returns how many were still running."""
        with self._cond:
            self._closed = True
            for _, abandon in self._items:
                abandon()
            self._items.clear()
            self._cond.notify_all()
            self._done.wait_for(lambda: self._busy == 0, timeout=grace)
            return self._busy
