"""The read half of a pass: the ``Snapshot`` ``converge`` takes, from the caller's watches and the API.

Objects of a child's name that are not the server's (``views/ownership.py``) are read as absent: converge renders
them and the write ends in ``guarded.Foreign`` instead of touching them.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import replace
from datetime import UTC, datetime
from typing import Any

from ctxfit.api.status import InferenceServerStatus
from ctxfit.api.status_check import read_status
from ctxfit.render.cache import DOWNLOAD_CONTAINER, claim_name_for

from ..converge import Snapshot
from ..converge.cache import owned_claim_name
from ..converge.types import ScalingSnapshot
from ..kube.groups import GroupsNotInstalled, get_group
from ..kube.keda import read_scaling
from ..kube.pools import MembersOf, read_routing
from ..views.cache import ClaimView
from ..views.pods import DeploymentView, GPUNode, PodView, deployment_view
from ..views.workloads import ServiceView
from .context import Runtime, multi_node

DOWNLOAD_LOG_LINES = 5
"""Lines of a running download's log read for its progress line (one every 15 s)."""


ClaimSeen = Callable[[str], ClaimView | None]
"""``claim_seen(claim name)``: the operator's claim of that name as its watch shows it (None: not seen)."""


def _claim(rt: Runtime, namespace: str, name: str, uid: str, spec: dict[str, Any], old: InferenceServerStatus,
           claim_seen: ClaimSeen | None = None) -> ClaimView | None:
    """The cache's claim as it exists: the operator's (from its watch when ``claim_seen`` is given, else
    read), or the user's (read) (None: absent, or no claim in this mode). A claim of the operator's name that
    is not the server's (``ownership``) counts as absent: creating it then ends in ``guarded.Foreign``."""
    found = _found_claim(rt, namespace, name, spec, old, claim_seen)
    user = ((spec.get("model") or {}).get("cache") or {}).get("persistentVolumeClaim")
    if found is not None and not user and found.holder is not None \
            and not found.holder.owns(uid, "PersistentVolumeClaim"):
        return None
    return found


def _found_claim(rt: Runtime, namespace: str, name: str, spec: dict[str, Any], old: InferenceServerStatus,
                 claim_seen: ClaimSeen | None = None) -> ClaimView | None:
    if rt.claims is None:
        return None
    cache = (spec.get("model") or {}).get("cache") or {}
    user = (cache.get("persistentVolumeClaim") or {}).get("claimName")
    if user:  # the user's claim: read for its size (a full claim's message names it)
        return rt.claims.get_claim(namespace, str(user))
    if cache and "volumeClaimTemplate" not in cache:
        return None  # no claim in this mode
    if old.model is None:
        # A fresh plan: created without a read (exists: 409, kept); the passes before the status records
        # it see the claim this process just created instead of creating it again.
        return rt.claims.created(namespace, claim_name_for(name))
    claim = owned_claim_name(old.model) or claim_name_for(name)
    if claim_seen is not None:  # not seen yet: maybe just created by this process
        return claim_seen(claim) or rt.claims.created(namespace, claim)
    return rt.claims.get_claim(namespace, claim)


def service_via(workload: DeploymentView | None, body: dict[str, Any]) -> tuple[str, ...]:
    """The uid of a multi-node server's own LeaderWorkerSet: the headless Service its controller creates under the
    server's name (subdomain policy ``Shared``, sigs.k8s.io/lws ``reconcileHeadlessServices``) is the server's
    Service (ctxfit points it at the leaders). () otherwise."""
    holder = workload.holder if workload is not None else None
    return (holder.uid,) if multi_node(body) and holder is not None and holder.uid else ()


def _group_view(rt: Runtime, body: dict[str, Any], namespace: str, name: str,
                deployment: DeploymentView | None) -> tuple[DeploymentView | None, bool]:
    """For a multi-node server: its LeaderWorkerSet (read when the Deployment index has nothing, or when the view
    is this process's own write: the group's uid decides whose its headless Service is), and whether the API
    server serves LeaderWorkerSets at all (``GroupsMemo``: asked at most once a minute while it does not)."""
    if not multi_node(body):
        return deployment, True
    now = time.monotonic()
    if rt.groups.absent(now):
        return deployment, False
    try:
        if deployment is None:  # not in the Deployment index: read the LeaderWorkerSet
            deployment = deployment_view(get_group(rt.kube, namespace, name))
        elif not (deployment.holder and deployment.holder.uid):
            deployment = deployment_view(get_group(rt.kube, namespace, name)) or deployment
    except GroupsNotInstalled:
        rt.groups.found_absent(now)
        return deployment, False
    return deployment, True


