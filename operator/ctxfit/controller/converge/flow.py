"""Reconciliation as a pure function: a snapshot of one InferenceServer's world -> the next status, the
objects to apply, the Events to post and when to look again.

No kopf, no API client: ``controller/reconcile.py`` builds the ``Snapshot`` (reads) and applies the
``Outcome`` (writes); ``diagnose`` is injected because reading a failed pod's logs and Events is I/O.

Invariants (what makes restarts safe): status is the source of truth. A step is *recorded* in status
(attempt N failed, attempt N+1 with its configuration and ``notBefore``) before the Deployment is
changed, and the Deployment is always re-derived from the newest attempt; a pod is acted on only if
its ``ctxfit.io/attempt`` is the newest attempt and that attempt is still Running/Succeeded. So
running twice, or after a restart between the two writes, never applies a step twice.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

from pydantic import ValidationError

from ctxfit.api import InferenceServerSpec, MiB
from ctxfit.api.status import (
    AttemptOutcome,
    EffectiveStatus,
    InferenceServerStatus,
    Phase,
    Reason,
    now_rfc3339,
    parse_rfc3339,
)
from ctxfit.budget.calibrate import CalibrationTable
from ctxfit.budget.planner import Plan, plan
from ctxfit.recovery import Decision
from ctxfit.render import RenderInput, endpoint_url
from ctxfit.render.cache import CacheVolume
from ctxfit.render.deployment import CONTAINER_NAME, render_pod_template
from ctxfit.render.leaderworkerset import render_service_for, render_workload
from ctxfit.vocab.inputs import PlanInputError
from ctxfit.vocab.kinds import Failure

from ..settings import Settings
from ..views.nodes import failed_driver_nodes, required_cuda
from ..views.pod_facts import engine_digest
from ..views.pods import GPUNode, PodView, describe_nodes, eligible_nodes
from ..views.workloads import describe_drift, drifted
from . import attempts, policy, status
from .autoscaling import converge_autoscaling, leave_replicas, pause_live, wanted_replicas
from .cache import observe_download, resolve
from .group_restarts import follow_group
from .groups import best_group_node, group_shortage, most_telling_failure, pods_for_ready
from .status import mark_failed_spec, mark_no_node, mark_phase, plan_status
from .types import Diagnose, EventNote, Outcome, ReadStartup, Snapshot
from .verify import observe_startup
from .waiting import attempt_pods, follow_pods

SERVICE_DELAY_SECONDS = 1.0
"""A new server's Service is created on the pass after its Deployment (the engine starts first)."""

HISTORY_NEUTRAL_FIELDS = ("replicas", "attempts", "pod", "autoscaling")
"""Spec fields whose change keeps the plan and the attempt history (they do not change what fits; adding or
removing ``autoscaling`` restarts no engine)."""


def spec_key(spec: InferenceServerSpec) -> str:
    """Digest of the spec fields the plan and attempt history depend on (all but ``HISTORY_NEUTRAL_FIELDS``)."""
    wire = spec.to_wire()
    for name in HISTORY_NEUTRAL_FIELDS:
        wire.pop(name, None)
    return hashlib.sha256(json.dumps(wire, sort_keys=True).encode()).hexdigest()[:16]


def _plan_for(spec: InferenceServerSpec, node: GPUNode | None, settings: Settings,
              pin: dict[str, Any] | None = None, calibration: CalibrationTable | None = None) -> Plan:
    return plan(
        spec,
        node_product=node.product if node else None,
        node_gpu_memory_mib=node.gpu_memory_mib if node else None,
        node_compute_capability=node.compute if node else None,
        default_headroom=settings.default_headroom,
        pin=pin,
        suggest=pin is None,
        calibration=calibration,
    )


def _first_plan(snap: Snapshot, spec: InferenceServerSpec, out: Outcome, settings: Settings, now: str) -> bool:
    """Choose a node and plan. Returns True when attempt 1 was created (False: waiting or failed)."""
    st = out.status
    operator_image = settings.image_for(spec.engine.kind.value)
    nodes = eligible_nodes(spec, snap.nodes, operator_image)
    shortage = group_shortage(spec, nodes)
    if not nodes or shortage:
        mark_no_node(out, shortage or describe_nodes(spec, snap.nodes, operator_image), now, snap.generation)
        out.waiting_for_nodes = True
        out.requeue(settings.node_recheck_seconds)
        return False
    node = best_group_node(spec, nodes)
    try:
        result = _plan_for(spec, node, settings, calibration=snap.calibration)
    except (PlanInputError, ValueError) as exc:
        mark_failed_spec(out, str(exc), now, snap.generation)
        return False
    st.node_product = spec.gpu.product or node.product
    st.plan = plan_status(result, spec, node, settings.default_headroom)
    if not result.fits:
        status.mark_does_not_fit(out, result, now, snap.generation)
        return False
    status.mark_fits(out, result, spec, st.plan.headroom, now, snap.generation)
    attempts.start(out, EffectiveStatus.of(result.effective), now)
    out.events.append(EventNote(
        "Normal", Reason.PLANNED,
        f"planned context {result.context_length} on {st.node_product} (predicted max "
        f"{result.max_context_length}, {result.kv_bytes_per_token} B/token/GPU): {'; '.join(result.reasons)}"))
    mark_phase(out, Phase.STARTING, Reason.ENGINE_STARTING, "starting attempt 1", now, snap.generation)
    return True


