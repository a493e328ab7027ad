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
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from pydantic import ValidationError

from ctxfit.api import InferenceServerSpec, MiB
from ctxfit.api.status import (
    Attempt,
    AttemptOutcome,
    ConditionType,
    EffectiveStatus,
    InferenceServerStatus,
    Phase,
    Reason,
    now_rfc3339,
    parse_rfc3339,
)
from ctxfit.budget.calibrate import CalibrationKey, CalibrationTable, Sample
from ctxfit.budget.planner import Plan, plan
from ctxfit.recovery import Decision
from ctxfit.render import RenderInput, endpoint_url
from ctxfit.render.cache import CacheVolume
from ctxfit.render.deployment import CONTAINER_NAME, render_pod_template
from ctxfit.render.leaderworkerset import render_service_for, render_workload
from ctxfit.vocab.inputs import PlanInputError
from ctxfit.vocab.kinds import Failure

from ..settings import Settings
from ..views.cache import ClaimView, StorageView
from ..views.nodes import failed_driver_nodes, required_cuda
from ..views.pod_facts import engine_digest
from ..views.pods import DeploymentView, GPUNode, PodView, describe_nodes, eligible_nodes
from ..views.workloads import describe_drift, drifted
from . import policy, routing
from .attempts import record_failure
from .autoscaling import ScalingSnapshot, converge_autoscaling, leave_replicas, pause_live, wanted_replicas
from .cache import observe_download, resolve
from .group_restarts import follow_group, reopen_group
from .groups import best_group_node, group_shortage, most_telling_failure, pods_for_ready
from .status import EventNote, mark_failed_spec, mark_no_node, mark_phase, plan_status
from .verify import ReadStartup, mark_clamped, observe_startup
from .waiting import attempt_pods, follow_pods, reopen
from .wording import budget_condition

SERVICE_DELAY_SECONDS = 1.0
"""A new server's Service is created on the pass after its Deployment (the engine starts first)."""

Diagnose = Callable[[PodView, int], Failure]
"""``diagnose(pod, restarts_seen) -> Failure``: read the pod's termination, log tail and Events, classify."""


@dataclass(frozen=True)
class Snapshot:
    """One InferenceServer and what the operator knows around it, at ``now``.

    ``service_port``: the port of its Service (None: no Service yet).
    ``storage``, ``claim``, ``download_log``: the StorageClasses (None: not read, no cache rendered), the
    cache claim, and a reader of a pod's download log (``controller.cache``).
    """

    name: str
    namespace: str
    uid: str
    generation: int
    spec: dict[str, Any]
    status: InferenceServerStatus
    nodes: tuple[GPUNode, ...]
    pods: tuple[PodView, ...]
    deployment: DeploymentView | None
    service_port: int | None
    now: datetime
    calibration: CalibrationTable | None = None
    storage: StorageView | None = None
    claim: ClaimView | None = None
    download_log: Callable[[PodView], str] | None = None
    scaling: ScalingSnapshot | None = None
    routing: routing.RoutingSnapshot | None = None
    created: str = ""


@dataclass
class Outcome:
    """What to do: write ``status`` (when changed), apply ``deployment``/``service``/``scaled_object`` (when not
    None); ``scaled_object_delete``/``scaled_object_pause``: delete or pause the live ScaledObject."""

    status: InferenceServerStatus
    deployment: dict[str, Any] | None = None
    scale_to_zero: bool = False
    service: dict[str, Any] | None = None
    events: list[EventNote] = field(default_factory=list)
    requeue_after: float | None = None
    waiting_for_nodes: bool = False
    finished: list[Attempt] = field(default_factory=list)
    step_down_reasons: list[str] = field(default_factory=list)
    spec: InferenceServerSpec | None = None
    samples: list[tuple[CalibrationKey, Sample]] = field(default_factory=list)
    claim: dict[str, Any] | None = None
    claim_exists: bool = False
    claim_delete: str | None = None
    scaled_object: dict[str, Any] | None = None
    scaled_object_delete: bool = False
    scaled_object_pause: bool = False
    pool: dict[str, Any] | None = None
    pool_delete: tuple[str, str] | None = None
    pod_labels: dict[str, tuple[str, dict[str, str]]] = field(default_factory=dict)

    def requeue(self, seconds: float) -> None:
        """Look again after ``seconds`` at the latest (keeps the earliest request)."""
        seconds = max(0.05, seconds)
        self.requeue_after = seconds if self.requeue_after is None else min(self.requeue_after, seconds)


