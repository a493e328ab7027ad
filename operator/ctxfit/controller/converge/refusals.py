"""Refusals in the pure pass: which child writes the API server refused, held back and said in status.

``hold`` turns the refusal book into status and drops the writes still in their backoff.
The book, the backoff, Events and the reasoning: docs/design/refusals.md.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

from ctxfit.api.status import ConditionType, InferenceServerStatus, Phase, Reason

from .status import HELD_BY, hold_ready_for_refusal, mark_objects_accepted, mark_objects_refused, mark_phase
from .types import SERVING_UNAFFECTED, EventNote, Outcome, Refusal, Snapshot, Write

__all__ = ["SERVING_UNAFFECTED", "Refusal", "Write", "claim_write", "fingerprint", "hold", "hold_for_service",
           "is_rejected", "refused_autoscaler", "slots"]


def fingerprint(obj: dict[str, Any] | None) -> str:
    """First 16 hex digits of sha256 over the object's canonical JSON ("" for None)."""
    if obj is None:
        return ""
    return hashlib.sha256(json.dumps(obj, sort_keys=True, default=str).encode()).hexdigest()[:16]


def is_rejected(status: InferenceServerStatus) -> bool:
    """``ObjectsAccepted`` is False in ``status``."""
    cond = status.condition(ConditionType.OBJECTS_ACCEPTED)
    return cond is not None and cond.status == "False"


def refused_autoscaler(refusals: tuple[Refusal, ...]) -> Refusal | None:
    """The latest refusal of a write of the server's ScaledObject, None when there is none."""
    return next((r for r in reversed(refusals) if r.write.autoscaler), None)


def claim_write(out: Outcome) -> Write:
    """The write of ``out``'s claim: creating it, or changing (``/expand``) the claim that exists."""
    return Write.CLAIM_EXPAND if out.claim_exists else Write.CLAIM


Slot = tuple[tuple[Write, ...], dict[str, Any] | None, str]
"""A write ``out`` asks for: the ``Write`` kinds it is refused under, what is written, its ``Outcome`` field."""


def slots(out: Outcome) -> list[Slot]:
    """The writes ``out`` asks for (the kinds are those ``reconcile`` passes to ``rejections.refused``)."""
    found: list[Slot] = []
    if out.deployment is not None:
        found.append(((Write(str(out.deployment["kind"])),), out.deployment, "deployment"))
    if out.service is not None:
        found.append(((Write.SERVICE,), out.service, "service"))
    if out.scaled_object is not None:
        found.append(((Write.SCALED_OBJECT,), out.scaled_object, "scaled_object"))
    if out.claim is not None:
        found.append(((claim_write(out),), out.claim, "claim"))
    if out.claim_delete is not None:
        found.append(((Write.CLAIM_DELETE,), {"delete": out.claim_delete}, "claim_delete"))
    if out.scale_to_zero:
        found.append(((Write.DEPLOYMENT_SCALE, Write.GROUP_SCALE), None, "scale_to_zero"))
    if out.scaled_object_pause:
        found.append(((Write.SCALED_OBJECT_PAUSE,), None, "scaled_object_pause"))
    if out.scaled_object_delete:
        found.append(((Write.SCALED_OBJECT_DELETE,), None, "scaled_object_delete"))
    if out.pool is not None:
        found.append(((Write.POOL,), out.pool, "pool"))
    return found


FLAGS = ("scale_to_zero", "scaled_object_pause", "scaled_object_delete")


def _drop(out: Outcome, attribute: str) -> None:
    setattr(out, attribute, False if attribute in FLAGS else None)


def _wait(refusals: tuple[Refusal, ...], writes: tuple[Write, ...], obj: dict[str, Any] | None) -> float:
    digest = fingerprint(obj)
    return max((r.wait for r in refusals if r.write in writes and r.fingerprint == digest), default=0.0)


def hold(out: Outcome, refusals: tuple[Refusal, ...], now: str, generation: int, *, accepted: bool = False) -> None:
    """The refusals into status, and the writes of a refused rendering dropped until its backoff ends.

    ``ObjectsAccepted`` False with the latest refusal (a Warning Event for each one ``announce``-d), Ready held
    while a write the server needs to serve is refused; a workload is not written while the claim it would mount
    for the first time is held (that claim may not be the server's: ``guarded.Foreign``). ``ObjectsAccepted`` True
    again when nothing is refused and the last pass applied every write (``accepted``) or nothing is left to write;
    otherwise (a restarted operator, whose book is empty) a Ready held by a refusal stays held until then."""
    for refusal in refusals:
        if refusal.announce:
            out.events.append(EventNote("Warning", refusal.reason, refusal.message))
    if refusals:
        mark_objects_refused(out, refusals[-1], now, generation)
    elif not is_rejected(out.status):
        return
    waiting = claim_held = False
    for writes, obj, attribute in slots(out):
        wait = _wait(refusals, writes, obj)
        if wait > 0:
            waiting = True
            out.requeue(wait)
            _drop(out, attribute)
            claim_held = claim_held or (attribute == "claim" and not out.claim_exists)
    # the claim the workload mounts was found not the server's (reconcile/write._check_mounted_claim)
    mounted_wait = _wait(refusals, (Write.CLAIM,), None) if out.deployment is not None and out.claim is None else 0.0
    if mounted_wait > 0:
        out.requeue(mounted_wait)
    if claim_held or mounted_wait > 0:
        out.deployment = None
        waiting = True
    if not refusals and (accepted or (not slots(out) and not waiting)):
        mark_objects_accepted(out, now, generation)
        return
    holding = next((r for r in reversed(refusals) if r.write.holds_ready), None)
    ready = out.status.condition(ConditionType.READY)
    if holding is not None:
        hold_ready_for_refusal(out, holding.message, now, generation, holding.reason)
    elif not refusals and ready is not None and ready.reason in HELD_BY:
        hold_ready_for_refusal(out, ready.message, now, generation, ready.reason)


SERVICE_WAIT_SECONDS = 1.0


def hold_for_service(out: Outcome, snap: Snapshot, now: str) -> None:
    """A server whose Service is not yet seen as the server's while the lane writes it (now, or from this pass on) is
    not Ready yet: the write may still find the name taken (``guarded.Foreign``), and status never says Ready with an
    endpoint through a Service that is not the server's. Looked at again in ``SERVICE_WAIT_SECONDS``."""
    if out.status.phase is not Phase.READY or snap.service_port is not None:
        return
    if not (snap.service_writing or (snap.service_lane and out.service is not None)):
        return
    mark_phase(out, Phase.STARTING, Reason.ENGINE_STARTING, f"engine Ready; waiting for its Service {snap.name}", now,
               snap.generation)
    out.requeue(SERVICE_WAIT_SECONDS)
