"""Create-or-replace of a namespaced custom object (the LeaderWorkerSet, KEDA's ScaledObject), shared by
``groupkube`` and ``scalekube``.

Same rules as ``kube.Kube`` for the Deployment: created when absent, otherwise an RFC 6902 JSON patch replaces
its whole ``spec`` and adds ctxfit's labels/annotations (``kube._replace_ops``; field manager ``ctxfit``), so
fields another controller owns (KEDA's label and finalizer, the LWS controller's status) are left alone. What
the caller believed (``exists``) may be stale: a 409 on create patches instead, a 404 for the object on the
patch creates it. A 404 for the resource type itself (its CRD not installed: the API server's ``Status`` names
no object) is raised as it is, never answered with a create that must fail the same way.
"""

from __future__ import annotations

import json
from typing import Any, NamedTuple

from kubernetes.client.exceptions import ApiException

from .client import FIELD_MANAGER, Kube, _release, _replace_ops
from .rest import JSON_PATCH


class CustomResource(NamedTuple):
    """Where a custom resource is served: API ``group``, ``version`` and ``plural`` (as in its CRD)."""

    group: str
    version: str
    plural: str


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


def apply_custom_object(kube: Kube, resource: CustomResource, obj: dict[str, Any], *, exists: bool) -> None:
    """Create ``obj`` (``exists`` False) or replace its spec and ctxfit's labels/annotations; a stale ``exists``
    is corrected by the 409/404 answer (see the module docstring).

    Raises:
        ApiException: any other answer, including a 404 for the resource type itself (``resource_missing``);
            a 400/403/422 is turned into ``rejections.Rejected`` by the caller.
    """
    meta = obj["metadata"]
    name, namespace = meta["name"], meta["namespace"]
    group, version, plural = resource
    raw: dict[str, Any] = {"field_manager": FIELD_MANAGER, "_preload_content": False}
    if not exists:
        try:
            _release(kube.custom.create_namespaced_custom_object(group, version, namespace, plural, obj, **raw))
            return
        except ApiException as exc:
            if exc.status != 409:
                raise
    try:
        _release(kube.custom.patch_namespaced_custom_object(group, version, namespace, plural, name,
                                                            _replace_ops(obj), _content_type=JSON_PATCH, **raw))
    except ApiException as exc:
        if exc.status != 404 or resource_missing(exc):
            raise
        _release(kube.custom.create_namespaced_custom_object(group, version, namespace, plural, obj, **raw))
