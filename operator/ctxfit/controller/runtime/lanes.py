"""Writes done off the reconcile path by a few threads (``Lane``), with a bounded backlog and a clean stop; Normal
Events are the first user (``EventPoster``), Service creation the second (``service_lane``). See
docs/design/io-performance.md."""

from __future__ import annotations

import collections
import logging
import threading
from collections.abc import Callable
from typing import Any

logger = logging.getLogger(__name__)

Post = Callable[[dict[str, Any], str, str, str], None]
"""``post(server, type, reason, message)``: ``Kube.post_event``."""


class Lane:
    """``threads`` daemon threads running submitted calls, oldest first (thread-safe). A call's exception is
    logged at DEBUG and swallowed: a caller that needs the outcome records it inside the call."""

    def __init__(self, name: str, threads: int = 2, limit: int = 5000) -> None:
        self._limit = limit
        self._queue: collections.deque[Callable[[], None]] = collections.deque()
        lock = threading.Lock()
        self._cond = threading.Condition(lock)  # idle threads wait here for calls
        self._done = threading.Condition(lock)  # close() waits here for the calls in flight
        self._closed = False
        self._busy = 0
        self.dropped = 0
        self._threads = [threading.Thread(target=self._run, name=f"{name}-{i}", daemon=True) for i in range(threads)]
        for thread in self._threads:
            thread.start()

    def submit(self, call: Callable[[], None]) -> bool:
        """Queue ``call``; False when it was dropped (stopped, or the backlog is full)."""
        with self._cond:
            if self._closed or len(self._queue) >= self._limit:
                self.dropped += 1
                return False
            self._queue.append(call)
            self._cond.notify()
            return True

    @property
    def backlog(self) -> int:
        """Calls queued and not yet started."""
        with self._cond:
            return len(self._queue)

    def _run(self) -> None:
        while True:
            with self._cond:
                while not self._queue and not self._closed:
                    self._cond.wait()
                if self._closed:
                    return
                call = self._queue.popleft()
                self._busy += 1
            try:
                call()
            except Exception:  # best effort; the lane must not die
                logger.debug("a background write failed", exc_info=True)
            finally:
                with self._cond:
                    self._busy -= 1
                    if self._closed:
                        self._done.notify_all()

    def close(self, grace: float = 2.0) -> int:
        """Stop: drop the queued calls (returns how many), wait up to ``grace`` s for the calls in flight."""
        with self._cond:
            self._closed = True
            dropped = len(self._queue)
            self._queue.clear()
            self.dropped += dropped
            self._cond.notify_all()
            self._done.wait_for(lambda: self._busy == 0, timeout=grace)
        return dropped


def _identity(server: dict[str, Any]) -> dict[str, Any]:
    meta = server.get("metadata") or {}
    keep = {k: meta[k] for k in ("name", "namespace", "uid", "resourceVersion") if k in meta}
    return {"metadata": keep}


class EventPoster(Lane):
    """A ``Lane`` posting Events through ``post`` (``Kube.post_event``)."""

    def __init__(self, post: Post, threads: int = 2, limit: int = 5000) -> None:
        super().__init__("ctxfit-events", threads, limit)
        self._post = post

    def post(self, server: dict[str, Any], type_: str, reason: str, message: str) -> bool:
        """Queue one Event on ``server``; False when it was dropped (stopped, or the backlog is full)."""
        identity = _identity(server)
        return self.submit(lambda: self._post(identity, type_, reason, message))

    def close(self, grace: float = 2.0) -> int:
        """``Lane.close``, logging how many queued Events were not posted."""
        dropped = super().close(grace)
        if dropped:
            logger.info("stopping: %d queued Normal Events not posted", dropped)
        return dropped