def _node_of(snap: Snapshot, pod: PodView | None, product: str | None) -> GPUNode | None:
    by_name = {n.name: n for n in snap.nodes}
    if pod is not None and pod.node in by_name:
        return by_name[pod.node]
    return next((n for n in snap.nodes if n.product == product), None)


def _observe_attempt(snap: Snapshot, spec: InferenceServerSpec, out: Outcome, settings: Settings,
                     diagnose: Diagnose, now: str, read_startup: ReadStartup | None = None,
                     cache: CacheVolume | None = None) -> None:
    """Fold the current attempt's pods into status: Ready, or a failure -> policy -> next attempt."""
    st = out.status
    cur = st.current_attempt
    if cur is None or cur.outcome not in (AttemptOutcome.RUNNING, AttemptOutcome.SUCCEEDED):
        return
    node_names = {n.name for n in snap.nodes}
    candidates = [p for p in snap.pods if p.attempt == cur.number]  # render the template only when needed
    digest = _desired_digest(snap, spec, out, settings, cache) if candidates else None
    pods, gone = attempt_pods(candidates, snap.name, cur.number, digest, node_names)
    failing = [p for p in pods if p.failed]
    failed = failing[0] if failing else None
    if failed is None and cur.outcome is AttemptOutcome.RUNNING:
        for pod in pods:
            if pod.ready:
                continue
            left = attempts.startup_overdue(pod, cur, settings, snap.now)
            if left is not None and left <= 0:
                failed = pod
                break
            if left is not None:
                out.requeue(left)
    if failed is not None:
        failed, failure = most_telling_failure(failing, diagnose) if len(failing) > 1 else \
            (failed, diagnose(failed, failed.restart_count))
        node = _node_of(snap, failed, st.node_product)
        attempts.fail(out, spec, cur, failed, failure, node, settings, snap.now, snap.generation,
                      lambda s, pin: _replan(s, pin, node, settings))
        return
    groups = snap.deployment.replicas if snap.deployment is not None else None
    if follow_group(out, spec, cur, pods, settings.group_restart_budget, now, snap.generation, groups):
        return  # a group recreated past its budget: Failed
    ready = [p for p in pods if p.ready]
    if cur.outcome is AttemptOutcome.RUNNING and ready and len(ready) >= pods_for_ready(spec):
        attempts.succeed(out, cur, ready[0].name, now)
    if cur.outcome is AttemptOutcome.SUCCEEDED and ready:
        mark_phase(out, Phase.READY, Reason.ENGINE_READY,
                   f"serving with context {cur.effective.context_length}", now, snap.generation)
        if read_startup is not None:
            node = _node_of(snap, ready[0], st.node_product)
            observe_startup(out, spec, ready[0], read_startup, uid=snap.uid, server=f"{snap.namespace}/{snap.name}",
                            node=node, settings=settings, now=snap.now, generation=snap.generation,
                            replan=lambda s, pin: _replan(s, pin, node, settings))
    elif cur.not_before is None or parse_rfc3339(cur.not_before) <= snap.now:
        follow_pods(out, cur, pods, gone, snap.deployment, node_names, now, snap.generation)


def _render_input(snap: Snapshot, spec: InferenceServerSpec, out: Outcome, settings: Settings,
                  cache: CacheVolume | None = None) -> RenderInput:
    st = out.status
    cur = st.current_attempt
    assert cur is not None
    image = settings.image_for(spec.engine.kind.value)
    return RenderInput(
        name=snap.name, namespace=snap.namespace, uid=snap.uid, spec=spec, effective=cur.effective.to_config(),
        attempt=cur.number, gpu_product=st.node_product, image=image,
        replicas=wanted_replicas(spec, snap.deployment, st.phase is Phase.FAILED, snap.scaling).count,
        avoid_nodes=tuple(failed_driver_nodes(st.attempts)), min_cuda=required_cuda(spec, image), cache=cache,
    )


def _desired_digest(snap: Snapshot, spec: InferenceServerSpec, out: Outcome, settings: Settings,
                    cache: CacheVolume | None = None) -> str:
    """``pods.engine_digest`` of the current attempt's engine container (pods of another template are ignored)."""
    template = render_pod_template(_render_input(snap, spec, out, settings, cache))
    return engine_digest(template["spec"]["containers"][0])


def _record(snap: Snapshot, spec: InferenceServerSpec, out: Outcome, settings: Settings, pod: PodView,
            failure: Failure, decision: Decision | None) -> None:
    """A failed download ends the newest attempt through the policy (``attempts.fail``)."""
    cur = out.status.current_attempt
    assert cur is not None
    node = _node_of(snap, pod, out.status.node_product)
    attempts.fail(out, spec, cur, pod, failure, node, settings, snap.now, snap.generation,
                  lambda s, pin: _replan(s, pin, node, settings), decision=decision)


