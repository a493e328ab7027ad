"""The pass, in order: ``converge(Snapshot) -> Outcome``, the next status, the children to apply, the Events
and when to look again (pure; ``reconcile`` reads the snapshot and writes the outcome). Each step lives in its
own module; the invariants that make a pass safe to repeat: docs/design/attempts.md."""

from __future__ import annotations

from pydantic import ValidationError

from ctxfit.api import InferenceServerSpec
from ctxfit.api.status import Phase, Reason, now_rfc3339
from ctxfit.recovery import Decision, Failure

from ..settings import Settings
from ..views.pods import PodView
from . import attempts, policy, refusals, resolution, routing, status
from .autoscaling import converge_autoscaling, pause_live
from .cache import observe_download, resolve
from .desired import desired
from .engine_version import mark_engine_version
from .plan import first_plan, spec_key
from .pods import observe_attempt, record_download_failure
from .status import mark_failed_spec
from .types import Diagnose, Outcome, ReadStartup, Snapshot

GROUPS_RECHECK_SECONDS = 60.0
"""How often a multi-node server looks for LeaderWorkerSets again while they are not served."""


def converge(snap: Snapshot, settings: Settings, diagnose: Diagnose,
             read_startup: ReadStartup | None = None) -> Outcome:
    """One reconciliation step for one InferenceServer (pure): the ordered steps, then
    the refusal book's state into status and the writes still in their backoff dropped (``refusals.hold``), Ready
    held while the Service lane writes the Service (``refusals.hold_for_service``), and last the KV pool in force
    (``status.mark_kv_in_force``).

    ``read_startup``: reads a Ready pod's start-up log (``controller/converge/verify.py``); None skips verification.
    """
    out = _steps(snap, settings, diagnose, read_startup)
    refusals.hold(out, snap.refusals, now_rfc3339(snap.now), snap.generation, accepted=snap.writes_accepted)
    refusals.hold_for_service(out, snap, now_rfc3339(snap.now))
    status.mark_kv_in_force(out.status)
    return out


def _steps(snap: Snapshot, settings: Settings, diagnose: Diagnose,  # noqa: C901 - the ordered steps of the pass
           read_startup: ReadStartup | None) -> Outcome:
    out = Outcome(status=snap.status.model_copy(deep=True))
    st = out.status
    now = now_rfc3339(snap.now)
    out.requeue(settings.resync_seconds)
    try:
        spec = InferenceServerSpec.model_validate(snap.spec)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first["loc"])
        msg = str(first["msg"]).removeprefix("Value error, ")  # pydantic's prefix for a validator's ValueError
        mark_failed_spec(out, f"spec.{where}: {msg}" if where else msg, now, snap.generation)
        st.observed_generation = snap.generation
        if snap.deployment is not None and snap.deployment.replicas != 0:
            out.scale_to_zero = True
        pause_live(out, snap.scaling, snap.name, now, snap.generation)
        return out
    out.spec = spec
    refused = policy.refusal(spec, settings)
    pool_refused = routing.refusal(snap.name, snap.uid, snap.created, spec, snap.routing) if refused is None else None
    if refused is not None or pool_refused is not None:
        if pool_refused is not None:  # another server defines the pool's model: this one may not join it
            status.mark_refused(out, pool_refused, now, snap.generation, reason=Reason.POOL_MODEL_MISMATCH)
            st.routing = None
            routing.drop_conditions(out)
        else:
            status.mark_refused(out, str(refused), now, snap.generation)
        st.observed_generation = snap.generation
        out.scale_to_zero = snap.deployment is not None and snap.deployment.replicas != 0
        pause_live(out, snap.scaling, snap.name, now, snap.generation)
        return out
    status.mark_admitted(out, now, snap.generation)
    mark_engine_version(out, spec, now, snap.generation)
    if spec.nodes > 1 and not snap.groups_served:
        status.mark_groups_missing(out, spec.nodes, GROUPS_RECHECK_SECONDS, now, snap.generation)
        out.requeue(GROUPS_RECHECK_SECONDS)
        st.observed_generation = snap.generation
        return out
    key = spec_key(spec)
    spec_changed = st.spec_key is not None and st.spec_key != key  # (a first pass is no change)
    if st.spec_key != key:
        attempts.start_over(out, key, now)
    found = resolution.step(snap, spec, out, now, settings, spec_changed)
    if out.replan_resolution:  # a moving branch moved: plan again with the new commit
        attempts.start_over(out, key, now, announce=False)
        found = resolution.step(snap, spec, out, now, settings, False)
    if st.plan is None and found.ready:
        first_plan(snap, spec, out, settings, now, model=found.source, draft=found.draft, adapters=found.adapters)
        if out.plan_result is not None:
            resolution.record(out, spec, snap.namespace, found.source, out.plan_result, now, snap.generation,
                              draft=found.draft, adapters=found.adapters)
    attempts.reopen(out, snap.generation, now)
    cache = resolve(snap, spec, out, now, settings.default_cache)
    def record(pod: PodView, failure: Failure, decision: Decision | None) -> None:
        record_download_failure(snap, spec, out, settings, pod, failure, decision)

    if st.phase is not Phase.FAILED and not observe_download(
            snap, spec, out, cache, lambda pod: diagnose(pod, pod.restart_count), record, now):
        observe_attempt(snap, spec, out, settings, diagnose, now, read_startup, cache)
        status.mark_clamped(out, now, snap.generation)
    desired(snap, spec, out, settings, cache)
    converge_autoscaling(snap, spec, out, settings, now)
    if snap.routing is not None:
        server = routing.ServerFacts(snap.name, snap.namespace, snap.uid, snap.created, spec,
                                     routing.pool_pods(snap.name, snap.pods))
        routing.converge_routing(server, out, snap.routing, now=now, generation=snap.generation)
    st.observed_generation = snap.generation
    return out
