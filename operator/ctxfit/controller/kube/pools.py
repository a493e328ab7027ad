"""Kubernetes I/O of the inference gateway: InferencePools (``inference.networking.k8s.io/v1``) and the context
labels of live engine pods (docs/design/gateway.md).

Every write goes through the ownership rule every child write follows (``views/ownership.py``, ``kube/guarded.py``):
a pool is written only when absent (a create) or when its ownerReferences name the server by uid (a same-named
pool of anyone else is ``guarded.Foreign``: never written), behind ``test`` operations on its uid and that
reference, and deleted with its uid as a precondition. A pod is relabelled only when it is the server's by
uid down the owner chain: its controller (a ReplicaSet, or a LeaderWorkerSet's leader StatefulSet) is read and
must be controlled by the server's own workload (the Deployment or LeaderWorkerSet whose ownerReference names
the server), and the patch tests the pod's uid and that controller's uid; any other pod carrying the server's
labels is left alone. A failed test (422) or precondition (409) writes nothing; the next pass reads again.
Only servers that name a pool (or did) read anything here. RBAC: ``inferencepools``
get/list/watch/create/patch/delete, ``pods`` patch, ``replicasets``/``statefulsets`` get, behind the chart's
``gateway.enabled``.

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

from ..views.ownership import holder_of, server_uid_of
from ..views.routing import MemberView, PoolView, RoutingSnapshot, pool_view
from .client import FIELD_MANAGER, Kube, _pointer, _replace_ops
from .custom import resource_missing
from .guarded import Foreign, create_or_patch, delete_owned, patch_owned
from .rest import INFERENCE_POOLS, JSON_PATCH, PODS, REPLICA_SETS, STATEFUL_SETS, Conflict

POOL_KIND = "InferencePool"

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
    """Create the pool (``live`` None or being deleted), or replace its spec and ctxfit's labels/annotations when
    it is the server's (``guarded.create_or_patch``: read, checked, patched behind ``test`` operations).

    Raises:
        PoolAPIMissing: the resource is not served. guarded.Foreign: a pool of that name exists and is not the
            server's (nothing written). ApiException: anything else (400/403/422 refusals are turned into
            ``rejections.Rejected`` by the caller).
    """
    meta = obj["metadata"]
    namespace, name = meta["namespace"], meta["name"]
    manager = {"fieldManager": FIELD_MANAGER}

    def create() -> None:
        kube.rest.call("POST", INFERENCE_POOLS, namespace, query=manager, body=obj)

    def read() -> dict[str, Any] | None:
        return kube.rest.read(INFERENCE_POOLS, namespace, name)

    def send(ops: list[dict[str, Any]]) -> None:
        kube.rest.call("PATCH", INFERENCE_POOLS, namespace, name, query=manager, body=ops, content_type=JSON_PATCH)

    try:
        create_or_patch(POOL_KIND, name, server_uid_of(obj), create, read, send, _replace_ops(obj),
                        exists=live is not None and not live.deleting, gone=_pool_gone)
    except ApiException as exc:
        if resource_missing(exc):
            raise PoolAPIMissing(str(exc.reason)) from exc
        raise


def _pool_gone(exc: ApiException) -> bool:
    """A 404 for the pool itself (deleted meanwhile: create it), not for its resource type (the API is gone)."""
    return bool(exc.status == 404 and not resource_missing(exc))


def delete_pool(kube: Kube, namespace: str, name: str, server_uid: str) -> None:
    """Delete the pool when it is the server's (``guarded.delete_owned``: its uid as a precondition, so a pool of
    that name created since, or anyone else's, is left alone); absent, replaced or foreign is fine."""
    def send(uid: str) -> None:
        kube.rest.call("DELETE", INFERENCE_POOLS, namespace, name,
                       body={"kind": "DeleteOptions", "apiVersion": "v1", "preconditions": {"uid": uid}})

    try:
        delete_owned(POOL_KIND, name, server_uid, lambda: kube.rest.read(INFERENCE_POOLS, namespace, name), send)
    except (Foreign, Conflict):
        return
    except ApiException as exc:
        if exc.status in (404, 409) or resource_missing(exc):
            return
        raise


WORKLOAD_CHILD = {"Deployment": "ReplicaSet", "LeaderWorkerSet": "StatefulSet"}
"""The kind of a pod's controller under each workload kind."""


def _read_controller(kube: Kube, namespace: str, kind: str, name: str) -> dict[str, Any] | None:
    """The pod's controller (a ReplicaSet or a StatefulSet) as the API returns it; None when absent."""
    if kind == "ReplicaSet":
        return kube.rest.read(REPLICA_SETS, namespace, name)
    return kube.rest.read(STATEFUL_SETS, namespace, name)


def patch_pod_labels(kube: Kube, namespace: str, pod: str, server_uid: str, workload: tuple[str, str],
                     labels: Mapping[str, str]) -> bool:
    """Set ``labels`` on the live pod ``pod`` when it is the server's (uid ``server_uid``) down its owner chain:
    its controller, of the kind ``workload`` (``(kind, uid)`` of the server's own Deployment or LeaderWorkerSet)
    creates pods through, is controlled by that workload. The patch tests the pod's uid and its controller
    reference (``guarded.patch_owned`` with the controller's uid as ``via``). Returns whether it was patched: a
    pod gone, changed since, or not the server's is left alone (the next pass looks again).
    """
    kind, workload_uid = workload
    child_kind = WORKLOAD_CHILD[kind]
    live = kube.rest.read(PODS, namespace, pod)
    holder = holder_of(live)
    if live is None or holder is None or holder.controller_ref is None or not workload_uid:
        return False
    index, controller_uid = holder.controller_ref
    ref = live["metadata"]["ownerReferences"][index]
    if ref.get("kind") != child_kind or ref.get("apiVersion") != "apps/v1":
        return False
    controller = holder_of(_read_controller(kube, namespace, child_kind, str(ref.get("name") or "")))
    if controller is None or controller.uid != controller_uid or controller.controller_ref is None \
            or controller.controller_ref[1] != workload_uid:
        return False
    ops: list[dict[str, Any]] = [{"op": "add", "path": f"/metadata/labels/{_pointer(k)}", "value": v}
                                 for k, v in sorted(labels.items())]

    def send(patch: list[dict[str, Any]]) -> None:
        kube.rest.call("PATCH", PODS, namespace, pod, query={"fieldManager": FIELD_MANAGER}, body=patch,
                       content_type=JSON_PATCH)

    try:
        return patch_owned("Pod", pod, server_uid, lambda: kube.rest.read(PODS, namespace, pod), send, ops,
                           live=live, via=(controller_uid,))
    except (Foreign, Conflict):
        return False
    except ApiException as exc:
        if exc.status in (404, 422):
            return False
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