HISTORY_NEUTRAL_FIELDS = ("replicas", "attempts", "pod", "autoscaling", "routing")
"""Spec fields whose change keeps the plan and the attempt history (they do not change what fits; adding or
removing ``autoscaling`` restarts no engine; joining or leaving a pool keeps what the server learnt)."""


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


def _start_over(out: Outcome, key: str, now: str) -> None:
    st = out.status
    cur = st.current_attempt
    if st.spec_key is not None:
        out.events.append(EventNote("Normal", Reason.SPEC_CHANGED, "spec changed: planning again"))
    if cur is not None and cur.outcome is AttemptOutcome.RUNNING:
        cur.outcome, cur.finished_at = AttemptOutcome.SUPERSEDED, now
        out.finished.append(cur)
    st.spec_key, st.plan, st.effective, st.context_length, st.node_product = key, None, None, None, None
    st.attempts = []


def _first_plan(snap: Snapshot, spec: InferenceServerSpec, out: Outcome, settings: Settings, now: str) -> bool:
    """Choose a node and plan. Returns True when attempt 1 was created (False: waiting or failed)."""
    st = out.status
    nodes = eligible_nodes(spec, snap.nodes)
    shortage = group_shortage(spec, nodes)
    if not nodes or shortage:
        mark_no_node(out, shortage or describe_nodes(spec, snap.nodes), now, snap.generation)
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
        text = "; ".join(result.reasons)
        st.set_condition(ConditionType.BUDGET_FITS, "False", Reason.DOES_NOT_FIT, text, now=now,
                         generation=snap.generation)
        mark_phase(out, Phase.FAILED, Reason.DOES_NOT_FIT, f"does not fit: {text}", now, snap.generation)
        out.events.append(EventNote("Warning", Reason.DOES_NOT_FIT, f"nothing started: {text}"))
        return False
    fits_status, fits_reason, fits_text = budget_condition(result, spec, st.plan.headroom)
    st.set_condition(ConditionType.BUDGET_FITS, fits_status, fits_reason, fits_text, now=now,
                     generation=snap.generation)
    st.attempts = [Attempt(number=1, effective=EffectiveStatus.of(result.effective), started_at=now)]
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


def _startup_overdue(pod: PodView, attempt: Attempt, settings: Settings, now: datetime) -> float | None:
    """Seconds until the pod's startup deadline (<= 0: overdue); None while its engine container never started
    (scheduling, image pulls and init containers use no startup budget)."""
    if pod.facts.engine_started_at is None:
        return None
    deadline = parse_rfc3339(pod.facts.engine_started_at) + timedelta(
        seconds=attempt.effective.startup_timeout_seconds + settings.startup_grace_seconds)
    return (deadline - now).total_seconds()


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
            left = _startup_overdue(pod, cur, settings, snap.now)
            if left is not None and left <= 0:
                failed = pod
                break
            if left is not None:
                out.requeue(left)
    if failed is not None:
        failed, failure = most_telling_failure(failing, diagnose) if len(failing) > 1 else \
            (failed, diagnose(failed, failed.restart_count))
        node = _node_of(snap, failed, st.node_product)
        record_failure(out, spec, cur, failed, failure, node, settings, snap.now, snap.generation,
                       lambda s, pin: _replan(s, pin, node, settings))
        return
    groups = snap.deployment.replicas if snap.deployment is not None else None
    if follow_group(out, spec, cur, pods, settings.group_restart_budget, now, snap.generation, groups):
        return  # a group recreated past its budget: Failed
    ready = [p for p in pods if p.ready]
    if cur.outcome is AttemptOutcome.RUNNING and ready and len(ready) >= pods_for_ready(spec):
        cur.outcome, cur.finished_at, cur.pod = AttemptOutcome.SUCCEEDED, now, ready[0].name
        out.finished.append(cur)
        out.events.append(EventNote("Normal", Reason.ENGINE_READY,
                                    f"attempt {cur.number} is Ready with context {cur.effective.context_length}"))
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
    return RenderInput(
        name=snap.name, namespace=snap.namespace, uid=snap.uid, spec=spec, effective=cur.effective.to_config(),
        attempt=cur.number, gpu_product=st.node_product, image=settings.image_for(spec.engine.kind.value),
        replicas=wanted_replicas(spec, snap.deployment, st.phase is Phase.FAILED, snap.scaling).count,
        avoid_nodes=tuple(failed_driver_nodes(st.attempts)), min_cuda=required_cuda(spec), cache=cache,
    )


