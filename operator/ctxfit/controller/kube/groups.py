"""Kubernetes I/O for multi-node servers: the LeaderWorkerSet (``leaderworkerset.x-k8s.io/v1``).

Same rules as ``kube.Kube`` for the Deployment: created when absent, otherwise a JSON patch replaces its
whole ``spec`` and ctxfit's labels/annotations (field manager ``ctxfit``); scaling to zero patches
``spec.replicas``. Only multi-node servers reach this module, so single-node reconciles read and write
nothing more than before. RBAC: ``leaderworkersets`` get, create, patch (chart ``templates/rbac.yaml``).
"""

from __future__ import annotations

from typing import Any

from kubernetes.client.exceptions import ApiException

from ctxfit.render.leaderworkerset import LWS_PLURAL

from .client import MERGE_PATCH, Kube, _json, _release
from .custom import CustomResource, apply_custom_object

LWS_GROUP = "leaderworkerset.x-k8s.io"
LWS_VERSION = "v1"
LWS = CustomResource(LWS_GROUP, LWS_VERSION, LWS_PLURAL)


def get_group(kube: Kube, namespace: str, name: str) -> dict[str, Any] | None:
    """The LeaderWorkerSet as a plain dict, None when absent."""
    try:
        rsp = kube.custom.get_namespaced_custom_object(LWS_GROUP, LWS_VERSION, namespace, LWS_PLURAL, name,
                                                       _preload_content=False)
    except ApiException as exc:
        if exc.status == 404:
            return None
        raise
    return _json(rsp)


def apply_group(kube: Kube, obj: dict[str, Any], *, exists: bool) -> None:
    """Create the LeaderWorkerSet, or replace its spec/labels/annotations (``customkube.apply_custom_object``;
    a stale ``exists`` is corrected). Raises ``ApiException`` (a 404 for the resource type: LWS not installed)."""
    apply_custom_object(kube, LWS, obj, exists=exists)


def scale_group_to_zero(kube: Kube, namespace: str, name: str) -> None:
    """Set the LeaderWorkerSet's replicas to 0 (every group's GPUs released); absent is fine."""
    try:
        _release(kube.custom.patch_namespaced_custom_object(
            LWS_GROUP, LWS_VERSION, namespace, LWS_PLURAL, name, {"spec": {"replicas": 0}},
            _content_type=MERGE_PATCH, _preload_content=False))
    except ApiException as exc:
        if exc.status != 404:
            raise
