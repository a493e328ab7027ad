"""The one way the operator changes or deletes an existing child object: read it, check it is the server's
(``ownership``), then send the patch behind ``test`` operations, or the delete behind a uid precondition.

Who shares it and why a create needs no guard: docs/design/ownership.md.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from kubernetes.client.exceptions import ApiException

from ctxfit.api.status import Reason

from ..rejections import Rejected
from ..views.ownership import Holder, guard_ops, holder_of
from .answers import conflict, invalid, not_found
from .rest import Conflict


class Foreign(Rejected):
    """An object the operator would write exists and is not the server's (``ownership``).

    Handled as a refusal (``rejections``): ``ObjectsAccepted`` False (reason ``ForeignObject``) naming it, one
    Warning Event, the same backoff, and nothing written to it.
    """

    reason = Reason.FOREIGN_OBJECT

    def __init__(self, kind: str, name: str, holder: Holder, fingerprint: str = "") -> None:
        message = (f"{kind} {name} already exists and is not owned by this InferenceServer ({holder.describe()}); "
                   "ctxfit does not write it: rename the server, or delete or rename that object")
        super().__init__(kind, name, 409, message, fingerprint)
        self.holder = holder

    def describe(self) -> str:
        """One line for the condition and the Event."""
        return self.message


def check(kind: str, name: str, live: Mapping[str, Any] | None, server_uid: str,
          via: tuple[str, ...] = ()) -> Holder | None:
    """The live object's ``Holder`` when it belongs to the server (``Holder.owns``); None when absent.

    Raises:
        Foreign: it exists and is not the server's.
    """
    holder = holder_of(live)
    if holder is None:
        return None
    if not holder.owns(server_uid, kind, via):
        raise Foreign(kind, name, holder)
    return holder


Read = Callable[[], dict[str, Any] | None]
"""Read the object (None: absent)."""
SendPatch = Callable[[list[dict[str, Any]]], None]
"""Send a JSON patch (RFC 6902 operations) to the object."""
SendDelete = Callable[[str], None]
"""Delete the object with ``preconditions.uid`` = the argument ("" for none)."""


def _recheck(kind: str, name: str, owner: str, checked: Holder, read: Read, via: tuple[str, ...] = ()) -> None:
    """After a refused guarded request: raise ``Foreign`` when the object is no longer the server's, ``Conflict``
    when it is another object of the server's (deleted and created again since the check); return when it is
    the very object checked (the refusal was about the request itself)."""
    now = check(kind, name, read(), owner, via)
    if now is None or (checked.uid and now.uid != checked.uid):
        raise Conflict(f"{kind} {name} changed while it was written")


def patch_owned(kind: str, name: str, owner: str, read: Read, send: SendPatch, ops: list[dict[str, Any]],
                live: dict[str, Any] | None = None) -> bool:
    """Apply ``ops`` to the object when it is the server's (uid ``owner``). ``live``: the object as just read
    (else ``read`` is called). Returns False when it does not exist (nothing sent).

    Raises:
        Foreign: it exists and is not the server's (nothing sent), or stopped being it before the patch.
        Conflict: it was replaced by another object between the read and the patch.
        ApiException: any other answer (a 404: deleted meanwhile; a 400/403/422 about the patch itself).
    """
    holder = check(kind, name, live if live is not None else read(), owner)
    if holder is None:
        return False
    _send_guarded(kind, name, owner, holder, read, send, ops)
    return True


def _send_guarded(kind: str, name: str, owner: str, holder: Holder, read: Read, send: SendPatch,
                  ops: list[dict[str, Any]], via: tuple[str, ...] = ()) -> None:
    try:
        send(guard_ops(holder, owner, kind, via) + ops)
    except ApiException as exc:
        if invalid(exc):  # also the answer to a failed test operation
            _recheck(kind, name, owner, holder, read, via)
        raise


def delete_owned(kind: str, name: str, owner: str, read: Read, send: SendDelete) -> bool:
    """Delete the object when it is the server's; the delete carries its uid as a precondition, so a
    same-named object created after the read is never deleted. Returns False when it does not exist.

    Raises:
        Foreign: it exists and is not the server's (nothing sent).
        Conflict: it was replaced between the read and the delete (409 on the precondition).
        ApiException: any other answer.
    """
    holder = check(kind, name, read(), owner)
    if holder is None:
        return False
    try:
        send(holder.uid)
    except ApiException as exc:
        if not_found(exc):
            return False
        if conflict(exc):
            _recheck(kind, name, owner, holder, read)
            raise Conflict(f"{kind} {name} changed while it was deleted") from exc
        raise
    return True


def create_or_patch(kind: str, name: str, owner: str, create: Callable[[], None], read: Read, send: SendPatch,
                    ops: list[dict[str, Any]], *, exists: bool,
                    gone: Callable[[ApiException], bool] = not_found, via: tuple[str, ...] = ()) -> None:
    """Create the object (``exists`` False), else, or when the name turns out taken (409), patch it the
    guarded way; an object found absent, or deleted between the read and the patch (``gone``: a 404 for the
    object, not for its resource type), is created. ``via``: see ``Holder.owns``.

    Raises:
        Foreign: the name is taken by an object that is not the server's (nothing written to it).
        ApiException: any other answer of the read, the create or the patch.
    """
    if not exists:
        try:
            create()
            return
        except ApiException as exc:
            if not conflict(exc):
                raise
    holder = check(kind, name, read(), owner, via)
    if holder is None:
        create()
        return
    try:
        _send_guarded(kind, name, owner, holder, read, send, ops, via)
    except ApiException as exc:
        if not gone(exc):
            raise
        create()
