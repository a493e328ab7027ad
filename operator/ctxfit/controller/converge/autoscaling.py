"""Autoscaling in reconciliation (pure): the KEDA ScaledObject, the replica count, ``status.autoscaling``.

With ``spec.autoscaling`` the replica count is KEDA's HPA's; the operator writes it only in the few cases listed
in the design. The rules, the status counts and KEDA absent: docs/design/autoscaling.md.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from ctxfit.api import InferenceServerSpec
from ctxfit.api.autoscaling import AutoscalingSpec, AutoscalingStatus, initial_replicas
from ctxfit.api.status import ConditionStatus, ConditionType, InferenceServerStatus, Phase, Reason
from ctxfit.budget.autoscale import (
    Thresholds,
    autoscaling_status,
    cold_start_seconds,
    server_thresholds,
    weights_per_replica_bytes,
)
from ctxfit.render.scaledobject import PAUSED_ANNOTATION, ScaledObjectInput, render_scaled_object

from ..settings import Settings
from ..views.pods import DeploymentView
from ..views.workloads import ScaledObjectView
from .refusals import Refusal, refused_autoscaler
from .status import drop_condition, set_condition
from .types import EventNote, Keda, Outcome, ScalingSnapshot, Snapshot

KEDA_RECHECK_SECONDS = 60.0
"""How often a server with autoscaling looks for KEDA again while its CRDs are not served."""
SCALED_OBJECT_RECHECK_SECONDS = 10.0
"""How soon after a ScaledObject write (KEDA's ``Ready`` verdict, or its deletion) it is read again, watch or not."""


@dataclass(frozen=True)
class Replicas:
    """The workload's replica count for this pass.

    Attributes:
        count: ``RenderInput.replicas`` (None: ``spec.replicas``).
        write: the rendered count is compared and written; False: the autoscaler's count is left alone
            (``spec.replicas`` is dropped from the rendered workload before it is applied).
    """

    count: int | None
    write: bool = True


def wanted_replicas(spec: InferenceServerSpec, have: DeploymentView | None, failed: bool,
                    scaling: ScalingSnapshot | None) -> Replicas:
    """The replica count to render and whether to write it (the rules: docs/design/autoscaling.md)."""
    auto = spec.autoscaling
    if auto is None:
        return Replicas(0 if failed else None)
    if failed:
        return Replicas(0)
    if have is None or have.replicas is None:
        return Replicas(initial_replicas(auto, spec.replicas))
    live = scaling.live if scaling is not None else None
    if have.replicas == 0 and live is not None and live.paused:
        return Replicas(initial_replicas(auto, spec.replicas))
    if have.replicas < auto.min_replicas:
        return Replicas(auto.min_replicas)
    if have.replicas > auto.max_replicas:
        return Replicas(auto.max_replicas)
    return Replicas(have.replicas, write=False)


def leave_replicas(workload: dict[str, Any]) -> dict[str, Any]:
    """``workload`` without ``spec.replicas``: applied, it replaces the other spec fields only (``kube``)."""
    workload["spec"].pop("replicas", None)
    return workload


def _set(out: Outcome, status: ConditionStatus, reason: Reason, message: str, now: str, generation: int,
         event: EventNote | None = None) -> None:
    """Set the ``Autoscaling`` condition; post ``event`` only when it changed."""
    set_condition(out, ConditionType.AUTOSCALING, status, reason, message, now, generation, event)


def contained(desired: Any, live: Any) -> bool:
    """``desired`` is contained in ``live``: mappings by key (fields the API server or KEDA add are ignored),
    lists item by item, scalars equal."""
    if isinstance(desired, Mapping):
        return isinstance(live, Mapping) and all(contained(v, live.get(k)) for k, v in desired.items())
    if isinstance(desired, list):
        return isinstance(live, list) and len(desired) == len(live) and all(
            contained(d, v) for d, v in zip(desired, live, strict=True))
    return bool(desired == live)


def up_to_date(desired: Mapping[str, Any], live: ScaledObjectView) -> bool:
    """The live ScaledObject has the rendered spec, labels and annotations."""
    meta = desired.get("metadata") or {}
    return contained(desired.get("spec") or {}, live.spec) and contained(meta.get("labels") or {}, live.labels) \
        and contained(meta.get("annotations") or {}, live.annotations)


def remove_scaling(out: Outcome, scaling: ScalingSnapshot | None, name: str, now: str, generation: int) -> None:
    """No ``spec.autoscaling``: delete a ScaledObject still there; clear ``status.autoscaling`` once it is gone."""
    live = scaling.live if scaling is not None else None
    if live is None:
        out.status.autoscaling = None
        drop_condition(out, ConditionType.AUTOSCALING)
        return
    out.scaled_object_delete = True
    out.requeue(SCALED_OBJECT_RECHECK_SECONDS)
    message = f"autoscaling removed from the spec: deleting ScaledObject {name}; replicas follow spec.replicas again"
    _set(out, "False", Reason.SCALED_OBJECT_DELETED, message, now, generation,
         EventNote("Normal", Reason.SCALED_OBJECT_DELETED, message))


def pause_live(out: Outcome, scaling: ScalingSnapshot | None, name: str, now: str, generation: int) -> None:
    """The spec is invalid or refused (nothing renders): pause a live ScaledObject so KEDA cannot wake the
    workload the operator scales to 0. ``status.autoscaling.paused`` says so too, like the condition."""
    live = scaling.live if scaling is not None else None
    if live is None:
        return
    update: dict[str, Any] = {"scaled_object": name, "paused": True}
    if out.scale_to_zero:
        update["desired_replicas"] = 0
    out.status.autoscaling = (out.status.autoscaling or AutoscalingStatus()).model_copy(update=update)
    if live.paused:
        return
    out.scaled_object_pause = True
    message = f"ScaledObject {name} paused: the server is Failed"
    _set(out, "False", Reason.AUTOSCALING_PAUSED, message, now, generation,
         EventNote("Normal", Reason.AUTOSCALING_PAUSED, message))


def _keda_unusable(out: Outcome, keda: Keda, now: str, generation: int) -> None:
    if keda is Keda.DISABLED:
        message = ("spec.autoscaling is set but the operator runs without KEDA support (chart values "
                   "autoscaling.keda.enabled and autoscaling.prometheusAddress: CTXFIT_KEDA_ENABLED, "
                   "CTXFIT_PROMETHEUS_ADDRESS); replicas stay within minReplicas..maxReplicas and nothing scales them")
        _set(out, "False", Reason.KEDA_DISABLED, message, now, generation,
             EventNote("Warning", Reason.KEDA_DISABLED, message))
        return
    message = ("KEDA not installed: the API server does not serve keda.sh/v1alpha1 ScaledObjects; install KEDA "
               f"(README: autoscaling); looking again every {KEDA_RECHECK_SECONDS:.0f} s, replicas stay within "
               "minReplicas..maxReplicas meanwhile")
    _set(out, "False", Reason.KEDA_NOT_INSTALLED, message, now, generation,
         EventNote("Warning", Reason.KEDA_NOT_INSTALLED, message))
    out.requeue(KEDA_RECHECK_SECONDS)


def fold_scaled_object(out: Outcome, auto: AutoscalingSpec, desired: dict[str, Any], scaling: ScalingSnapshot,
                       workload_exists: bool, now: str, generation: int, refusals: tuple[Refusal, ...] = ()) -> None:
    """Apply ``desired`` (the rendered ScaledObject) when the live one differs, and say where autoscaling stands.

    The ScaledObject is created only once the workload exists (or is created in the same pass): KEDA checks
    its scale target at once. Events: ScaledObjectCreated, AutoscalingPaused, AutoscalingResumed, and a Warning
    when KEDA reports the ScaledObject not Ready (its own message). While the API server refuses to create or to
    resume it (``ObjectsAccepted`` False for the ScaledObject, ``rejections``) the condition is False with that
    refusal (and ``paused`` stays true), not "creating" or "resumed", and no such Event is posted again.
    """
    name = desired["metadata"]["name"]
    paused = out.status.phase is Phase.FAILED
    live = scaling.live
    if live is None and not workload_exists:
        _set(out, "Unknown", Reason.SCALED_OBJECT_PENDING, "waiting for the workload before creating the "
             f"ScaledObject {name}", now, generation)
        return
    bounds = f"between {auto.min_replicas} and {auto.max_replicas} replicas"
    if live is None or not up_to_date(desired, live):
        out.scaled_object = desired
        out.requeue(SCALED_OBJECT_RECHECK_SECONDS)
    if paused:
        message = f"ScaledObject {name} paused while the server is Failed (replicas 0, GPUs released)"
        _set(out, "False", Reason.AUTOSCALING_PAUSED, message, now, generation,
             EventNote("Normal", Reason.AUTOSCALING_PAUSED, message))
        return
    refusal = refused_autoscaler(refusals)
    if refusal is not None and (live is None or live.paused):  # not created, or not resumed: say so
        if live is not None and out.status.autoscaling is not None:
            out.status.autoscaling.paused = True
        _set(out, "False", Reason.OBJECT_REJECTED, refusal.message, now, generation)  # its Warning: refusals.hold
        return
    if live is None:
        message = f"creating ScaledObject {name}: KEDA scales {bounds}; waiting for KEDA to accept it"
        _set(out, "Unknown", Reason.SCALED_OBJECT_PENDING, message, now, generation,
             EventNote("Normal", Reason.SCALED_OBJECT_CREATED, message))
        return
    if live.paused:
        message = f"ScaledObject {name} resumed: KEDA scales {bounds} again"
        _set(out, "Unknown", Reason.SCALED_OBJECT_PENDING, message, now, generation,
             EventNote("Normal", Reason.AUTOSCALING_RESUMED, message))
        return
    if live.ready == "False":
        message = f"KEDA reports ScaledObject {name} not Ready: {live.ready_message}"
        _set(out, "False", Reason.SCALED_OBJECT_NOT_READY, message, now, generation,
             EventNote("Warning", Reason.SCALED_OBJECT_NOT_READY, message))
        out.requeue(SCALED_OBJECT_RECHECK_SECONDS)
        return
    if live.ready != "True":
        old = out.status.condition(ConditionType.AUTOSCALING)
        if old is None or old.reason is not Reason.SCALED_OBJECT_PENDING:
            _set(out, "Unknown", Reason.SCALED_OBJECT_PENDING, f"waiting for KEDA to accept ScaledObject {name}",
                 now, generation)
        out.requeue(SCALED_OBJECT_RECHECK_SECONDS)
        return
    _set(out, "True", Reason.SCALED_OBJECT_READY, f"KEDA scales {bounds} (ScaledObject {name} Ready)", now,
         generation)


def paused_rendering(obj: Mapping[str, Any]) -> bool:
    """The rendered ScaledObject ``obj`` carries ``autoscaling.keda.sh/paused: "true"``."""
    annotations = (obj.get("metadata") or {}).get("annotations") or {}
    return str(annotations.get(PAUSED_ANNOTATION, "")).lower() == "true"


def _thresholds(spec: InferenceServerSpec, st: InferenceServerStatus) -> Thresholds | None:
    """The server's thresholds from its plan, the configuration in force and ``status.observed`` when it is that
    configuration's (the current attempt's: an earlier attempt's pool was for another context or utilization);
    None while nothing is planned. Raises ``ValueError`` as ``budget.autoscale.thresholds`` does."""
    cur = st.current_attempt
    if st.plan is None or not st.plan.fits or cur is None:
        return None
    observed = st.observed if st.observed is not None and st.observed.attempt == cur.number else None
    return server_thresholds(spec, kv_pool_bytes=st.plan.kv_pool_bytes, kv_bytes_per_token=st.plan.kv_bytes_per_token,
                             context_length=cur.effective.context_length, max_num_seqs=cur.effective.max_num_seqs,
                             headroom=st.plan.headroom, observed=observed)


def replica_counts(have: DeploymentView | None, out: Outcome) -> dict[str, int | None]:
    """``status.autoscaling``'s ``currentReplicas`` (the workload's ``status.replicas``) and ``desiredReplicas``:
    the count this pass writes (create, Failed = 0, resume, a bound), else the workload's ``spec.replicas``."""
    desired = have.replicas if have is not None else None
    if out.scale_to_zero:
        desired = 0
    elif out.deployment is not None and "replicas" in out.deployment["spec"]:
        desired = out.deployment["spec"]["replicas"]
    return {"current_replicas": have.current_replicas if have is not None else None, "desired_replicas": desired}


def converge_autoscaling(snap: Snapshot, spec: InferenceServerSpec, out: Outcome, settings: Settings,
                         now: str) -> None:
    """``status.replicas``, ``status.autoscaling`` and the ScaledObject for this pass (docs/design/autoscaling.md)."""
    st = out.status
    have = snap.deployment
    st.replicas = have.current_replicas if have is not None else None
    auto = spec.autoscaling
    if auto is None:
        remove_scaling(out, snap.scaling, snap.name, now, snap.generation)
        return
    failed = st.phase is Phase.FAILED
    counts = replica_counts(have, out)
    try:
        found = _thresholds(spec, st)
    except ValueError as exc:
        st.autoscaling = AutoscalingStatus(min_replicas=auto.min_replicas, max_replicas=auto.max_replicas, **counts)
        _set(out, "False", Reason.SCALED_OBJECT_NOT_READY, f"no autoscaling thresholds: {exc}", now, snap.generation)
        return
    if found is None:  # nothing planned or nothing fits: nothing runs that could be scaled
        st.autoscaling = AutoscalingStatus(min_replicas=auto.min_replicas, max_replicas=auto.max_replicas, **counts)
        if failed:
            pause_live(out, snap.scaling, snap.name, now, snap.generation)
        return
    weights = st.plan.per_gpu.weights_bytes if st.plan is not None else 0
    cold_start = cold_start_seconds(weights_per_replica_bytes(spec, weights), st.observed)
    status = autoscaling_status(found, auto, scaled_object=snap.name, paused=failed, cold_start=cold_start)
    st.autoscaling = status.model_copy(update=counts)
    scaling = snap.scaling if snap.scaling is not None else ScalingSnapshot(Keda.DISABLED)
    if scaling.keda is not Keda.INSTALLED or not settings.prometheus_address:  # the chart requires both
        _keda_unusable(out, scaling.keda if scaling.keda is not Keda.INSTALLED else Keda.DISABLED, now,
                       snap.generation)
        return
    cur = st.current_attempt
    desired = render_scaled_object(ScaledObjectInput(
        name=snap.name, namespace=snap.namespace, uid=snap.uid, spec=spec, thresholds=found,
        prometheus_address=settings.prometheus_address, paused=failed,
        startup_timeout_seconds=cur.effective.startup_timeout_seconds if cur is not None else None))
    fold_scaled_object(out, auto, desired, scaling, have is not None, now, snap.generation, snap.refusals)
