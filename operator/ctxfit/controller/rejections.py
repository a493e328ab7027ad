"""Objects the API server refuses: surfaced as a condition + Warning Event, retried with backoff (issue 10, class 1).

Admission (the CRD schema and CEL) refuses most specs that would render invalid objects, but not all:
an admission webhook, a ResourceQuota or LimitRange, a Pod Security level, the operator's own RBAC or a
newer API server's rule can still refuse the Deployment or Service with 400/403/422. Then:

- ``ObjectsAccepted`` becomes False (reason ``ObjectRejected``) with the API server's message, and a
  Warning Event says the same (once per distinct message);
- Ready is False and ``status.endpoint`` is cleared while any object is refused (a server is never
  Ready with an endpoint whose Service does not exist); a Ready phase becomes Starting;
- the same rendered object is retried after 10 s, 20 s, 40 s, ... capped at 300 s (a changed rendering,
  e.g. after a spec fix, is tried at once); the backoff is kept in memory, so a restarted operator tries
  once at start-up and then backs off again;
- once every object is accepted, ``ObjectsAccepted`` is True again.

A refused KEDA ScaledObject (``spec.autoscaling``; e.g. KEDA's admission webhook) is handled the same way,
except that Ready is not held: the server serves at its current replica count, only autoscaling is missing.
"""

from __future__ import annotations

import hashlib
import json
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from kubernetes.client.exceptions import ApiException

from ctxfit.api.status import ConditionType, InferenceServerStatus, Phase, Reason, now_rfc3339
from ctxfit.vocab.text import clean_text

if TYPE_CHECKING:
    from .converge.types import Outcome
    from .kube.client import Kube

REJECTED_STATUSES = frozenset({400, 403, 422})
"""HTTP codes of a refusal that retrying the same request cannot fix by itself (Invalid, Forbidden, BadRequest)."""
RETRY_SECONDS = 10.0
RETRY_MAX_SECONDS = 300.0
MAX_TRIES_COUNTED = 32
"""Refusals of one rendering counted for the backoff (past the cap it no longer grows; the count must not)."""
EVENT_REPEAT_SECONDS = 3600.0
"""The same cause (server, kind, message) gets one Warning Event per this many seconds, however often it recurs."""
CAUSES_KEPT = 32
"""Causes remembered per server for ``EVENT_REPEAT_SECONDS`` (the oldest is forgotten first)."""
"""Backoff of a refused object: doubling from 10 s to 300 s, the shape of client-go's
``workqueue.NewItemExponentialFailureRateLimiter`` (slower start: a refusal needs a person to act)."""

Key = tuple[str, str]


class Rejected(Exception):
    """The API server refused a rendered object.

    Attributes:
        kind, name: the object (``Deployment``, ``Service``, ``Deployment/scale``).
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


def fingerprint(obj: dict[str, Any] | None) -> str:
    """First 16 hex digits of sha256 over the object's canonical JSON ("" for None)."""
    if obj is None:
        return ""
    return hashlib.sha256(json.dumps(obj, sort_keys=True, default=str).encode()).hexdigest()[:16]


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


@dataclass
class RejectionBook:
    """Per server and object kind: the refused rendering and when to try it again (thread-safe)."""

    base_seconds: float = RETRY_SECONDS
    max_seconds: float = RETRY_MAX_SECONDS
    _entries: dict[tuple[Key, str], _Entry] = field(default_factory=dict)
    _errors: dict[Key, str] = field(default_factory=dict)
    _posted: dict[Key, dict[str, float]] = field(default_factory=dict)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def should_post(self, key: Key, cause: str, now: float, repeat: float = EVENT_REPEAT_SECONDS) -> bool:
        """Whether a Warning Event for ``cause`` of ``key`` is due: one per distinct cause per ``repeat`` seconds
        (``EVENT_REPEAT_SECONDS`` for refusals; records it as posted when due)."""
        with self._lock:
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
        """Record a refusal; returns the backoff before the next try (doubling from ``base_seconds``)."""
        with self._lock:
            entry = self._entries.get((key, rejected.kind))
            tries = entry.tries + 1 if entry is not None and entry.fingerprint == rejected.fingerprint else 1
            tries = min(tries, MAX_TRIES_COUNTED)  # 2 ** tries stays a small float (OverflowError past ~1,030)
            delay = float(min(self.max_seconds, self.base_seconds * 2.0 ** (tries - 1)))
            self._entries[(key, rejected.kind)] = _Entry(rejected.fingerprint, tries, now + delay)
        return delay

    def accepted(self, key: Key, kind: str) -> None:
        """``kind`` was applied: forget its refusal."""
        with self._lock:
            self._entries.pop((key, kind), None)

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

    def first_error(self, key: Key, text: str) -> bool:
        """Remember an unexpected reconcile error; True when it differs from the last one of ``key`` (log its
        traceback once, not on every retry)."""
        with self._lock:
            new = self._errors.get(key) != text
            self._errors[key] = text
        return new


