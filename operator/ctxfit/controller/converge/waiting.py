"""Waiting is not failing (pure): readiness that follows the pods, and verdicts that are not the engine's.

``converge`` calls these around its attempt bookkeeping:

- ``attempt_pods``: the pods that may drive the state machine: owned (via ReplicaSet) by the server's
  Deployment, of the current engine template and attempt, not being deleted, not lost with their node;
- ``follow_pods``: when the current attempt has no Ready pod, say why in status (waiting for GPUs with the
  scheduler's message, pulling, initializing, pod lost), or end in a condition for what the engine
  cannot fix (image cannot be pulled, the ReplicaSet cannot create pods). None of these uses an attempt
  or the startup deadline (that starts when the engine container starts, ``pods.PodFacts.engine_started_at``);
- ``reopen``: a Failed verdict that was not the engine's is retried: image/pod-creation failures when
  the spec changes (generation), and attempts that failed without any evidence from the engine
  (``Unknown`` with no reason, exit code or message: the pod was lost, e.g. with its node, as the
  operator recorded it before pods were followed) at once, at most once per attempt history so that an
  engine that hangs without a word still ends Failed.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from typing import TYPE_CHECKING

from ctxfit.api.status import Attempt, AttemptOutcome, ConditionType, Phase, Reason
from ctxfit.vocab.kinds import FailureKind

from ..views.pod_facts import PodWait, WaitKind, lost, owned_by, waiting
from ..views.pods import DeploymentView, PodView
from .groups import crash_evidence
from .status import EventNote, mark_phase

if TYPE_CHECKING:
    from .flow import Outcome

REOPEN_NOTE = "not an engine failure: the pod showed no termination, exit code or message"
NO_EVIDENCE = frozenset({"", "terminated"})
"""Evidence ``recovery.classify`` gives when the pod showed no termination reason, exit code, message or Events
(``operator/ctxfit/recovery/classify.py`` ``_termination`` with nothing to quote)."""
SPEC_RETRY_REASONS = frozenset({Reason.IMAGE_PULL_FAILED, Reason.POD_CREATION_FAILED})
"""Failed verdicts retried when the spec's generation moves past the one they were given for."""
WAIT_ORDER = (WaitKind.IMAGE_ERROR, WaitKind.UNSCHEDULABLE, WaitKind.NODE_LOST, WaitKind.SCHEDULING,
              WaitKind.INITIALIZING, WaitKind.CREATING)
"""Which waiting pod the status quotes first."""


def attempt_pods(pods: Sequence[PodView], deployment: str, attempt: int, digest: str | None,
                 node_names: Collection[str]) -> tuple[list[PodView], list[PodView]]:
    """(live, lost) pods of ``attempt``: owned by Deployment ``deployment`` with engine ``digest``
    (``pods.owned_by``), not being deleted (except a group pod that shows a crash, ``group.crash_evidence``);
    ``lost`` ones (node gone, disrupted) are not engine failures."""
    mine = [p for p in pods if p.attempt == attempt and (not p.deleting or crash_evidence(p))
            and owned_by(p, deployment, digest)]
    gone = [p for p in mine if lost(p, node_names)]  # a crash before the loss was acted on when it happened
    return [p for p in mine if p not in gone], gone


def _changed(out: Outcome, reason: Reason, message: str) -> bool:
    old = out.status.condition(ConditionType.READY)
    return old is None or old.reason is not reason or old.message != message[:1024]


def _first(waits: list[PodWait]) -> PodWait | None:
    return min(waits, key=lambda w: WAIT_ORDER.index(w.kind)) if waits else None


def follow_pods(out: Outcome, cur: Attempt, pods: list[PodView], gone: list[PodView],
                deployment: DeploymentView | None, node_names: Collection[str], now: str, generation: int) -> None:
    """Status for an attempt without a Ready pod (see the module docstring). Writes phase + Ready condition."""
    waits = [w for w in (waiting(p, node_names) for p in pods if not p.ready and not p.failed) if w is not None]
    waits += [w for w in (waiting(p, node_names) for p in gone) if w is not None]
    wait = _first(waits)
    failure = None
    if deployment is not None and deployment.live is not None and deployment.replicas:
        failure = deployment.live.replica_failure
    if wait is not None and wait.kind is WaitKind.IMAGE_ERROR:
        message = f"{wait.message}; no attempt used, scaled to 0: fix spec.engine.image (or the registry access) " \
                  "and edit the spec to retry"
        _fail(out, Reason.IMAGE_PULL_FAILED, message, now, generation)
        return
    if not pods and failure is not None:
        message = f"the ReplicaSet cannot create the engine pod: {failure}; no attempt used: edit the spec to retry"
        _fail(out, Reason.POD_CREATION_FAILED, message, now, generation)
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


def _fail(out: Outcome, reason: Reason, message: str, now: str, generation: int) -> None:
    if _changed(out, reason, message):
        out.events.append(EventNote("Warning", reason, message))
    mark_phase(out, Phase.FAILED, reason, message, now, generation)


def _no_engine_evidence(attempt: Attempt) -> bool:
    return attempt.outcome is AttemptOutcome.FAILED and attempt.failure_kind == FailureKind.UNKNOWN.value \
        and (attempt.evidence or "") in NO_EVIDENCE


def reopen(out: Outcome, generation: int, now: str) -> None:
    """Retry a Failed server whose verdict was not the engine's (see the module docstring)."""
    st = out.status
    ready = st.condition(ConditionType.READY)
    if st.phase is not Phase.FAILED or ready is None or not st.attempts:
        return
    if ready.reason in SPEC_RETRY_REASONS:
        if ready.observed_generation is not None and generation > ready.observed_generation:
            message = f"spec changed (generation {generation}) after {ready.reason.value}: starting again"
            out.events.append(EventNote("Normal", Reason.REOPENED, message))
            mark_phase(out, Phase.STARTING, Reason.ENGINE_STARTING, message, now, generation)
        return
    if ready.reason not in (Reason.ATTEMPTS_EXHAUSTED, Reason.PERMANENT_FAILURE):
        return
    trailing: list[Attempt] = []
    for attempt in reversed(st.attempts):
        if not _no_engine_evidence(attempt):
            break
        trailing.append(attempt)
    if not trailing or any((a.explanation or "").startswith(REOPEN_NOTE) for a in st.attempts):
        return  # at most once per attempt history (a spec change starts a new one): an engine that hangs
        # without a word must still end Failed
    for attempt in trailing:
        attempt.outcome = AttemptOutcome.SUPERSEDED
        attempt.explanation = f"{REOPEN_NOTE} (lost with its node or never started)"
    newest = st.attempts[-1]
    st.attempts.append(Attempt(number=newest.number + 1, effective=newest.effective.model_copy(deep=True),
                               started_at=now))
    message = (f"{len(trailing)} failed attempt(s) had no evidence from the engine (pod lost, e.g. with its node): "
               f"not counted; starting attempt {newest.number + 1}")
    out.events.append(EventNote("Normal", Reason.REOPENED, message))
    mark_phase(out, Phase.STARTING, Reason.ENGINE_STARTING, message, now, generation)
