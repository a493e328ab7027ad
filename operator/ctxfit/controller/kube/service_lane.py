"""Service writes off the reconcile path: a few threads create (or patch) the servers' Services, in order.

A reconcile hands its rendered Service to ``ServiceLane.submit`` and goes on; failures surface on the next pass.
Why (ClusterIP allocation) and the figures: docs/design/io-performance.md.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

from ..converge.refusals import Write, fingerprint
from ..rejections import RejectionBook, refused
from ..runtime.lanes import Lane

Key = tuple[str, str]
Apply = Callable[..., None]
"""``apply(service, exists=bool)``: ``Kube.apply``."""
SERVICE_THREADS = 4
"""Threads writing Services (ClusterIP allocation is serialized in the API server: more would only wait)."""
WRITTEN_MEMORY_SECONDS = 10.0
"""A rendering written this recently is not written again until the Service watch shows it (``seen``)."""


class ServiceLane:
    """The Service writes of every server, a few threads, one write per server at a time
    (docs/design/io-performance.md). Thread-safe."""

    def __init__(self, apply: Apply, book: RejectionBook, on_done: Callable[[Key], None],
                 threads: int = SERVICE_THREADS) -> None:
        self._apply, self._book, self._on_done = apply, book, on_done
        self._lane = Lane("ctxfit-services", threads)
        self._lock = threading.Lock()
        self._in_flight: set[Key] = set()
        self._failures: dict[Key, tuple[str, BaseException]] = {}
        self._written: dict[Key, tuple[str, float]] = {}

    def take_failure(self, key: Key, service: dict[str, Any]) -> BaseException | None:
        """The error of the last write of this very rendering of ``key``'s Service (removed), else None (an
        error of another rendering is dropped)."""
        with self._lock:
            entry = self._failures.pop(key, None)
        if entry is None or entry[0] != fingerprint(service):
            return None
        return entry[1]

    def busy(self, key: Key) -> bool:
        """A write of ``key``'s Service is queued or running."""
        with self._lock:
            return key in self._in_flight

    def submit(self, key: Key, service: dict[str, Any], *, exists: bool, via: tuple[str, ...] = ()) -> float | None:
        """Queue the write of ``service``. Returns 0 when it is queued or in flight; the seconds until it may be
        written again when this rendering was just written (nothing is queued: look again then); None when it
        could not be queued (stopping, or a full backlog)."""
        digest = fingerprint(service)
        now = time.monotonic()
        with self._lock:
            for stale in [k for k, (_, at) in self._written.items() if now - at > WRITTEN_MEMORY_SECONDS]:
                del self._written[stale]
            written = self._written.get(key)
            if key in self._in_flight:
                return 0.0
            if written is not None and written[0] == digest:
                return WRITTEN_MEMORY_SECONDS - (now - written[1])
            self._in_flight.add(key)
        name = str(service["metadata"]["name"])

        def write() -> None:
            failed = False
            try:
                with refused(Write.SERVICE, name, service):
                    if via:
                        self._apply(service, exists=exists, via=via)
                    else:
                        self._apply(service, exists=exists)
            except Exception as exc:  # noqa: BLE001 - handed to the server's next pass
                failed = True
                with self._lock:
                    self._failures[key] = (digest, exc)
            else:
                self._book.accepted(key, Write.SERVICE)
                with self._lock:
                    self._written[key] = (digest, time.monotonic())
            finally:
                with self._lock:
                    self._in_flight.discard(key)
            if failed:  # a success enqueues the server through the Service's watch event
                self._on_done(key)

        if self._lane.submit(write):
            return 0.0
        with self._lock:
            self._in_flight.discard(key)
        return None

    def seen(self, key: Key) -> None:
        """The Service's watch showed a change of ``key``'s Service (created, edited or deleted): the watch is
        the truth from now on, a just-written rendering is no longer held back (a Service deleted by hand right
        after its creation comes back at once)."""
        with self._lock:
            self._written.pop(key, None)

    def forget(self, key: Key) -> None:
        """The server is gone: drop what is kept about it."""
        with self._lock:
            self._failures.pop(key, None)
            self._written.pop(key, None)

    def close(self, grace: float = 2.0) -> int:
        """Stop (``Lane.close``): returns how many queued writes were dropped."""
        return self._lane.close(grace)
