"""The one way the operator writes a child object of any kind in ``rest``'s table: get-or-none, create-or-replace,
patch, delete and scale to zero, each over ``Rest.call`` and the ownership guard (``guarded``).

The patch shape, stale beliefs (409/404) and a missing CRD: docs/design/ownership.md.
"""

from __future__ import annotations

from typing import Any

from kubernetes.client.exceptions import ApiException

from ..views.ownership import server_uid_of
from .answers import object_gone
from .guarded import create_or_patch, delete_owned, patch_owned
from .rest import JSON_PATCH, Resource, Rest

FIELD_MANAGER = "ctxfit"
WORKLOAD_KINDS = frozenset({"Deployment", "LeaderWorkerSet"})
"""Kinds whose ``spec.replicas`` an autoscaler may own."""


def pointer(key: str) -> str:
    """``key`` as one RFC 6901 JSON-pointer segment (``~`` -> ``~0``, ``/`` -> ``~1``)."""
    return key.replace("~", "~0").replace("/", "~1")


def replace_ops(obj: dict[str, Any]) -> list[dict[str, Any]]:
    """RFC 6902 ops: replace ``/spec`` whole; add each of ctxfit's metadata labels and annotations.

    A workload rendered without ``spec.replicas`` (the autoscaler owns the count, ``converge/autoscaling.py``)
    gets one ``add`` per other ``spec`` field instead, so the live ``replicas`` is never written (a whole
    ``spec`` without it would be defaulted back to 1 by the API server).
    """
    meta = obj["metadata"]
    spec = obj["spec"]
    if obj.get("kind") in WORKLOAD_KINDS and "replicas" not in spec:
        ops: list[dict[str, Any]] = [{"op": "add", "path": f"/spec/{pointer(key)}", "value": value}
                                     for key, value in spec.items()]
    else:
        ops = [{"op": "replace", "path": "/spec", "value": spec}]
    for field in ("labels", "annotations"):
        for key, value in meta.get(field, {}).items():
            ops.append({"op": "add", "path": f"/metadata/{field}/{pointer(key)}", "value": value})
    return ops


def get_or_none(rest: Rest, resource: Resource, namespace: str, name: str) -> dict[str, Any] | None:
    """The object as a dict, None when absent.

    Raises:
        ApiException: any other answer, a 404 for the resource type itself included (``resource_missing``).
    """
    try:
        return rest.call_json("GET", resource, namespace, name)
    except ApiException as exc:
        if object_gone(exc):
            return None
        raise


def create_or_replace(rest: Rest, resource: Resource, obj: dict[str, Any], *, exists: bool,
                      ops: list[dict[str, Any]] | None = None, via: tuple[str, ...] = ()) -> None:
    """Create ``obj`` (``exists`` False) or patch the existing object with ``ops`` (default ``replace_ops(obj)``)
    when it is the server's (the uid in ``obj``'s ownerReference; ``via``: see ``Holder.owns``); a stale
    ``exists`` is corrected by the 409/404 answer (docs/design/ownership.md).

    Raises:
        ownership.Foreign: an object of that name exists and is not the server's (nothing written to it).
        ApiException: any other answer, a 404 for the resource type itself included (``resource_missing``);
            a 400/403/422 is turned into ``rejections.Rejected`` by the caller.
    """
    meta = obj["metadata"]
    name, namespace = meta["name"], meta["namespace"]
    manager = {"fieldManager": FIELD_MANAGER}

    def create() -> None:
        rest.call("POST", resource, namespace, query=manager, body=obj)

    def send(patch: list[dict[str, Any]]) -> None:
        rest.call("PATCH", resource, namespace, name, query=manager, body=patch, content_type=JSON_PATCH)

    create_or_patch(str(obj.get("kind") or resource.kind), name, server_uid_of(obj), create,
                    lambda: get_or_none(rest, resource, namespace, name), send,
                    replace_ops(obj) if ops is None else ops, exists=exists, gone=object_gone, via=via)


def patch_if_owned(rest: Rest, resource: Resource, namespace: str, name: str, owner: str,
                   ops: list[dict[str, Any]]) -> bool:
    """Apply ``ops`` (JSON patch) to the object when it is the server's (uid ``owner``). Returns False when it is
    absent. Raises ``ownership.Foreign`` for an object that is not the server's, ``ApiException`` otherwise."""

    def send(patch: list[dict[str, Any]]) -> None:
        rest.call("PATCH", resource, namespace, name, query={"fieldManager": FIELD_MANAGER}, body=patch,
                  content_type=JSON_PATCH)

    try:
        return patch_owned(resource.kind, name, owner, lambda: get_or_none(rest, resource, namespace, name), send, ops)
    except ApiException as exc:
        if object_gone(exc):
            return False
        raise


def scale_to_zero(rest: Rest, resource: Resource, namespace: str, name: str, owner: str) -> bool:
    """Set the server's workload's ``spec.replicas`` to 0 (GPUs released): a guarded JSON patch (the scale
    subresource carries no ownerReferences to test). Returns False when absent; raises as ``patch_if_owned``."""
    return patch_if_owned(rest, resource, namespace, name, owner, [{"op": "add", "path": "/spec/replicas", "value": 0}])


def delete_if_owned(rest: Rest, resource: Resource, namespace: str, name: str, owner: str) -> bool:
    """Delete the object when it is the server's, with its uid as a precondition (``guarded.delete_owned``).
    Returns False when it is absent. Raises ``ownership.Foreign`` (not the server's), ``Conflict`` (replaced
    meanwhile), ``ApiException`` otherwise."""

    def send(uid: str) -> None:
        options = {"kind": "DeleteOptions", "apiVersion": "v1", "preconditions": {"uid": uid}} if uid else None
        rest.call("DELETE", resource, namespace, name, body=options)

    return delete_owned(resource.kind, name, owner, lambda: get_or_none(rest, resource, namespace, name), send)
