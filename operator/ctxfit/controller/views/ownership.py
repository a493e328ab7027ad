"""Whose an object is (pure): the operator writes only objects that name their InferenceServer by uid.

``guard_ops`` turns the check into RFC 6902 ``test`` operations in front of every JSON patch.
The rule and its one exception: docs/design/ownership.md.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from ctxfit.api import API_GROUP, KIND
from ctxfit.render.labels import OWNER_UID_ANNOTATION
from ctxfit.vocab.text import capped

CLAIM_KIND = "PersistentVolumeClaim"
"""The one kind whose ownership may also be the operator's annotation (retained claims)."""


def _pointer(key: str) -> str:
    return key.replace("~", "~0").replace("/", "~1")


@dataclass(frozen=True)
class Holder:
    """Who an existing object belongs to, as its metadata says.

    Attributes:
        uid: the object's own ``metadata.uid`` ("" when not reported, e.g. a rendered object).
        owners: ``(index, uid)`` of each ownerReference to an ``InferenceServer`` of ``ctxfit.io``.
        marker: the ``ctxfit.io/owner-uid`` annotation (None: absent).
        controller: its controlling ownerReference as ``Kind name`` ("" when it has none), for messages.
        controller_ref: ``(index, uid)`` of that controlling reference (None: none).
    """

    uid: str
    owners: tuple[tuple[int, str], ...] = ()
    marker: str | None = None
    controller: str = ""
    controller_ref: tuple[int, str] | None = None

    def owns(self, server_uid: str, kind: str, via: tuple[str, ...] = ()) -> bool:
        """The object belongs to the server of ``server_uid`` (docs/design/ownership.md); ``via``: uids of the
        server's own objects whose controlled children count as the server's (the LeaderWorkerSet's headless
        Service: ``guard_ops``)."""
        if not server_uid:
            return False
        if any(uid == server_uid for _, uid in self.owners):
            return True
        if self.controller_ref is not None and self.controller_ref[1] in via:
            return True
        return kind == CLAIM_KIND and self.marker == server_uid

    def describe(self) -> str:
        """Who it belongs to, for the condition and the Event."""
        if self.owners:
            return "it belongs to another InferenceServer (another uid: an earlier server of this name?)"
        if self.controller:
            return f"it is controlled by {self.controller}"
        return "it has no ownerReference to this InferenceServer"


UID_MAX = 128
"""An ownerReference uid or owner annotation longer than this cannot be a server's (the API server's uids are
36-character UUIDs) and is not kept: a ``Holder`` is held per indexed object, its size bounded whatever a
tenant writes into the metadata of an object it labels as the operator's (docs/design/ownership.md)."""
OWNERS_KEPT = 16
"""InferenceServer ownerReferences kept per object (the operator renders one)."""
CONTROLLER_TEXT_BYTES = 512
"""``Holder.controller`` (for messages) is cut to this many bytes."""


def holder_of(obj: Mapping[str, Any] | None) -> Holder | None:
    """The ``Holder`` of an object as the API returns it (dict); None for None. Bounded in bytes: uids over
    ``UID_MAX`` are dropped (an over-long owner annotation reads as present but empty: it names no server), at most
    ``OWNERS_KEPT`` server references, the controller text cut to ``CONTROLLER_TEXT_BYTES``."""
    if obj is None:
        return None
    meta = obj.get("metadata") or {}
    owners: list[tuple[int, str]] = []
    controller = ""
    controller_ref: tuple[int, str] | None = None
    for index, ref in enumerate(meta.get("ownerReferences") or []):
        if not isinstance(ref, Mapping):
            continue
        group = str(ref.get("apiVersion") or "").split("/")[0]
        uid = str(ref.get("uid") or "")
        if ref.get("kind") == KIND and group == API_GROUP and uid and len(uid) <= UID_MAX \
                and len(owners) < OWNERS_KEPT:
            owners.append((index, uid))
        if ref.get("controller") and not controller:
            controller = capped(f"{ref.get('kind')} {ref.get('name')}", CONTROLLER_TEXT_BYTES)
            controller_ref = (index, uid if len(uid) <= UID_MAX else "")
    marker = (meta.get("annotations") or {}).get(OWNER_UID_ANNOTATION)
    kept = None if marker is None else str(marker) if len(str(marker)) <= UID_MAX else ""
    return Holder(str(meta.get("uid") or "")[:UID_MAX], tuple(owners), kept, controller, controller_ref)


def server_uid_of(obj: Mapping[str, Any]) -> str:
    """The uid of the InferenceServer a *rendered* object names (its ownerReference, else the claim marker)."""
    holder = holder_of(obj)
    assert holder is not None
    if holder.owners:
        return holder.owners[0][1]
    return holder.marker or ""


def guard_ops(holder: Holder, server_uid: str, kind: str, via: tuple[str, ...] = ()) -> list[dict[str, Any]]:
    """JSON-patch ``test`` operations that hold while the object is the one checked and still the server's (or
    still controlled by one of ``via``, the server's own objects).

    Raises ``ValueError`` when ``holder`` does not belong to the server (callers check ``owns`` first).
    """
    ops: list[dict[str, Any]] = []
    if holder.uid:
        ops.append({"op": "test", "path": "/metadata/uid", "value": holder.uid})
    index = next((i for i, uid in holder.owners if uid == server_uid), None)
    if index is not None:
        ops.append({"op": "test", "path": f"/metadata/ownerReferences/{index}/uid", "value": server_uid})
    elif kind == CLAIM_KIND and holder.marker == server_uid:
        ops.append({"op": "test", "path": f"/metadata/annotations/{_pointer(OWNER_UID_ANNOTATION)}",
                    "value": server_uid})
    elif holder.controller_ref is not None and holder.controller_ref[1] in via:
        ops.append({"op": "test", "path": f"/metadata/ownerReferences/{holder.controller_ref[0]}/uid",
                    "value": holder.controller_ref[1]})
    else:
        raise ValueError(f"{kind} does not belong to InferenceServer uid {server_uid}")
    return ops