def _replan(spec: InferenceServerSpec, pin: dict[str, Any], node: GPUNode | None,
            settings: Settings) -> tuple[int, str]:
    result = _plan_for(spec, node, settings, pin=pin)
    return result.context_length, (result.reasons[-1] if result.reasons else "")


def _desired(snap: Snapshot, spec: InferenceServerSpec, out: Outcome, settings: Settings,
             cache: CacheVolume | None = None) -> None:
    """Render the Deployment/Service for the newest attempt (or scale to 0 after a permanent failure)."""
    st = out.status
    cur = st.current_attempt
    if cur is None:
        if snap.deployment is not None and snap.deployment.replicas != 0 and st.phase is Phase.FAILED:
            out.scale_to_zero = True
        return
    st.effective = cur.effective
    st.context_length = cur.effective.context_length
    inp = _render_input(snap, spec, out, settings, cache)
    if cur.not_before is not None and st.phase is not Phase.FAILED:
        wait = (parse_rfc3339(cur.not_before) - snap.now).total_seconds()
        if wait > 0:
            out.requeue(wait)
            return
    deployment = render_workload(inp)
    want_hash = deployment["metadata"]["annotations"]["ctxfit.io/pod-template-hash"]
    have = snap.deployment
    write_replicas = wanted_replicas(spec, have, st.phase is Phase.FAILED, snap.scaling).write
    if have is None or have.template_hash != want_hash or (write_replicas and
                                                          have.replicas != deployment["spec"]["replicas"]):
        if not (have is None and st.phase is Phase.FAILED):
            out.deployment = deployment
    elif have.live is not None and (changed := drifted(deployment, have.live, CONTAINER_NAME)):
        out.deployment = deployment
        out.events.append(EventNote("Warning", Reason.DRIFT_REVERTED, f"reverted a change to {deployment['kind']} "
                                    f"{snap.name}: {describe_drift(changed, deployment, have.live, CONTAINER_NAME)}"))
    if out.deployment is not None and not write_replicas:
        leave_replicas(out.deployment)
    if snap.service_port != spec.serving.port and st.phase is not Phase.FAILED:
        if have is None:  # Service after the Deployment: a ClusterIP allocation is the slowest write
            out.requeue(SERVICE_DELAY_SECONDS)
        else:
            out.service = render_service_for(inp)
    st.endpoint = endpoint_url(snap.name, snap.namespace, spec.serving.port)


def converge(snap: Snapshot, settings: Settings, diagnose: Diagnose,
             read_startup: ReadStartup | None = None) -> Outcome:
    """One reconciliation step for one InferenceServer (pure; see the module docstring).

    ``read_startup``: reads a Ready pod's start-up log (``controller/converge/verify.py``); None skips verification.
    """
    out = Outcome(status=snap.status.model_copy(deep=True))
    st = out.status
    now = now_rfc3339(snap.now)
    out.requeue(settings.resync_seconds)
    try:
        spec = InferenceServerSpec.model_validate(snap.spec)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first["loc"])
        mark_failed_spec(out, f"spec.{where}: {first['msg']}" if where else str(first["msg"]), now, snap.generation)
        st.observed_generation = snap.generation
        if snap.deployment is not None and snap.deployment.replicas != 0:
            out.scale_to_zero = True
        pause_live(out, snap.scaling, snap.name, now, snap.generation)
        return out
    out.spec = spec
    refused = policy.refusal(spec, settings)
    if refused is not None:
        status.mark_refused(out, refused, now, snap.generation)
        st.observed_generation = snap.generation
        out.scale_to_zero = snap.deployment is not None and snap.deployment.replicas != 0
        pause_live(out, snap.scaling, snap.name, now, snap.generation)
        return out
    status.mark_admitted(out, now, snap.generation)
    key = spec_key(spec)
    if st.spec_key != key:
        attempts.start_over(out, key, now)
    if st.plan is None:
        _first_plan(snap, spec, out, settings, now)
    attempts.reopen(out, snap.generation, now)
    cache = resolve(snap, spec, out, now, settings.default_cache)
    if st.phase is not Phase.FAILED and not observe_download(
            snap, spec, out, cache, lambda pod: diagnose(pod, pod.restart_count),
            lambda pod, failure, decision: _record(snap, spec, out, settings, pod, failure, decision), now):
        _observe_attempt(snap, spec, out, settings, diagnose, now, read_startup, cache)
        status.mark_clamped(out, now, snap.generation)
    _desired(snap, spec, out, settings, cache)
    converge_autoscaling(snap, spec, out, settings, now)
    st.observed_generation = snap.generation
    return out


def gpu_memory_mib(status: InferenceServerStatus) -> int | None:
    """GPU memory the plan used, MiB (for re-planning with the same facts)."""
    if status.plan is None or status.plan.gpu_memory_bytes is None:
        return None
    return status.plan.gpu_memory_bytes // MiB
