"""Waiting is not failing (pure): the pods an attempt may act on, and readiness that follows them.

``attempt_pods`` and ``follow_pods``, and why none of the waits uses an attempt: docs/design/waiting.md.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence

from ctxfit.api.status import Attempt, AttemptOutcome, ConditionType, Phase, Reason

from ..views.pod_wait import PodWait, WaitKind, lost, owned_by, waiting
from ..views.pods import DeploymentView, PodView
from .groups import crash_evidence
from .status import mark_failed, mark_phase
from .types import EventNote, Outcome

WAIT_ORDER = (WaitKind.IMAGE_ERROR, WaitKind.UNSCHEDULABLE, WaitKind.NODE_LOST, WaitKind.SCHEDULING,
              WaitKind.INITIALIZING, WaitKind.CREATING)
"""Which waiting pod the status quotes first."""


def attempt_pods(pods: Sequence[PodView], deployment: str, attempt: int, digest: str | None,
                 node_names: Collection[str]) -> tuple[list[PodView], list[PodView]]:
    """(live, lost) pods of ``attempt``: owned by Deployment ``deployment`` with engine ``digest``
    (``views.pod_wait.owned_by``), not being deleted (except a group pod that shows a crash,
    ``groups.crash_evidence``); ``lost`` ones (node gone, disrupted) are not engine failures."""
    mine = [p for p in pods if p.attempt == attempt and (not p.deleting or crash_evidence(p))
            and owned_by(p, deployment, digest)]
    gone = [p for p in mine if lost(p, node_names)]  # a crash before the loss was acted on when it happened
    return [p for p in mine if p not in gone], gone


def _first(waits: list[PodWait]) -> PodWait | None:
    return min(waits, key=lambda w: WAIT_ORDER.index(w.kind)) if waits else None


def follow_pods(out: Outcome, cur: Attempt, pods: list[PodView], gone: list[PodView],
                deployment: DeploymentView | None, node_names: Collection[str], now: str, generation: int) -> None:
    """Status for an attempt without a Ready pod (docs/design/waiting.md). Writes phase + Ready condition."""
    waits = [w for w in (waiting(p, node_names) for p in pods if not p.ready and not p.failed) if w is not None]
    waits += [w for w in (waiting(p, node_names) for p in gone) if w is not None]
    wait = _first(waits)
    failure = None
    if deployment is not None and deployment.live is not None and deployment.replicas:
        failure = deployment.live.replica_failure
    if wait is not None and wait.kind is WaitKind.IMAGE_ERROR:
        message = f"{wait.message}; no attempt used, scaled to 0: fix spec.engine.image (or the registry access) " \
                  "and edit the spec to retry"
        mark_failed(out, Reason.IMAGE_PULL_FAILED, message, now, generation)
        return
    if not pods and failure is not None:
        message = f"the ReplicaSet cannot create the engine pod: {failure}; no attempt used: edit the spec to retry"
        mark_failed(out, Reason.POD_CREATION_FAILED, message, now, generation)
        return
    if wait is not None:
        reason = Reason.WAITING_FOR_GPUS if wait.kind is WaitKind.UNSCHEDULABLE else Reason.WAITING_FOR_POD
        message = f"attempt {cur.number}: {wait.message} (no attempt used, no startup deadline yet)"
        old = out.status.condition(ConditionType.READY)
        if (old is None or old.reason is not reason) and wait.kind in (WaitKind.UNSCHEDULABLE, WaitKind.NODE_LOST):
            out.events.append(EventNote("Normal", reason, message))
        mark_phase(out, Phase.STARTING, reason, message, now, generation)
        return
    if cur.outcome is AttemptOutcome.SUCCEEDED:
        message = f"attempt {cur.number} has no Ready pod now" + (
            f" (pod {pods[0].name} is not Ready)" if pods else " (waiting for the Deployment to create one)")
        mark_phase(out, Phase.STARTING, Reason.WAITING_FOR_POD, message, now, generation)
        return
    ready = out.status.condition(ConditionType.READY)
    if ready is not None and ready.reason in (Reason.WAITING_FOR_GPUS, Reason.WAITING_FOR_POD):
        mark_phase(out, Phase.STARTING, Reason.ENGINE_STARTING, f"attempt {cur.number}: engine container started",
                   now, generation)
