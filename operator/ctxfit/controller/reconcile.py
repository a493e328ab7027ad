"""One reconcile of one InferenceServer: read (Kube + indexes) -> ``converge`` (pure) -> write.

Runs in a worker thread (the API client is synchronous). Order of writes: status first (compare-and-
swap; a conflict means someone else moved first, so nothing else is written and the key is requeued),
then its Events, then the Deployment/Service, then metrics (a fresh plan applies the Deployment first,
see ``_write``). A KEDA ScaledObject (``spec.autoscaling``) is written after the workload, except a pause,
which comes before it, so KEDA stops before the replicas drop to 0 (``_apply_scaling``). Errors never
escape: they are logged, counted in ``ctxfit_reconcile_errors_total{reason}`` and the key is retried later.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from typing import Any

from kubernetes.client.exceptions import ApiException

from ctxfit.api import EngineKind
from ctxfit.api.model_cache import CacheMode
from ctxfit.api.status import InferenceServerStatus, Reason
from ctxfit.api.status_check import read_status
from ctxfit.recovery import Failure, Observation, classify
from ctxfit.recovery.download import as_download_failure
from ctxfit.render.cache import DOWNLOAD_CONTAINER, claim_name_for
from ctxfit.render.deployment import CONTAINER_NAME
from ctxfit.render.leaderworkerset import LWS_KIND
from ctxfit.vocab.text import clean_lines, clean_text

from . import rejections
from .converge import Outcome, Snapshot, converge
from .converge.autoscaling import paused_rendering
from .converge.cache import owned_claim_name
from .converge.refusals import Write, claim_write, is_rejected
from .converge.types import EventNote, ScalingSnapshot
from .kube.calibration import CalibrationStore
from .kube.claims import ClaimsApi
from .kube.client import Conflict, Kube
from .kube.groups import GroupsMemo, GroupsNotInstalled, apply_group, get_group, scale_group_to_zero
from .kube.guarded import Foreign
from .kube.keda import (
    KedaMemo,
    KedaNotInstalled,
    apply_scaled_object,
    delete_scaled_object,
    pause_scaled_object,
    read_scaling,
)
from .kube.pools import MembersOf, PoolAPIMissing, PoolMemo, apply_pool, delete_pool, patch_pod_labels, read_routing
from .kube.resolution import Resolutions
from .kube.service_lane import ServiceLane
from .rejections import RejectionBook, refused
from .runtime.lanes import EventPoster
from .settings import Settings
from .telemetry.decision_log import decisions, log_decisions
from .telemetry.metrics import Metrics
from .views.cache import ClaimView
from .views.pods import DeploymentView, GPUNode, PodView, deployment_view
from .views.workloads import ServiceView

logger = logging.getLogger(__name__)

MESSAGE_CUT_BYTES = 2000
"""A termination message this long was probably cut by the kubelet (2048-byte/80-line tail)."""
CONFLICT_RETRY_SECONDS = 0.2
SERVICE_RETRY_SECONDS = 5.0
"""A Service the lane could not take (full backlog) is rendered again this much later."""
ERROR_RETRY_SECONDS = 5.0


@dataclass
class Runtime:
    """What reconciles share (kept on kopf's ``memo``): settings, API wrapper, the cache's claim calls
    (``claims``; None: servers are rendered without a cache), metrics, a bound on
    concurrent Service creations (so they cannot hold every worker while Deployments wait), and an
    optional poster of Normal Events off the reconcile path (``events.EventPoster``; None: inline; Warnings
    are always posted inline, right after the status write that records them).

    ``defer_status_after_create``: a fresh plan's pass only creates the Deployment and requeues; the
    status and Events follow on the next pass (behind other servers' first passes), so a burst of new
    servers gets its engines started first. Safe because a fresh plan re-derives identically.

    ``services``: the lane that writes Services off the reconcile path (``service_lane``; None: inline).

    ``resolutions``: the shared model resolutions (``kube/resolution.py``; None: models in no catalog are not
    resolved and plan from the spec alone).

    ``stopping``: set when the operator stops; a reconcile in a worker thread writes nothing more (each
    write is re-derived by the next pass, in this process or the next, so stopping between two is safe).
    """

    settings: Settings
    kube: Kube
    metrics: Metrics
    events: EventPoster | None = None
    defer_status_after_create: bool = False
    rejections: RejectionBook = field(default_factory=RejectionBook)
    calibration: CalibrationStore | None = None
    claims: ClaimsApi | None = None
    keda: KedaMemo = field(default_factory=KedaMemo)
    groups: GroupsMemo = field(default_factory=GroupsMemo)
    pools: PoolMemo = field(default_factory=PoolMemo)
    stopping: threading.Event = field(default_factory=threading.Event)
    services: ServiceLane | None = None
    resolutions: Resolutions | None = None


@dataclass(frozen=True)
class Result:
    """What the caller keeps from one reconcile.

    Attributes:
        requeue_after: seconds until another look is needed (None: only on changes).
        applied: the Deployment this pass applied when it deferred the rest (see ``defer_status_after_create``).
        waiting_for_nodes: the server waits for an eligible node (re-check on node changes).
        stored: the InferenceServer as stored after our status write (None: not written).
        conflict: the caller's view may be stale (conflict or error): read from the API next time.
    """

    requeue_after: float | None
    applied: DeploymentView | None = None
    waiting_for_nodes: bool = False
    stored: dict[str, Any] | None = None
    conflict: bool = False


class Stopping(Exception):
    """The operator is stopping: this reconcile writes nothing more."""


def _not_stopping(rt: Runtime) -> None:
    if rt.stopping.is_set():
        raise Stopping


def diagnose(rt: Runtime, namespace: str, pod: PodView, engine: EngineKind | None) -> Failure:
    """Classify a failed pod: termination reason/exit code/message, + log tail when cut, + pod Events.

    A pod whose ``model-download`` init container failed is classified from that container
    (``recovery.download.as_download_failure``); a pod's own ``status.reason``/``message`` (eviction)
    counts as an Event.
    """
    download = pod.download
    if download is not None and download.state == "failed":
        tail = ""
        if (not download.message or len(download.message.encode()) >= MESSAGE_CUT_BYTES) and rt.settings.log_tail_lines:
            tail = rt.kube.log_tail(namespace, pod.name, DOWNLOAD_CONTAINER, previous=True,
                                    lines=rt.settings.log_tail_lines)
        found = classify(Observation(reason=download.reason, exit_code=download.exit_code, message=download.message,
                                     log_tail=tail, events=tuple(rt.kube.pod_events(namespace, pod.name))), engine)
        return as_download_failure(found, f"{tail}\n{download.message}")
    term = pod.termination
    message = term.message if term else ""
    log_tail = ""
    if (not message or len(message.encode()) >= MESSAGE_CUT_BYTES) and rt.settings.log_tail_lines:
        log_tail = rt.kube.log_tail(namespace, pod.name, CONTAINER_NAME, previous=pod.restart_count > 0,
                                    lines=rt.settings.log_tail_lines)
    events = tuple(rt.kube.pod_events(namespace, pod.name))
    if pod.reason:
        events = (*events, f"{pod.reason}: {pod.message}")
    observation = Observation(reason=term.reason if term else None, exit_code=term.exit_code if term else None,
                              message=clean_text(message), log_tail=clean_text(log_tail), events=clean_lines(events),
                              node=pod.node)
    return classify(observation, engine)


class _Deferred:
    """Marker: the pass applied a fresh plan's Deployment and left the rest to the next pass."""


DEFERRED = _Deferred()


def _apply_scaling(rt: Runtime, body: dict[str, Any], out: Outcome, snap: Snapshot, *, pausing: bool) -> None:
    """The ScaledObject's writes of this pass that belong before the workload's (``pausing``: a pause must
    stop KEDA before replicas drop to 0) or after it (KEDA checks its scale target at once)."""
    meta = body["metadata"]
    live = snap.scaling.live if snap.scaling is not None else None
    obj = out.scaled_object
    try:
        if pausing and out.scaled_object_pause:
            with refused(Write.SCALED_OBJECT_PAUSE, meta["name"], None):
                pause_scaled_object(rt.kube, meta["namespace"], meta["name"], snap.uid, live)
        if obj is not None and paused_rendering(obj) is pausing:
            with refused(Write.SCALED_OBJECT, meta["name"], obj):
                apply_scaled_object(rt.kube, obj, live)
        if not pausing and out.scaled_object_delete:
            with refused(Write.SCALED_OBJECT_DELETE, meta["name"], None):
                delete_scaled_object(rt.kube, meta["namespace"], meta["name"], snap.uid)
    except KedaNotInstalled:  # removed since it was read: the next pass says so in status
        rt.keda.found_absent(time.monotonic())


def _apply_claim(rt: Runtime, out: Outcome) -> None:
    if rt.claims is not None and out.claim is not None:
        with refused(claim_write(out), str(out.claim["metadata"]["name"]), out.claim):
            rt.claims.apply_claim(out.claim, exists=out.claim_exists)


DRIFT_EVENT_SECONDS = 30.0
"""The same drift revert (same fields, same values) gets one Event per this many seconds."""


def _check_mounted_claim(rt: Runtime, out: Outcome, snap: Snapshot, *, created: bool) -> None:
    """Before a workload is written: the operator's claim it mounts is the server's - created in this pass, seen
    as the server's in the snapshot, or read now (a claim of that name that is not the server's raises
    ``guarded.Foreign``: no pod template ever names it, whatever the replica count). An absent claim is fine (the
    pass that creates it checks it first)."""
    model = out.status.model
    if rt.claims is None or model is None or model.cache is not CacheMode.VOLUME_CLAIM_TEMPLATE or not model.claim_name:
        return
    name = model.claim_name
    if created and out.claim is not None and out.claim["metadata"]["name"] == name:
        return
    seen = snap.claim if snap.claim is not None and snap.claim.name == name else None
    if seen is not None and (seen.holder is None or seen.holder.owns(snap.uid, Write.CLAIM)):
        return
    live = rt.claims.get_claim(snap.namespace, name)
    if live is not None and live.holder is not None and not live.holder.owns(snap.uid, Write.CLAIM):
        with refused(Write.CLAIM, name, out.claim):
            raise Foreign(Write.CLAIM, name, live.holder)


def _apply_objects(rt: Runtime, body: dict[str, Any], out: Outcome, snap: Snapshot) -> None:
    _not_stopping(rt)
    meta = body["metadata"]
    _apply_scaling(rt, body, out, snap, pausing=True)
    # A claim not yet known to be the server's is created (or found to be another's: Foreign) before the
    # workload that mounts it, so no pod ever mounts a claim of that name that is not the server's. A claim
    # that is the server's is grown after the workload (the engine starts first; the scheduler waits).
    claim_first = out.claim is not None and not out.claim_exists
    if claim_first:
        _apply_claim(rt, out)
    if out.deployment is not None:
        _check_mounted_claim(rt, out, snap, created=claim_first)
        with refused(Write(str(out.deployment["kind"])), meta["name"], out.deployment):
            if out.deployment["kind"] == LWS_KIND:
                try:
                    apply_group(rt.kube, out.deployment, exists=snap.deployment is not None)
                except GroupsNotInstalled:  # removed since it was read: the next pass says so in status
                    rt.groups.found_absent(time.monotonic())
                    out.requeue(0.1)
            else:
                rt.kube.apply(out.deployment, exists=snap.deployment is not None)
    if out.scale_to_zero:
        with refused(Write.GROUP_SCALE if _multi_node(body) else Write.DEPLOYMENT_SCALE, meta["name"], None):
            if _multi_node(body):
                scale_group_to_zero(rt.kube, meta["namespace"], meta["name"], snap.uid)
            else:
                rt.kube.scale_to_zero(meta["namespace"], meta["name"], snap.uid)
    if not claim_first:
        _apply_claim(rt, out)
    # a replaced claim is deleted once the workload no longer mounts it
    if rt.claims is not None and out.claim_delete is not None:
        with refused(Write.CLAIM_DELETE, out.claim_delete, {"delete": out.claim_delete}):
            rt.claims.delete_claim(meta["namespace"], out.claim_delete, snap.uid)
    _apply_scaling(rt, body, out, snap, pausing=False)
    _apply_routing(rt, body, out, snap)


def _apply_routing(rt: Runtime, body: dict[str, Any], out: Outcome, snap: Snapshot) -> None:
    """The InferencePool (after the workload: its pods exist to be selected), a pool this server stopped
    creating, and the context labels of its live pods (``kube/pools.py``; every write tests ownership)."""
    meta = body["metadata"]
    namespace, name = meta["namespace"], meta["name"]
    try:
        if out.pool is not None:
            pool = str(out.pool["metadata"]["name"])
            live = snap.routing.pools.get(pool) if snap.routing is not None else None
            with refused(Write.POOL, pool, out.pool):
                apply_pool(rt.kube, out.pool, live)
        if out.pool_delete is not None:
            delete_pool(rt.kube, namespace, out.pool_delete[0], snap.uid)
    except PoolAPIMissing:  # removed since it was read: the next pass says so in status
        rt.pools.found_absent(time.monotonic())
    workload = snap.deployment.holder if snap.deployment is not None else None
    kind = LWS_KIND if _multi_node(body) else "Deployment"
    if out.pod_labels and workload is not None and workload.owns(snap.uid, kind):  # the pods' workload is the server's
        for pod, (owner, labels) in sorted(out.pod_labels.items()):
            patch_pod_labels(rt.kube, namespace, pod, name, owner, labels, workload.uid)


def _multi_node(body: dict[str, Any]) -> bool:
    """The stored spec asks for a multi-node group (its workload is a LeaderWorkerSet)."""
    nodes = (body.get("spec") or {}).get("nodes")
    return isinstance(nodes, int) and nodes > 1


def _apply_service(rt: Runtime, out: Outcome, snap: Snapshot) -> None:
    """Write the Service inline, or hand it to ``rt.services`` (``service_lane``): then the error of the last
    write of the same rendering was raised by ``_write`` before anything else, as the inline write would have
    raised it, and ``out.service`` is cleared (not applied yet: the lane tells the refusal book when it is)."""
    if out.service is None:
        return
    _not_stopping(rt)
    exists = snap.service_port is not None
    via = _service_via(snap.deployment, {"spec": snap.spec})
    if rt.services is None:
        with refused(Write.SERVICE, out.service["metadata"]["name"], out.service):
            if via:
                rt.kube.apply(out.service, exists=exists, via=via)
            else:
                rt.kube.apply(out.service, exists=exists)
        return
    key = (snap.namespace, snap.name)
    wait = rt.services.submit(key, out.service, exists=exists, via=via)
    if wait is None:
        out.requeue(SERVICE_RETRY_SECONDS)  # stopping, or a full backlog: try again later
    elif wait > 0:
        out.requeue(wait)  # this rendering was just written: the Service watch has not shown it yet
    out.service = None



Written = tuple[dict[str, Any] | _Deferred | None, rejections.Rejected | None]
"""What ``_write`` did: the InferenceServer as stored after the status write (None: not written; ``DEFERRED``), and
the refusal that stopped the children's writes (None: all applied)."""


def _write(rt: Runtime, body: dict[str, Any], out: Outcome, snap: Snapshot, *, force_status: bool = False) -> Written:
    """Apply ``out``: the children, and status at most once (when it changed, or ``force_status``: the stored one
    was discarded). A refused child write stops the writes after it; it is returned, not raised: the book takes
    it and the next pass says it in status (``converge.refusals.hold``).

    A step (a new attempt after a failure) is recorded in status *before* the Deployment changes. Only a
    fresh plan (no attempt in status yet) applies the Deployment first: it re-derives identically from
    the spec, so a crash or conflict in between is harmless, and the engine starts one round-trip sooner.
    """
    key = (snap.namespace, snap.name)
    if out.service is not None and rt.services is not None:  # the lane's refusal of this very rendering, before
        failure = rt.services.take_failure(key, out.service)  # a status that says Ready
        if isinstance(failure, rejections.Rejected):
            return None, failure
        if failure is not None:
            raise failure
    fresh_plan = not snap.status.attempts
    if fresh_plan:
        try:
            _apply_objects(rt, body, out, snap)
        except rejections.Rejected as exc:
            return None, exc
        if out.deployment is not None and rt.defer_status_after_create:
            return DEFERRED, None
    stored: dict[str, Any] | None = None
    if out.samples and rt.calibration is not None:  # before the status that records them: idempotent by id
        rt.calibration.record(out.samples)
    new_wire = out.status.to_wire()
    if force_status or new_wire != snap.status.to_wire():
        _not_stopping(rt)
        stored = rt.kube.replace_status(body, new_wire)
    _post_events(rt, stored or body, out, snap)
    try:
        if not fresh_plan:
            _apply_objects(rt, body, out, snap)
        _apply_service(rt, out, snap)
    except rejections.Rejected as exc:
        return stored, exc
    return stored, None


def _post_events(rt: Runtime, body: dict[str, Any], out: Outcome, snap: Snapshot) -> None:
    """Post ``out``'s Events (after the status that records them); the refusals announced are marked posted."""
    key = (snap.namespace, snap.name)
    for note in out.events:
        if note.reason is Reason.DRIFT_REVERTED and not rt.rejections.should_post(
                key, f"drift: {note.message}", time.monotonic(), DRIFT_EVENT_SECONDS):
            continue  # the same revert again before the watch showed the first one: one Event
        if rt.events is not None and note.type == "Normal":  # Warnings (failures) are posted inline
            rt.events.post(body, note.type, note.reason.value, note.message)
        else:
            rt.kube.post_event(body, note.type, note.reason.value, note.message)
    rt.rejections.announced(key, tuple(r for r in snap.refusals if r.announce))


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


def _service_via(workload: DeploymentView | None, body: dict[str, Any]) -> tuple[str, ...]:
    """The uid of a multi-node server's own LeaderWorkerSet: the headless Service its controller creates under the
    server's name (subdomain policy ``Shared``, sigs.k8s.io/lws ``reconcileHeadlessServices``) is the server's
    Service (ctxfit points it at the leaders). () otherwise."""
    holder = workload.holder if workload is not None else None
    return (holder.uid,) if _multi_node(body) and holder is not None and holder.uid else ()


def _group_view(rt: Runtime, body: dict[str, Any], namespace: str, name: str,
                deployment: DeploymentView | None) -> tuple[DeploymentView | None, bool]:
    """For a multi-node server: its LeaderWorkerSet (read when the Deployment index has nothing, or when the view
    is this process's own write: the group's uid decides whose its headless Service is), and whether the API
    server serves LeaderWorkerSets at all (``GroupsMemo``: asked at most once a minute while it does not)."""
    if not _multi_node(body):
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


class _Unknown:
    """Marker: the caller has no view of this object; read it from the API."""


UNKNOWN = _Unknown()


@dataclass(frozen=True)
class Pass:
    """What one pass did: what the caller keeps, the child write the API server refused (None: none), and whether
    every write refused before is now applied while status still says refused (``settle``: the next pass says
    ``ObjectsAccepted``)."""

    result: Result
    refused: rejections.Rejected | None = None
    settle: bool = False


def _book(rt: Runtime, key: tuple[str, str], refused: rejections.Rejected | None) -> tuple[float, float | None]:
    """Book a refusal (``RejectionBook.failed``) and count it; returns the monotonic time it was booked at and its
    backoff (None: nothing refused)."""
    now = time.monotonic()
    if refused is None:
        return now, None
    rt.metrics.reconcile_errors.labels(f"rejected_{refused.code}").inc()
    return now, rt.rejections.failed(key, refused, now)


def _request_resolutions(rt: Runtime, key: tuple[str, str], out: Outcome, body: dict[str, Any]) -> None:
    """Start the resolver reads the pass asked for (the model, its draft, its adapters: ``kube/resolution.py``)."""
    if rt.resolutions is None:
        return
    requests = [r for r in (out.resolution_request, out.draft_resolution_request) if r is not None]
    requests += list(out.adapter_resolution_requests)
    for request in requests:
        _not_stopping(rt)
        rt.resolutions.request(key, request, body)


def _pass(rt: Runtime, namespace: str, name: str, nodes: tuple[GPUNode, ...], pods: tuple[PodView, ...],
          body: dict[str, Any], deployment: DeploymentView | _Unknown | None,
          service_port: ServiceView | int | _Unknown | None, claim_seen: ClaimSeen | None,
          members_of: MembersOf | None, clock: float | None = None) -> Pass:
    """One pass: read the snapshot (the refusal book at ``clock``, else now), ``converge`` (pure), apply the
    children, write status at most once."""
    uid = str(body["metadata"].get("uid") or "")
    if isinstance(deployment, _Unknown):
        deployment = deployment_view(rt.kube.get_deployment(namespace, name))
    deployment, groups_served = _group_view(rt, body, namespace, name, deployment)
    deployment = _ours(deployment, uid)
    if isinstance(service_port, _Unknown):
        service_port = rt.kube.service_port(namespace, name)
    if isinstance(service_port, ServiceView):
        service_port = service_port.port_for(uid, _service_via(deployment, body), leaders_only=_multi_node(body))
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
    engine_text = str((snap.spec.get("engine") or {}).get("kind", ""))
    # None (an invalid spec, which converge refuses before any diagnosis): classify knows every engine's text
    engine = EngineKind(engine_text) if engine_text in EngineKind.__members__.values() else None
    read_startup = None
    if rt.settings.startup_log_bytes:
        def read_startup(pod: PodView) -> str:
            return rt.kube.log_head(namespace, pod.name, CONTAINER_NAME, limit_bytes=rt.settings.startup_log_bytes)
    out = converge(snap, rt.settings, lambda pod, _restarts: diagnose(rt, namespace, pod, engine), read_startup)
    if problem is not None:
        out.events.insert(0, EventNote("Warning", Reason.INVALID_STATUS,
                                       f"stored status discarded ({problem}); planning again from the spec"))
    stored, refusal = _write(rt, body, out, snap, force_status=problem is not None)
    if refusal is not None:
        return Pass(Result(0.0, stored=stored if isinstance(stored, dict) else None), refusal)
    _request_resolutions(rt, (namespace, name), out, body)
    if isinstance(stored, _Deferred):
        assert out.deployment is not None
        return Pass(Result(0.0, applied=deployment_view(out.deployment)))
    rt.rejections.applied((namespace, name), out)
    log_decisions(body, decisions(old, out))
    target = out.spec.context.target if out.spec else None
    rt.metrics.observe_status(namespace, name, engine_text, out.status, target)
    rt.metrics.observe_attempts(namespace, name, engine_text, out.finished, out.step_down_reasons)
    return Pass(Result(out.requeue_after, waiting_for_nodes=out.waiting_for_nodes, stored=stored),
                settle=is_rejected(out.status) and rt.rejections.accepted_all((namespace, name)))


def reconcile(rt: Runtime, namespace: str, name: str,
              nodes: tuple[GPUNode, ...], pods: tuple[PodView, ...], *,
              body: dict[str, Any] | None = None, deployment: DeploymentView | _Unknown | None = UNKNOWN,
              service_port: ServiceView | int | _Unknown | None = UNKNOWN,
              claim_seen: ClaimSeen | None = None, members_of: MembersOf | None = None) -> Result:
    """Reconcile ``namespace/name`` once; never raises (see the module docstring).

    ``body``, ``deployment``, ``service_port``, ``claim_seen``, ``members_of``: what the caller's watches already
    show (kopf indexes; ``members_of(pool)``: the namespace's servers that name ``pool``); omitted ones are read
    from the API (no members: a pool's other servers are not known). A stale ``body`` only costs a conflict and a
    retry with a fresh read. An object of a child's name that is not the server's (``ownership``) counts as
    absent: converge renders it, and the write ends in ``guarded.Foreign`` (a condition and an Event) instead of
    touching it. A refused child write is booked (``RejectionBook.failed``) and a second pass, at once, says it
    in status; each pass writes status at most once.
    """
    started = time.monotonic()
    try:
        _not_stopping(rt)
        if body is None:
            body = rt.kube.get_server(namespace, name)
        if body is None or body["metadata"].get("deletionTimestamp"):
            rt.metrics.forget(namespace, name)
            return Result(None)
        first = _pass(rt, namespace, name, nodes, pods, body, deployment, service_port, claim_seen, members_of)
        clock, backoff = _book(rt, (namespace, name), first.refused)
        if first.refused is None and not first.settle:
            return first.result
        # a write was refused (booked), or every refused write is now applied: the next pass says so in status
        again = _pass(rt, namespace, name, nodes, pods, first.result.stored or body, deployment, service_port,
                      claim_seen, members_of, clock)
        _book(rt, (namespace, name), again.refused)  # said by the next reconcile
        result = replace(again.result, stored=again.result.stored or first.result.stored)
        return result if backoff is None else replace(result, requeue_after=backoff)  # look again when it is due
    except Stopping:
        return Result(None)
    except Conflict:
        return Result(CONFLICT_RETRY_SECONDS, conflict=True)
    except ApiException as exc:
        rt.metrics.reconcile_errors.labels(f"api_{exc.status}").inc()
        logger.warning("reconcile %s/%s: API error %s %s: %s", namespace, name, exc.status, exc.reason,
                       rejections.api_message(exc, 500))
        return Result(ERROR_RETRY_SECONDS, conflict=True)
    except Exception as exc:  # an operator must not crash-loop on one bad object
        rt.metrics.reconcile_errors.labels(type(exc).__name__).inc()
        if rt.rejections.first_error((namespace, name), f"{type(exc).__name__}: {exc}"):
            logger.exception("reconcile %s/%s failed", namespace, name)
        else:  # the same error again: one line, not a traceback every pass
            logger.warning("reconcile %s/%s failed again: %s: %s", namespace, name, type(exc).__name__, exc)
        return Result(ERROR_RETRY_SECONDS * 2, conflict=True)
    finally:
        rt.metrics.reconcile_duration.observe(time.monotonic() - started)