def _ours(view: DeploymentView | None, uid: str) -> DeploymentView | None:
    """``view`` when the workload is the server's (or its holder is not known: a view built, not read)."""
    if view is None or view.holder is None or view.holder.owns(uid, "Deployment"):
        return view
    return None


def _own_scaling(scaling: ScalingSnapshot | None, uid: str) -> ScalingSnapshot | None:
    """``scaling`` with a live ScaledObject that is not the server's left out (absent, for converge)."""
    live = scaling.live if scaling is not None else None
    if scaling is None or live is None or live.holder is None or live.holder.owns(uid, "ScaledObject"):
        return scaling
    return replace(scaling, live=None)


class Unknown:
    """Marker: the caller has no view of this object; read it from the API."""


UNKNOWN = Unknown()


def snapshot(rt: Runtime, namespace: str, name: str, nodes: tuple[GPUNode, ...], pods: tuple[PodView, ...],
             body: dict[str, Any], deployment: DeploymentView | Unknown | None,
             service_port: ServiceView | int | Unknown | None, claim_seen: ClaimSeen | None,
             members_of: MembersOf | None, clock: float | None = None) -> tuple[Snapshot, str | None]:
    """The pass's ``Snapshot`` of the server ``body`` and the problem of its stored status (None: valid; a text:
    it was discarded and the pass plans again from the spec).

    ``deployment``/``service_port``: the caller's watch views, ``UNKNOWN`` to read them; objects that are not the
    server's count as absent. ``clock``: ``time.monotonic()`` seconds the refusal book is read at (None: now).
    Raises ``ApiException`` from a read (``reconcile`` counts it and retries); absent objects are None, never errors.
    """
    uid = str(body["metadata"].get("uid") or "")
    if isinstance(deployment, Unknown):
        deployment = deployment_view(rt.kube.get_deployment(namespace, name))
    deployment, groups_served = _group_view(rt, body, namespace, name, deployment)
    deployment = _ours(deployment, uid)
    if isinstance(service_port, Unknown):
        service_port = rt.kube.service_port(namespace, name)
    if isinstance(service_port, ServiceView):
        service_port = service_port.port_for(uid, service_via(deployment, body), leaders_only=multi_node(body))
    meta = body["metadata"]
    old, problem = read_status(body.get("status"))  # stored status is input: never trusted past the spec's bounds
    spec_dict = body.get("spec") or {}
    snap = Snapshot(
        name=name, namespace=namespace, uid=meta["uid"], generation=int(meta.get("generation") or 0),
        spec=spec_dict, status=old, nodes=nodes, pods=pods, deployment=deployment,
        service_port=service_port, now=datetime.now(UTC), storage=rt.claims.storage() if rt.claims else None,
        claim=_claim(rt, namespace, name, uid, spec_dict, old, claim_seen),
        download_log=lambda pod: rt.kube.log_tail(namespace, pod.name, DOWNLOAD_CONTAINER, previous=False,
                                                  lines=DOWNLOAD_LOG_LINES),
        # cached; used to plan; a namespace's own start-ups first, others' only as MIN_TENANTS namespaces agree
        calibration=rt.calibration.table().scoped(namespace) if rt.calibration is not None else None,
        scaling=_own_scaling(read_scaling(rt.kube, rt.keda, rt.settings.keda_enabled, namespace, name,
                                          spec_dict.get("autoscaling") is not None, old.autoscaling is not None),
                             uid),
        groups_served=groups_served,
        resolution=rt.resolutions.view((namespace, name), spec_dict) if rt.resolutions is not None else None,
        draft_resolution=rt.resolutions.draft_view((namespace, name), spec_dict)
        if rt.resolutions is not None else None,
        adapter_resolutions=rt.resolutions.adapter_views((namespace, name), spec_dict)
        if rt.resolutions is not None else (),
        routing=read_routing(rt.kube, rt.pools, rt.settings.gateway_enabled, namespace, name, spec_dict,
                             old.routing.pool if old.routing is not None else None, members_of),
        created=str(meta.get("creationTimestamp") or ""),
        refusals=rt.rejections.refusals((namespace, name), time.monotonic() if clock is None else clock),
        writes_accepted=rt.rejections.accepted_all((namespace, name)),
        service_writing=rt.services is not None and rt.services.busy((namespace, name)),
        service_lane=rt.services is not None,
    )
    if rt.resolutions is not None:  # it waits only on what its spec needs now (an edited model lets the old go)
        views = (snap.resolution, snap.draft_resolution, *snap.adapter_resolutions)
        rt.resolutions.retain((namespace, name), [v.key for v in views if v is not None])
    return snap, problem
