"""Kubernetes I/O of the inference gateway: InferencePools (``inference.networking.k8s.io/v1``) and the context
labels of live engine pods.

Every write behind the ownership rule by uid. The uid chain, RBAC and the API absent: docs/design/gateway.md.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from kubernetes.client.exceptions import ApiException
from pydantic import ValidationError

from ctxfit.api.routing import InferencePoolRouting
from ctxfit.render import SERVER_LABEL

from ..views.ownership import holder_of
from ..views.routing import MemberView, PoolView, RoutingSnapshot, pool_view
from .answers import conflict, invalid, not_found, resource_missing
from .guarded import Foreign
from .objects import FIELD_MANAGER, create_or_replace, delete_if_owned, get_or_none, pointer
from .protocol import KubeClient
from .rest import INFERENCE_POOLS, JSON_PATCH, PODS, REPLICASETS, STATEFULSETS, Conflict

ABSENT_MEMO_SECONDS = 60.0
"""The InferencePool API found absent is asked again after this long (the routing pass requeues as often)."""


class PoolAPIMissing(Exception):
    """The API server does not serve ``inferencepools.inference.networking.k8s.io`` (the GIE CRDs are absent)."""


@dataclass
class PoolMemo:
    """Shared by all reconciles (on ``Runtime``): the InferencePool API was found absent at ``absent_until``."""

    absent_until: float = 0.0

    def absent(self, now: float) -> bool:
        return now < self.absent_until

    def found_absent(self, now: float) -> None:
        self.absent_until = now + ABSENT_MEMO_SECONDS

    def found_present(self) -> None:
        self.absent_until = 0.0


def get_pool(kube: KubeClient, namespace: str, name: str) -> PoolView | None:
    """The InferencePool ``name`` as a ``PoolView``, None when absent.

    Raises:
        PoolAPIMissing: the resource itself is not served.
    """
    try:
        found = get_or_none(kube.rest, INFERENCE_POOLS, namespace, name)
    except ApiException as exc:
        if resource_missing(exc):
            raise PoolAPIMissing(str(exc.reason)) from exc
        raise
    return pool_view(found) if found is not None else None


def apply_pool(kube: KubeClient, obj: dict[str, Any], live: PoolView | None) -> None:
    """Create the pool (``live`` None or being deleted), or replace its spec and ctxfit's labels/annotations behind
    the ownership guard (``objects.create_or_replace``: the pool is the one read and still names the server's uid).

    Raises:
        PoolAPIMissing: the resource is not served. Foreign: the pool is not the server's (nothing written).
        ApiException: anything else (400/403/422 refusals are turned into ``rejections.Rejected`` by the caller).
    """
    try:
        create_or_replace(kube.rest, INFERENCE_POOLS, obj, exists=live is not None and not live.deleting)
    except ApiException as exc:
        if resource_missing(exc):
            raise PoolAPIMissing(str(exc.reason)) from exc
        raise


def delete_pool(kube: KubeClient, namespace: str, name: str, server_uid: str) -> None:
    """Delete the pool when it is the server's of ``server_uid`` (``objects.delete_if_owned``: checked, then a
    uid precondition); absent, foreign or replaced meanwhile: left alone."""
    try:
        delete_if_owned(kube.rest, INFERENCE_POOLS, namespace, name, server_uid)
    except (Foreign, Conflict):
        return  # not the server's (any more): the next pass reads it again
    except ApiException as exc:
        if not_found(exc) or conflict(exc):
            return
        raise


CONTROLLERS = ("ReplicaSet", "StatefulSet")
"""Kinds that control an engine pod of the server's workload (Deployment -> ReplicaSet; LeaderWorkerSet -> leader
StatefulSet)."""


def patch_pod_labels(kube: KubeClient, namespace: str, pod: str, server: str, owner: str, labels: Mapping[str, str],
                     workload_uid: str) -> bool:
    """Set ``labels`` on a live pod of ``server`` when the uid chain holds: the pod's controller is the ReplicaSet or
    StatefulSet ``owner`` whose own controller has ``workload_uid`` (the server's workload, checked by the caller as
    the server's). The patch tests the pod's uid, that reference's uid and the ``ctxfit.io/server`` label, so a pod
    replaced or re-owned since is left alone. Returns True when patched (False: the chain does not hold, or the pod
    is gone or changed: the next pass looks again)."""
    live = kube.rest.read(PODS, namespace, pod)
    if live is None or not workload_uid:
        return False
    meta = live.get("metadata") or {}
    refs = meta.get("ownerReferences") or []
    found = next(((i, r) for i, r in enumerate(refs) if isinstance(r, Mapping) and r.get("controller")), None)
    if found is None or found[1].get("name") != owner or found[1].get("kind") not in CONTROLLERS or \
            (meta.get("labels") or {}).get(SERVER_LABEL) != server or not meta.get("uid"):
        return False
    index, ref = found
    controller = (kube.rest.read(REPLICASETS, namespace, owner) if ref["kind"] == "ReplicaSet"
                  else kube.rest.read(STATEFULSETS, namespace, owner))
    holder = holder_of(controller)
    if holder is None or holder.uid != ref.get("uid") or holder.controller_ref is None or \
            holder.controller_ref[1] != workload_uid:
        return False
    ops: list[dict[str, Any]] = [
        {"op": "test", "path": "/metadata/uid", "value": meta["uid"]},
        {"op": "test", "path": f"/metadata/ownerReferences/{index}/uid", "value": ref["uid"]},
        {"op": "test", "path": f"/metadata/labels/{pointer(SERVER_LABEL)}", "value": server},
    ]
    ops += [{"op": "add", "path": f"/metadata/labels/{pointer(k)}", "value": v} for k, v in sorted(labels.items())]
    try:
        kube.rest.call("PATCH", PODS, namespace, pod, query={"fieldManager": FIELD_MANAGER}, body=ops,
                       content_type=JSON_PATCH)
    except ApiException as exc:
        if not_found(exc) or invalid(exc):
            return False
        raise
    return True


MembersOf = Callable[[str], tuple[MemberView, ...]]
"""``members_of(pool)``: the servers of the namespace that name ``pool`` (the operator's index of servers)."""


def _pool_name(name: str, spec: Mapping[str, Any]) -> str | None:
    raw = (spec.get("routing") or {}).get("inferencePool")
    if raw is None:
        return None
    try:
        return InferencePoolRouting.model_validate(raw).pool_name(name)
    except ValidationError:
        return None


def read_routing(kube: KubeClient, memo: PoolMemo, enabled: bool, namespace: str, name: str, spec: Mapping[str, Any],
                 recorded: str | None, members_of: MembersOf | None) -> RoutingSnapshot | None:
    """What the routing pass needs from the API: None when the server names no pool and none is recorded in
    ``status.routing`` (``recorded``); disabled: nothing read (no RBAC for it)."""
    wanted = _pool_name(name, spec)
    if wanted is None and recorded is None:
        return None
    names = sorted({n for n in (wanted, recorded) if n})
    members = {n: members_of(n) if members_of is not None else () for n in names}
    if not enabled:
        return RoutingSnapshot(enabled=False, api_served=None, members=members)
    now = time.monotonic()
    if memo.absent(now):
        return RoutingSnapshot(enabled=True, api_served=False, members=members)
    pools: dict[str, PoolView] = {}
    try:
        for pool in names:
            found = get_pool(kube, namespace, pool)
            if found is not None:
                pools[pool] = found
    except PoolAPIMissing:
        memo.found_absent(now)
        return RoutingSnapshot(enabled=True, api_served=False, members=members)
    memo.found_present()
    return RoutingSnapshot(enabled=True, api_served=True, pools=pools, members=members)