def _desired_digest(snap: Snapshot, spec: InferenceServerSpec, out: Outcome, settings: Settings,
                    cache: CacheVolume | None = None) -> str:
    """``pods.engine_digest`` of the current attempt's engine container (pods of another template are ignored)."""
    template = render_pod_template(_render_input(snap, spec, out, settings, cache))
    return engine_digest(template["spec"]["containers"][0])


def _record(snap: Snapshot, spec: InferenceServerSpec, out: Outcome, settings: Settings, pod: PodView,
            failure: Failure, decision: Decision | None) -> None:
    """A failed download ends the newest attempt through the policy (``stepping.record_failure``)."""
    cur = out.status.current_attempt
    assert cur is not None
    node = _node_of(snap, pod, out.status.node_product)
    record_failure(out, spec, cur, pod, failure, node, settings, snap.now, snap.generation,
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
    pool_refused = None if refused is not None else routing.refusal(snap.name, snap.uid, snap.created, spec,
                                                                       snap.routing)
    if refused is not None or pool_refused is not None:
        if pool_refused is not None:
            policy.mark_refused(out, pool_refused, now, snap.generation, reason=Reason.POOL_MODEL_MISMATCH)
            st.routing = None
            routing.drop_conditions(st)
        else:
            policy.mark_refused(out, str(refused), now, snap.generation)
        st.observed_generation = snap.generation
        out.scale_to_zero = snap.deployment is not None and snap.deployment.replicas != 0
        pause_live(out, snap.scaling, snap.name, now, snap.generation)
        return out
    policy.mark_admitted(out, now, snap.generation)
    key = spec_key(spec)
    if st.spec_key != key:
        _start_over(out, key, now)
    if st.plan is None:
        _first_plan(snap, spec, out, settings, now)
    reopen(out, snap.generation, now)
    reopen_group(out, snap.generation, now)
    cache = resolve(snap, spec, out, now, settings.default_cache)
    if st.phase is not Phase.FAILED and not observe_download(
            snap, spec, out, cache, lambda pod: diagnose(pod, pod.restart_count),
            lambda pod, failure, decision: _record(snap, spec, out, settings, pod, failure, decision), now):
        _observe_attempt(snap, spec, out, settings, diagnose, now, read_startup, cache)
        mark_clamped(out, now, snap.generation)
    _desired(snap, spec, out, settings, cache)
    converge_autoscaling(snap, spec, out, settings, now)
    if snap.routing is not None:
        facts = routing.ServerFacts(snap.name, snap.namespace, snap.uid, snap.created, spec,
                                    routing.pool_pods(snap.name, snap.pods))
        routed = routing.converge_routing(facts, st, snap.routing, now=now, generation=snap.generation)
        out.pool, out.pool_delete, out.pod_labels = routed.pool, routed.pool_delete, routed.pod_labels
        out.events += routed.events
        if routed.requeue_after is not None:
            out.requeue(routed.requeue_after)
    st.observed_generation = snap.generation
    return out


def gpu_memory_mib(status: InferenceServerStatus) -> int | None:
    """GPU memory the plan used, MiB (for re-planning with the same facts)."""
    if status.plan is None or status.plan.gpu_memory_bytes is None:
        return None
    return status.plan.gpu_memory_bytes // MiB
