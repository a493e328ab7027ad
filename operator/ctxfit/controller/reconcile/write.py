"""The write half of a pass: apply ``converge``'s children in their order, write status at most once, post Events.

The order of the writes and why: docs/design/architecture.md.
"""

from __future__ import annotations

import time
from typing import Any

from ctxfit.api.model_cache import CacheMode
from ctxfit.api.status import Reason
from ctxfit.render.leaderworkerset import LWS_KIND

from .. import rejections
from ..converge import Outcome, Snapshot
from ..converge.autoscaling import paused_rendering
from ..converge.refusals import Write, claim_write
from ..kube.groups import GroupsNotInstalled, apply_group, scale_group_to_zero
from ..kube.guarded import Foreign
from ..kube.keda import KedaNotInstalled, apply_scaled_object, delete_scaled_object, pause_scaled_object
from ..kube.pools import PoolAPIMissing, apply_pool, delete_pool, patch_pod_labels
from ..rejections import refused
from .context import Runtime, multi_node, not_stopping
from .read import service_via

SERVICE_RETRY_SECONDS = 5.0
"""A Service the lane could not take (full backlog) is rendered again this much later."""
DRIFT_EVENT_SECONDS = 30.0
"""The same drift revert (same fields, same values) gets one Event per this many seconds."""


class Deferred:
    """Marker: the pass applied a fresh plan's Deployment and left the rest to the next pass."""


DEFERRED = Deferred()


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
    not_stopping(rt)
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
        with refused(Write.GROUP_SCALE if multi_node(body) else Write.DEPLOYMENT_SCALE, meta["name"], None):
            if multi_node(body):
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
    kind = LWS_KIND if multi_node(body) else "Deployment"
    if out.pod_labels and workload is not None and workload.owns(snap.uid, kind):  # the pods' workload is the server's
        for pod, (owner, labels) in sorted(out.pod_labels.items()):
            patch_pod_labels(rt.kube, namespace, pod, name, owner, labels, workload.uid)



def _apply_service(rt: Runtime, out: Outcome, snap: Snapshot) -> None:
    """Write the Service inline, or hand it to ``rt.services`` (``service_lane``): then the error of the last
    write of the same rendering was raised by ``write`` before anything else, as the inline write would have
    raised it, and ``out.service`` is cleared (not applied yet: the lane tells the refusal book when it is)."""
    if out.service is None:
        return
    not_stopping(rt)
    exists = snap.service_port is not None
    via = service_via(snap.deployment, {"spec": snap.spec})
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



Written = tuple[dict[str, Any] | Deferred | None, rejections.Rejected | None]
"""What ``write`` did: the InferenceServer as stored after the status write (None: not written; ``DEFERRED``), and
the refusal that stopped the children's writes (None: all applied)."""


def write(rt: Runtime, body: dict[str, Any], out: Outcome, snap: Snapshot, *, force_status: bool = False) -> Written:
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
        not_stopping(rt)
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

