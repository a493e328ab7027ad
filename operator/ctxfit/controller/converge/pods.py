"""The current attempt's pods in the pass (pure): Ready, failed (diagnosed, then ``attempts.fail``), past the
startup deadline, recreated as a group, or waiting; a Ready attempt's start-up is verified (``verify``)."""

from __future__ import annotations

from ctxfit.api import InferenceServerSpec
from ctxfit.api.status import (
    Attempt,
    AttemptOutcome,
    Phase,
    Reason,
    parse_rfc3339,
)
from ctxfit.recovery import Decision
from ctxfit.render.cache import CacheVolume
from ctxfit.vocab.kinds import Failure

from ..settings import Settings
from ..views.pods import PodView
from . import attempts, products
from .desired import desired_digest
from .group_restarts import follow_group
from .groups import group_is_ready, most_telling_failure
from .plan import node_of, replan
from .status import mark_phase
from .types import Diagnose, Outcome, ReadStartup, Snapshot
from .verify import observe_startup
from .waiting import attempt_pods, follow_pods


def observe_attempt(snap: Snapshot, spec: InferenceServerSpec, out: Outcome, settings: Settings,
                     diagnose: Diagnose, now: str, read_startup: ReadStartup | None = None,
                     cache: CacheVolume | None = None) -> None:
    """Fold the current attempt's pods into status: Ready, or a failure -> policy -> next attempt."""
    st = out.status
    cur = st.current_attempt
    if cur is None or cur.outcome not in (AttemptOutcome.RUNNING, AttemptOutcome.SUCCEEDED):
        return
    node_names = {n.name for n in snap.nodes}
    candidates = [p for p in snap.pods if p.attempt == cur.number]  # render the template only when needed
    digest = desired_digest(snap, spec, out, settings, cache) if candidates else None
    pods, gone = attempt_pods(candidates, snap.name, cur.number, digest, node_names)
    failing = [p for p in pods if p.failed]
    failed = failing[0] if failing else None
    if failed is None and cur.outcome is AttemptOutcome.RUNNING:
        failed = _overdue(out, cur, pods, settings, snap)
    if failed is not None:
        failed, failure = most_telling_failure(failing, diagnose) if len(failing) > 1 else \
            (failed, diagnose(failed, failed.restart_count))
        node = node_of(snap, failed, st.node_product)

        def elsewhere(seen: str) -> bool:
            return products.move_on(snap, spec, out, settings, failure, node, cur.number, seen, now)
        attempts.fail(out, spec, cur, failed, failure, node, settings, snap.now, snap.generation,
                      lambda s, pin: replan(s, pin, node, settings, out), elsewhere=elsewhere)
        return
    groups = snap.deployment.replicas if snap.deployment is not None else None
    if follow_group(out, spec, cur, pods, settings.group_restart_budget, now, snap.generation, groups):
        return  # a group recreated past its budget: Failed
    ready = [p for p in pods if p.ready]
    if cur.outcome is AttemptOutcome.RUNNING and ready and group_is_ready(spec, pods):
        attempts.succeed(out, cur, ready[0].name, now)
    if cur.outcome is AttemptOutcome.SUCCEEDED and ready:
        mark_phase(out, Phase.READY, Reason.ENGINE_READY,
                   f"serving with context {cur.effective.context_length}", now, snap.generation)
        if read_startup is not None:
            node = node_of(snap, ready[0], st.node_product)
            observe_startup(out, spec, ready[0], read_startup, uid=snap.uid, server=f"{snap.namespace}/{snap.name}",
                            node=node, settings=settings, now=snap.now, generation=snap.generation,
                            replan=lambda s, pin: replan(s, pin, node, settings, out))
    elif cur.not_before is None or parse_rfc3339(cur.not_before) <= snap.now:
        follow_pods(out, cur, pods, gone, snap.deployment, node_names, now, snap.generation)


def _overdue(out: Outcome, cur: Attempt, pods: list[PodView], settings: Settings, snap: Snapshot) -> PodView | None:
    """The first pod past the attempt's startup deadline (``attempts.startup_overdue``); else look again when the
    nearest deadline passes."""
    for pod in pods:
        if pod.ready:
            continue
        left = attempts.startup_overdue(pod, cur, settings, snap.now)
        if left is not None and left <= 0:
            return pod
        if left is not None:
            out.requeue(left)
    return None


def record_download_failure(snap: Snapshot, spec: InferenceServerSpec, out: Outcome, settings: Settings, pod: PodView,
                            failure: Failure, decision: Decision | None) -> None:
    """A failed download ends the newest attempt through the policy (``attempts.fail``)."""
    cur = out.status.current_attempt
    assert cur is not None
    node = node_of(snap, pod, out.status.node_product)
    attempts.fail(out, spec, cur, pod, failure, node, settings, snap.now, snap.generation,
                  lambda s, pin: replan(s, pin, node, settings, out), decision=decision)
