"""Kubernetes I/O of the inference gateway: InferencePools (``inference.networking.k8s.io/v1``) and the context
labels of live engine pods (docs/design/gateway.md).

Every write checks ownership in the request itself, so a pool or pod that changed hands since it was read is
never written: a pool patch starts with a JSON-patch ``test`` of its controller ownerReference's uid (the
server's), a delete carries a uid precondition, a pod label patch tests the pod's ``ctxfit.io/server`` label
and its controller owner's name (the server's ReplicaSet or LeaderWorkerSet leader StatefulSet). A failed test
(422) or precondition (409) writes nothing; the next pass reads again. Only servers that name a pool (or did)
read anything here. RBAC: ``inferencepools`` get/list/watch/create/patch/delete and ``pods`` patch, behind the
chart's ``gateway.enabled``.

API absent: the API server answers 404 for the resource itself (``custom.resource_missing``); ``PoolMemo``
keeps that for ``ABSENT_MEMO_SECONDS``, so a cluster without the GIE CRDs costs one GET per minute, not one
per reconcile.
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

from ..views.routing import MemberView, PoolView, RoutingSnapshot, pool_view
from .client import FIELD_MANAGER, Kube, _pointer, _replace_ops
from .custom import resource_missing
from .rest import INFERENCE_POOLS, JSON_PATCH, PODS

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


def get_pool(kube: Kube, namespace: str, name: str) -> PoolView | None:
    """The InferencePool ``name`` as a ``PoolView``, None when absent.

    Raises:
        PoolAPIMissing: the resource itself is not served.
    """
    try:
        return pool_view(kube.rest.call_json("GET", INFERENCE_POOLS, namespace, name))
    except ApiException as exc:
        if resource_missing(exc):
            raise PoolAPIMissing(str(exc.reason)) from exc
        if exc.status == 404:
            return None
        raise


def apply_pool(kube: Kube, obj: dict[str, Any], live: PoolView | None) -> None:
    """Create the pool (``live`` None), or replace its spec and ctxfit's labels/annotations, testing first that
    its controller owner is still the server that renders it (``obj``'s ownerReference).

    Raises:
        PoolAPIMissing: the resource is not served. ApiException: anything else (409 on a create that lost a race,
            422 when the ownership test fails: the next pass reads the pool again; 400/403/422 refusals are turned
            into ``rejections.Rejected`` by the caller).
    """
    meta = obj["metadata"]
    namespace, name = meta["namespace"], meta["name"]
    manager = {"fieldManager": FIELD_MANAGER}
    try:
        if live is None or live.deleting:
            kube.rest.call("POST", INFERENCE_POOLS, namespace, query=manager, body=obj)
            return
        owner = meta["ownerReferences"][0]
        ops = [{"op": "test", "path": "/metadata/ownerReferences/0/uid", "value": owner["uid"]},
               *_replace_ops(obj)]
        kube.rest.call("PATCH", INFERENCE_POOLS, namespace, name, query=manager, body=ops, content_type=JSON_PATCH)
    except ApiException as exc:
        if resource_missing(exc):
            raise PoolAPIMissing(str(exc.reason)) from exc
        raise


def delete_pool(kube: Kube, namespace: str, name: str, uid: str) -> None:
    """Delete the pool whose uid is ``uid`` (a pool of that name recreated since is left alone); absent is fine."""
    try:
        kube.rest.call("DELETE", INFERENCE_POOLS, namespace, name,
                       body={"kind": "DeleteOptions", "apiVersion": "v1", "preconditions": {"uid": uid}})
    except ApiException as exc:
        if exc.status in (404, 409) or resource_missing(exc):
            return
        raise


def patch_pod_labels(kube: Kube, namespace: str, pod: str, server: str, owner: str, labels: Mapping[str, str]) -> None:
    """Set ``labels`` on a live pod of ``server`` whose controller owner is named ``owner`` (tested in the same
    request); a pod gone or changed since is left alone (the next pass looks again)."""
    ops: list[dict[str, Any]] = [
        {"op": "test", "path": f"/metadata/labels/{_pointer(SERVER_LABEL)}", "value": server},
        {"op": "test", "path": "/metadata/ownerReferences/0/name", "value": owner},
    ]
    ops += [{"op": "add", "path": f"/metadata/labels/{_pointer(k)}", "value": v} for k, v in sorted(labels.items())]
    try:
        kube.rest.call("PATCH", PODS, namespace, pod, query={"fieldManager": FIELD_MANAGER}, body=ops,
                       content_type=JSON_PATCH)
    except ApiException as exc:
        if exc.status in (404, 422):
            return
        raise


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


def read_routing(kube: Kube, memo: PoolMemo, enabled: bool, namespace: str, name: str, spec: Mapping[str, Any],
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