def is_rejected(status: InferenceServerStatus) -> bool:
    """``ObjectsAccepted`` is False in ``status``."""
    cond = status.condition(ConditionType.OBJECTS_ACCEPTED)
    return cond is not None and cond.status == "False"


AUTOSCALER_KIND = "ScaledObject"
"""A refusal of this kind does not hold Ready (see the module docstring)."""
CLAIM_KIND = "PersistentVolumeClaim"
SERVING_UNAFFECTED = (AUTOSCALER_KIND, f"{CLAIM_KIND}/expand", f"{CLAIM_KIND}/delete")
"""Refused writes that do not stop the server from serving (Ready is not held): its ScaledObject (any verb), the
growth or retention change of a claim it already mounts, the delete of a claim it no longer mounts."""


def _holds_ready(message: str) -> bool:
    """The refusal ``message`` (``Rejected.describe``, ``guarded.Foreign``) is of an object the server needs to
    serve (not one of ``SERVING_UNAFFECTED``)."""
    return not any(message.startswith((f"the API server refused {kind} ", f"the API server refused {kind}/",
                                       f"{kind} ")) for kind in SERVING_UNAFFECTED)


def refused_autoscaler(status: InferenceServerStatus) -> str | None:
    """The refusal message when ``ObjectsAccepted`` is False for the ScaledObject, else None."""
    cond = status.condition(ConditionType.OBJECTS_ACCEPTED)
    if cond is None or cond.status != "False" or _holds_ready(cond.message):
        return None
    return cond.message


def mark_rejected(status: InferenceServerStatus, message: str, now: str, generation: int,
                  reason: Reason = Reason.OBJECT_REJECTED) -> None:
    """``ObjectsAccepted`` False with ``message`` (``reason``: ``ObjectRejected``, or ``ForeignObject`` for an
    object that is not the server's); Ready False, no endpoint, a Ready phase becomes Starting (not for a
    refused ScaledObject)."""
    status.set_condition(ConditionType.OBJECTS_ACCEPTED, "False", reason, message, now=now, generation=generation)
    if _holds_ready(message):
        hold_ready(status, message, now, generation, reason)


def hold_ready(status: InferenceServerStatus, message: str, now: str, generation: int,
               reason: Reason = Reason.OBJECT_REJECTED) -> None:
    """Ready False (reason ``ObjectRejected``/``ForeignObject``) and no endpoint while an object is refused."""
    if status.phase is Phase.READY:
        status.phase = Phase.STARTING
    status.set_condition(ConditionType.READY, "False", reason, message, now=now, generation=generation)
    status.endpoint = None
    status.message = message


def mark_accepted(status: InferenceServerStatus, now: str, generation: int) -> None:
    """Every object was accepted: ``ObjectsAccepted`` True; a held Ready goes back to waiting for the engine."""
    status.set_condition(ConditionType.OBJECTS_ACCEPTED, "True", Reason.OBJECTS_ACCEPTED,
                         "the API server accepted the Deployment and Service", now=now, generation=generation)
    ready = status.condition(ConditionType.READY)
    if ready is not None and ready.reason in (Reason.OBJECT_REJECTED, Reason.FOREIGN_OBJECT):
        status.set_condition(ConditionType.READY, "False", Reason.ENGINE_STARTING,
                             "objects accepted; waiting for the engine", now=now, generation=generation)
        status.message = "objects accepted; waiting for the engine"




def claim_kind(out: Outcome) -> str:
    """The book kind of ``out``'s claim write: creating it, or changing (``/expand``) the claim that exists."""
    return f"{CLAIM_KIND}/expand" if out.claim_exists else CLAIM_KIND


