"""Create-or-replace of a namespaced custom object (the LeaderWorkerSet, KEDA's ScaledObject), shared by
``groupkube`` and ``scalekube``.

Same rules as ``kube.Kube`` for the Deployment: created when absent, otherwise an RFC 6902 JSON patch replaces
its whole ``spec`` and adds ctxfit's labels/annotations (``kube._replace_ops``; field manager ``ctxfit``), so
fields another controller owns (KEDA's label and finalizer, the LWS controller's status) are left alone. What
the caller believed (``exists``) may be stale: a 409 on create patches instead, a 404 for the object on the
patch creates it; an existing object is changed or deleted only when it is the server's (``guarded``). A 404
for the resource type itself (its CRD not installed: the API server's ``Status`` names
no object) is raised as it is, never answered with a create that must fail the same way.
"""

from __future__ import annotations

import json
from typing import Any, NamedTuple

from kubernetes import client
from kubernetes.client.exceptions import ApiException

from ..views.ownership import server_uid_of
from .client import FIELD_MANAGER, Kube, _json, _release, _replace_ops
from .guarded import create_or_patch, delete_owned, patch_owned
from .rest import JSON_PATCH


class CustomResource(NamedTuple):
    """Where a custom resource is served: API ``group``, ``version`` and ``plural`` (as in its CRD)."""

    group: str
    version: str
    plural: str


KINDS = {"leaderworkersets": "LeaderWorkerSet", "scaledobjects": "ScaledObject"}
"""Kind of each custom resource the operator writes (for messages and the ownership check)."""


def resource_missing(exc: ApiException) -> bool:
    """A 404 for the resource type, not for one object: the API server's ``Status`` ``details`` name no object
    (kube-apiserver's answer for a resource it does not serve, seen in tests/e2e/test_autoscaling_operator.py).
    An unreadable body counts as the type missing."""
    if exc.status != 404:
        return False
    try:
        body = json.loads(exc.body) if exc.body else {}
    except (ValueError, TypeError):
        return True
    details = body.get("details") if isinstance(body, dict) else None
    return not (isinstance(details, dict) and details.get("name"))


def read_custom_object(kube: Kube, resource: CustomResource, namespace: str, name: str) -> dict[str, Any] | None:
    """The object as a dict, None when absent. Raises ``ApiException`` otherwise (a 404 for the resource type
    itself included: ``resource_missing``)."""
    group, version, plural = resource
    try:
        rsp = kube.custom.get_namespaced_custom_object(group, version, namespace, plural, name, _preload_content=False)
    except ApiException as exc:
        if exc.status == 404 and not resource_missing(exc):
            return None
        raise
    return _json(rsp)


def patch_custom_object(kube: Kube, resource: CustomResource, namespace: str, name: str, owner: str,
                        ops: list[dict[str, Any]]) -> bool:
    """Apply ``ops`` (JSON patch) to the object when it is the server's (uid ``owner``; ``guarded``). Returns
    False when it is absent. Raises ``ownership.Foreign`` for an object that is not the server's."""
    group, version, plural = resource

    def send(patch: list[dict[str, Any]]) -> None:
        _release(kube.custom.patch_namespaced_custom_object(group, version, namespace, plural, name, patch,
                                                            _content_type=JSON_PATCH, field_manager=FIELD_MANAGER,
                                                            _preload_content=False))

    try:
        return patch_owned(_kind(resource), name, owner, lambda: read_custom_object(kube, resource, namespace, name),
                           send, ops)
    except ApiException as exc:
        if exc.status == 404 and not resource_missing(exc):
            return False
        raise


def delete_custom_object(kube: Kube, resource: CustomResource, namespace: str, name: str, owner: str) -> bool:
    """Delete the object when it is the server's, with its uid as a precondition (``guarded``). Returns False
    when it is absent. Raises ``ownership.Foreign`` for an object that is not the server's."""
    group, version, plural = resource

    def send(uid: str) -> None:
        options = client.V1DeleteOptions(preconditions=client.V1Preconditions(uid=uid)) if uid else None
        _release(kube.custom.delete_namespaced_custom_object(group, version, namespace, plural, name, body=options,
                                                             _preload_content=False))

    return delete_owned(_kind(resource), name, owner, lambda: read_custom_object(kube, resource, namespace, name),
                        send)


def _kind(resource: CustomResource) -> str:
    return KINDS.get(resource.plural, resource.plural)


def apply_custom_object(kube: Kube, resource: CustomResource, obj: dict[str, Any], *, exists: bool) -> None:
    """Create ``obj`` (``exists`` False) or replace its spec and ctxfit's labels/annotations when the existing
    object is the server's (``guarded``); a stale ``exists`` is corrected by the 409/404 answer (see the module
    docstring).

    Raises:
        ownership.Foreign: an object of that name exists and is not the server's (nothing written to it).
        ApiException: any other answer, including a 404 for the resource type itself (``resource_missing``);
            a 400/403/422 is turned into ``rejections.Rejected`` by the caller.
    """
    meta = obj["metadata"]
    name, namespace = meta["name"], meta["namespace"]
    group, version, plural = resource
    raw: dict[str, Any] = {"field_manager": FIELD_MANAGER, "_preload_content": False}

    def create() -> None:
        _release(kube.custom.create_namespaced_custom_object(group, version, namespace, plural, obj, **raw))

    def send(patch: list[dict[str, Any]]) -> None:
        _release(kube.custom.patch_namespaced_custom_object(group, version, namespace, plural, name, patch,
                                                            _content_type=JSON_PATCH, **raw))

    create_or_patch(obj.get("kind") or _kind(resource), name, server_uid_of(obj), create,
                    lambda: read_custom_object(kube, resource, namespace, name), send, _replace_ops(obj),
                    exists=exists, gone=lambda exc: exc.status == 404 and not resource_missing(exc))
