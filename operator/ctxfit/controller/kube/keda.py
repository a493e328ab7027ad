"""Kubernetes I/O for autoscaled servers: the KEDA ``ScaledObject`` (``keda.sh/v1alpha1``).

Same write rules as the Deployment (``objects.py``); the pause annotation is always rendered.
What is left to KEDA, RBAC and KEDA absent: docs/design/autoscaling.md.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

from kubernetes.client.exceptions import ApiException

from ctxfit.render.scaledobject import PAUSED_ANNOTATION

from ..converge.types import Keda, ScalingSnapshot
from ..views.workloads import ScaledObjectView, scaled_object_view
from .answers import not_found, resource_missing
from .objects import create_or_replace, delete_if_owned, get_or_none, patch_if_owned, pointer
from .protocol import KubeClient
from .rest import SCALED_OBJECTS

KEDA_GROUP = SCALED_OBJECTS.group
KEDA_VERSION = SCALED_OBJECTS.version
KEDA_PLURAL = SCALED_OBJECTS.plural


class KedaNotInstalled(Exception):
    """The API server does not serve ``scaledobjects.keda.sh`` (the KEDA CRDs are not installed)."""


def get_scaled_object(kube: KubeClient, namespace: str, name: str) -> ScaledObjectView | None:
    """The ScaledObject ``name`` as a ``ScaledObjectView``, None when absent.

    Raises:
        KedaNotInstalled: the ``keda.sh/v1alpha1`` ``scaledobjects`` resource does not exist.
    """
    try:
        found = get_or_none(kube.rest, SCALED_OBJECTS, namespace, name)
    except ApiException as exc:
        if resource_missing(exc):
            raise KedaNotInstalled(str(exc.reason)) from exc
        raise
    return scaled_object_view(found) if found is not None else None


def apply_scaled_object(kube: KubeClient, obj: dict[str, Any], live: ScaledObjectView | None) -> None:
    """Create the ScaledObject (``live`` None), or replace its spec and ctxfit's labels/annotations
    (``objects.create_or_replace``; a stale ``live`` is corrected by the 409/404 answer).

    Raises:
        KedaNotInstalled: the ``scaledobjects.keda.sh`` resource is not served.
        ownership.Foreign: a ScaledObject of that name is not the server's (nothing written).
        ApiException: otherwise (a 400/403/422 is turned into ``rejections.Rejected`` by the caller).
    """
    try:
        create_or_replace(kube.rest, SCALED_OBJECTS, obj, exists=live is not None)
    except ApiException as exc:
        if resource_missing(exc):
            raise KedaNotInstalled(str(exc.reason)) from exc
        raise


def pause_scaled_object(kube: KubeClient, namespace: str, name: str, owner: str,
                        live: ScaledObjectView | None = None) -> None:
    """Add the pause annotation to the server's ScaledObject (its spec unread; a guarded JSON patch). Absent or
    no KEDA is fine. Raises ``ownership.Foreign`` when it is not the server's (uid ``owner``)."""
    if live is not None and not live.annotations:
        ops = [{"op": "add", "path": "/metadata/annotations", "value": {PAUSED_ANNOTATION: "true"}}]
    else:
        ops = [{"op": "add", "path": f"/metadata/annotations/{pointer(PAUSED_ANNOTATION)}", "value": "true"}]
    try:
        patch_if_owned(kube.rest, SCALED_OBJECTS, namespace, name, owner, ops)
    except ApiException as exc:
        if not not_found(exc):
            raise


def delete_scaled_object(kube: KubeClient, namespace: str, name: str, owner: str) -> None:
    """Delete the server's ScaledObject (KEDA then deletes its HPA and leaves the replica count), with its uid as
    a precondition; absent is fine. Raises ``ownership.Foreign`` when it is not the server's (uid ``owner``)."""
    try:
        delete_if_owned(kube.rest, SCALED_OBJECTS, namespace, name, owner)
    except ApiException as exc:
        if not not_found(exc):
            raise


@dataclass
class KedaMemo:
    """Shared by all reconciles (on ``Runtime``): KEDA was found absent, so no server asks again before
    ``absent_until`` (``time.monotonic()``): one 404 per ``ABSENT_MEMO_SECONDS``, not one per reconcile."""

    absent_until: float = 0.0

    def absent(self, now: float) -> bool:
        """KEDA was found absent less than ``ABSENT_MEMO_SECONDS`` ago."""
        return now < self.absent_until

    def found_absent(self, now: float) -> None:
        """Remember that the API server does not serve ScaledObjects."""
        self.absent_until = now + ABSENT_MEMO_SECONDS


ABSENT_MEMO_SECONDS = 30.0


def read_scaling(kube: KubeClient, memo: KedaMemo, enabled: bool, namespace: str, name: str, wanted: bool,
                 recorded: bool) -> ScalingSnapshot | None:
    """What autoscaling needs from the API: None when neither ``spec.autoscaling`` is set (``wanted``) nor a
    ScaledObject is recorded in ``status.autoscaling`` (``recorded``): nothing is read then.

    KEDA turned off in the settings (``enabled`` False): ``Keda.DISABLED``, nothing read (no RBAC for it).
    """
    if not (wanted or recorded):
        return None
    if not enabled:
        return ScalingSnapshot(Keda.DISABLED)
    now = time.monotonic()
    if memo.absent(now):
        return ScalingSnapshot(Keda.ABSENT)
    try:
        return ScalingSnapshot(Keda.INSTALLED, get_scaled_object(kube, namespace, name))
    except KedaNotInstalled:
        memo.found_absent(now)
        return ScalingSnapshot(Keda.ABSENT)