def _slots(out: Outcome) -> list[tuple[tuple[str, ...], dict[str, Any] | None, str]]:
    """The writes ``out`` asks for: (the book kinds it is refused under, what is written, its ``Outcome`` field).
    The kinds are those ``reconcile`` passes to ``refused``."""
    slots: list[tuple[tuple[str, ...], dict[str, Any] | None, str]] = []
    if out.deployment is not None:
        slots.append(((str(out.deployment["kind"]),), out.deployment, "deployment"))
    if out.service is not None:
        slots.append((("Service",), out.service, "service"))
    if out.scaled_object is not None:
        slots.append(((AUTOSCALER_KIND,), out.scaled_object, "scaled_object"))
    if out.claim is not None:
        slots.append(((claim_kind(out),), out.claim, "claim"))
    if out.claim_delete is not None:
        slots.append(((f"{CLAIM_KIND}/delete",), {"delete": out.claim_delete}, "claim_delete"))
    if out.scale_to_zero:
        slots.append((("Deployment/scale", "LeaderWorkerSet/scale"), None, "scale_to_zero"))
    if out.scaled_object_pause:
        slots.append(((f"{AUTOSCALER_KIND}/pause",), None, "scaled_object_pause"))
    if out.scaled_object_delete:
        slots.append(((f"{AUTOSCALER_KIND}/delete",), None, "scaled_object_delete"))
    return slots


def _drop(out: Outcome, attribute: str) -> None:
    setattr(out, attribute, False if attribute in ("scale_to_zero", "scaled_object_pause", "scaled_object_delete")
            else None)


def hold(book: RejectionBook, key: Key, out: Outcome, monotonic: float, now: str, generation: int) -> None:
    """Before writing ``out``: drop every write of a refused rendering (any child kind, any verb) until its
    backoff ends, keep Ready held while a refusal stands, and mark ``ObjectsAccepted`` True when nothing
    refused is left to apply. A workload is not written while the claim it would mount for the first time is
    held (that claim may not be the server's: ``guarded.Foreign``)."""
    if not is_rejected(out.status):
        return
    waiting = False
    claim_held = False
    for kinds, obj, attribute in _slots(out):
        wait = max(book.wait(key, kind, obj, monotonic) for kind in kinds)
        if wait > 0:
            waiting = True
            out.requeue(wait)
            _drop(out, attribute)
            claim_held = claim_held or (attribute == "claim" and not out.claim_exists)
    mounted_wait = book.wait(key, CLAIM_KIND, None, monotonic) if out.deployment is not None and out.claim is None \
        else 0.0  # the claim the workload mounts was found not the server's (reconcile._check_mounted_claim)
    if mounted_wait > 0:
        out.requeue(mounted_wait)
    if claim_held or mounted_wait > 0:
        out.deployment = None
        waiting = True
    if not _slots(out) and not waiting:
        mark_accepted(out.status, now, generation)
        return
    cond = out.status.condition(ConditionType.OBJECTS_ACCEPTED)
    message = cond.message if cond else "an object was refused"
    if _holds_ready(message):
        hold_ready(out.status, message, now, generation, cond.reason if cond else Reason.OBJECT_REJECTED)


def applied(book: RejectionBook, key: Key, out: Outcome) -> bool:
    """After a successful write of ``out``: forget refusals of what was applied. Returns True when the
    stored status still says refused although nothing refused is pending (write ``mark_accepted``)."""
    slots = _slots(out)
    for kinds, _, _ in slots:
        for kind in kinds:
            book.accepted(key, kind)
    return is_rejected(out.status) and not book.pending(key) and bool(slots)


def record(kube: Kube, book: RejectionBook, key: Key, rejected: Rejected, status: InferenceServerStatus,
           generation: int) -> tuple[float, dict[str, Any] | None]:
    """Write the refusal into status (re-read for its resourceVersion) when that changes it, and post a Warning
    Event once per distinct cause (``RejectionBook.should_post``). Returns the backoff in seconds and the server
    as stored after the status write (None: not written). Raises ``Conflict`` when the status changed meanwhile."""
    delay = book.failed(key, rejected, time.monotonic())
    body = kube.get_server(*key)
    if body is None:
        return delay, None
    text = rejected.describe()
    new = status.model_copy(deep=True)
    mark_rejected(new, text, now_rfc3339(), generation, rejected.reason)
    try:
        stored = InferenceServerStatus.from_body(body.get("status")).to_wire()
    except ValueError:  # pydantic's ValidationError: an unreadable status is replaced
        stored = {}
    written = kube.replace_status(body, new.to_wire()) if new.to_wire() != stored else None
    if book.should_post(key, f"{rejected.kind}: {text}", time.monotonic()):
        kube.post_event(written or body, "Warning", rejected.reason.value, text)
    return delay, written


@contextmanager
def refused(kind: str, name: str, obj: dict[str, Any] | None) -> Iterator[None]:
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
