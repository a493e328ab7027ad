"""The refusal book and the I/O half of refusals: a 400/403/422 answer to a child write, or an object of its name
that is not the server's (``guarded.Foreign``), becomes ``Rejected``, booked per server and ``Write`` with its
backoff (10 s doubling to 300 s) and whether its Warning Event is due. The book is read into ``Snapshot.refusals``
before a pass; the pure pass says it in status (``converge/refusals.py``). Rules: docs/design/refusals.md."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from kubernetes.client.exceptions import ApiException

from ctxfit.api.status import Reason
from ctxfit.vocab.text import clean_text

from .converge.refusals import Refusal, Write, fingerprint, slots
from .converge.types import Outcome

REJECTED_STATUSES = frozenset({400, 403, 422})
"""HTTP codes of a refusal that retrying the same request cannot fix by itself (Invalid, Forbidden, BadRequest)."""
RETRY_SECONDS = 10.0
RETRY_MAX_SECONDS = 300.0
"""Backoff of a refused object: doubling from 10 s to 300 s, the shape of client-go's
``workqueue.NewItemExponentialFailureRateLimiter`` (slower start: a refusal needs a person to act)."""
MAX_TRIES_COUNTED = 32
"""Refusals of one rendering counted for the backoff (past the cap it no longer grows; the count must not)."""
EVENT_REPEAT_SECONDS = 3600.0
"""The same cause (server, kind, message) gets one Warning Event per this many seconds, however often it recurs."""
CAUSES_KEPT = 32
"""Causes remembered per server for ``EVENT_REPEAT_SECONDS`` (the oldest is forgotten first)."""
CLAIM_KIND = Write.CLAIM

Key = tuple[str, str]


class Rejected(Exception):
    """The API server refused a rendered object.

    Attributes:
        kind, name: the object (``Write``: ``Deployment``, ``Service``, ``Deployment/scale``...).
        code: HTTP status (400, 403, 422).
        message: the API server's ``Status.message`` (sanitized), else the HTTP reason.
        fingerprint: digest of the refused object (a different rendering is tried at once).
    """

    reason = Reason.OBJECT_REJECTED
    """The condition's and the Event's reason."""

    def __init__(self, kind: str, name: str, code: int, message: str, fingerprint: str) -> None:
        super().__init__(f"{kind} {name} refused ({code}): {message}")
        self.kind, self.name, self.code, self.message, self.fingerprint = kind, name, code, message, fingerprint

    def describe(self) -> str:
        """One line for the condition and the Event."""
        return f"the API server refused {self.kind} {self.name} ({self.code}): {self.message}"


def rejection_of(exc: ApiException, kind: str, name: str, obj: dict[str, Any] | None) -> Rejected | None:
    """A ``Rejected`` for a 400/403/422 answer (message from the ``Status`` body), None for other errors."""
    if exc.status not in REJECTED_STATUSES:
        return None
    return Rejected(kind, name, int(exc.status), api_message(exc), fingerprint(obj))


def api_message(exc: ApiException, limit: int = 900) -> str:
    """The API server's own words for an error (the ``Status`` body's ``message``: which field, which rule), else
    the HTTP reason; cleaned and cut to ``limit`` characters."""
    message = str(exc.reason or "")
    try:
        body = json.loads(exc.body) if exc.body else {}
        message = str(body.get("message") or message)
    except (ValueError, TypeError, AttributeError):
        pass
    return clean_text(message)[:limit]


@dataclass
class _Entry:
    fingerprint: str
    tries: int
    next_try: float
    message: str = ""
    reason: Reason = Reason.OBJECT_REJECTED
    announce: bool = False
    seq: int = 0


@dataclass
class RejectionBook:
    """Per server and write: the refused rendering, when to try it again and whether its Warning Event is due
    (thread-safe). Read into ``Snapshot.refusals`` (``refusals``) before each pass; the pure pass says it in status
    (``converge.refusals.hold``)."""

    base_seconds: float = RETRY_SECONDS
    max_seconds: float = RETRY_MAX_SECONDS
    _entries: dict[tuple[Key, str], _Entry] = field(default_factory=dict)
    _errors: dict[Key, str] = field(default_factory=dict)
    _posted: dict[Key, dict[str, float]] = field(default_factory=dict)
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _seq: int = 0
    _clean: set[Key] = field(default_factory=set)

    def should_post(self, key: Key, cause: str, now: float, repeat: float = EVENT_REPEAT_SECONDS) -> bool:
        """Whether a Warning Event for ``cause`` of ``key`` is due: one per distinct cause per ``repeat`` seconds
        (``EVENT_REPEAT_SECONDS`` for refusals; records it as posted when due)."""
        with self._lock:
            return self._should_post(key, cause, now, repeat)

    def _should_post(self, key: Key, cause: str, now: float, repeat: float) -> bool:
        posted = self._posted.setdefault(key, {})
        last = posted.get(cause)
        if last is not None and now - last < repeat:
            return False
        posted.pop(cause, None)
        posted[cause] = now
        while len(posted) > CAUSES_KEPT:
            del posted[next(iter(posted))]
        return True

    def wait(self, key: Key, kind: str, obj: dict[str, Any] | None, now: float) -> float:
        """Seconds until ``obj`` may be applied again (0: now; a different rendering is always due)."""
        with self._lock:
            entry = self._entries.get((key, kind))
        if entry is None or entry.fingerprint != fingerprint(obj):
            return 0.0
        return max(0.0, entry.next_try - now)

    def failed(self, key: Key, rejected: Rejected, now: float) -> float:
        """Record a refusal; returns the backoff before the next try (doubling from ``base_seconds``). Its Warning
        Event is due when this cause got none in the last ``EVENT_REPEAT_SECONDS``."""
        text = rejected.describe()
        with self._lock:
            entry = self._entries.get((key, rejected.kind))
            tries = entry.tries + 1 if entry is not None and entry.fingerprint == rejected.fingerprint else 1
            tries = min(tries, MAX_TRIES_COUNTED)  # 2 ** tries stays a small float (OverflowError past ~1,030)
            delay = float(min(self.max_seconds, self.base_seconds * 2.0 ** (tries - 1)))
            announce = self._should_post(key, f"{rejected.kind}: {text}", now, EVENT_REPEAT_SECONDS) or \
                (entry is not None and entry.announce)
            self._seq += 1
            self._clean.discard(key)
            self._entries[(key, rejected.kind)] = _Entry(rejected.fingerprint, tries, now + delay, text,
                                                         rejected.reason, announce, self._seq)
        return delay

    def refusals(self, key: Key, now: float) -> tuple[Refusal, ...]:
        """``key``'s refusals, oldest first, as the pure pass reads them."""
        with self._lock:
            found = sorted(((k[1], e) for k, e in self._entries.items() if k[0] == key), key=lambda ke: ke[1].seq)
        return tuple(Refusal(Write(kind), e.fingerprint, max(0.0, e.next_try - now), e.message, e.reason,
                             e.announce) for kind, e in found)

    def announced(self, key: Key, refusals: tuple[Refusal, ...]) -> None:
        """The Warning Events of ``refusals`` were posted."""
        with self._lock:
            for refusal in refusals:
                entry = self._entries.get((key, refusal.write))
                if entry is not None and entry.fingerprint == refusal.fingerprint:
                    entry.announce = False

    def accepted(self, key: Key, kind: str) -> None:
        """``kind`` was applied: forget its refusal."""
        with self._lock:
            self._entries.pop((key, kind), None)

    def applied(self, key: Key, out: Outcome) -> None:
        """Every write of ``out`` was applied: forget their refusals (``accepted_all`` once none is left)."""
        for writes, _, _ in slots(out):
            for write in writes:
                self.accepted(key, write)
        with self._lock:
            if not any(k == key for k, _ in self._entries):
                self._clean.add(key)

    def accepted_all(self, key: Key) -> bool:
        """The last pass of ``key`` applied every write it asked for and nothing refused is left."""
        with self._lock:
            return key in self._clean

    def pending(self, key: Key) -> bool:
        """Some object of ``key`` is refused."""
        with self._lock:
            return any(k == key for k, _ in self._entries)

    def forget(self, key: Key) -> None:
        """The server is gone."""
        with self._lock:
            for entry_key in [k for k in self._entries if k[0] == key]:
                del self._entries[entry_key]
            self._errors.pop(key, None)
            self._posted.pop(key, None)
            self._clean.discard(key)

    def first_error(self, key: Key, text: str) -> bool:
        """Remember an unexpected reconcile error; True when it differs from the last one of ``key`` (log its
        traceback once, not on every retry)."""
        with self._lock:
            new = self._errors.get(key) != text
            self._errors[key] = text
        return new


@contextmanager
def refused(kind: Write, name: str, obj: dict[str, Any] | None) -> Iterator[None]:
    """Turn a 400/403/422 answer to a write of ``obj`` into ``Rejected`` (other errors pass unchanged); a
    ``Rejected`` raised inside (``guarded.Foreign``) is booked under ``kind`` with ``obj``'s fingerprint."""
    try:
        yield
    except Rejected as exc:
        exc.kind = kind
        exc.fingerprint = exc.fingerprint or fingerprint(obj)
        raise
    except ApiException as exc:
        rejected = rejection_of(exc, kind, name, obj)
        if rejected is None:
            raise
        raise rejected from exc
