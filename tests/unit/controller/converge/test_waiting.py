"""Readiness follows the pods; waiting is not failing; verdicts that were not the engine's are retried; drift is
reverted; look-alike pods are ignored (``converge`` with ``controller/converge/waiting.py``, fakes only)."""

from __future__ import annotations

from dataclasses import replace
from datetime import timedelta

from ctxfit.api.status import (
    Attempt,
    AttemptOutcome,
    ConditionType,
    EffectiveStatus,
    InferenceServerStatus,
    Phase,
    Reason,
)
from ctxfit.controller.converge import Outcome, converge
from ctxfit.controller.converge.status import mark_phase
from ctxfit.controller.views.pod_facts import PodFacts
from ctxfit.controller.views.pods import DeploymentView, PodView
from ctxfit.controller.views.workloads import LiveDeployment, live_deployment
from ctxfit.recovery import Failure, FailureKind
from ctxfit.render.deployment import CONTAINER_NAME

from tests.unit.controller.builders import NOW, SETTINGS, applied, diagnosed, never, pod, snapshot, spec

UNSCHEDULABLE = "0/7 nodes are available: 2 Insufficient nvidia.com/gpu, 5 node(s) didn't match Pod's node affinity."


def started() -> Outcome:
    return converge(snapshot(spec()), SETTINGS, never)


def pending(name: str = "kimi-1", message: str = UNSCHEDULABLE) -> PodView:
    base = pod(1, name=name)
    facts = replace(base.facts, engine_started_at=None, scheduled="False", unschedulable_message=message)
    return replace(base, node=None, phase="Pending", facts=facts)


def ready_reason(out: Outcome) -> Reason:
    cond = out.status.condition(ConditionType.READY)
    assert cond is not None
    return cond.reason


def ready_server() -> tuple[Outcome, DeploymentView]:
    start = started()
    deployment = applied(start)
    out = converge(snapshot(spec(), start.status, pods=(pod(1, ready=True),), deployment=deployment), SETTINGS, never)
    assert out.status.phase is Phase.READY
    return out, deployment


def test_unschedulable_past_the_startup_timeout_uses_no_attempt() -> None:
    start = started()
    long_after = NOW + timedelta(seconds=1800 + SETTINGS.startup_grace_seconds + 3600)
    out = converge(snapshot(spec(), start.status, pods=(pending(),), deployment=applied(start), now=long_after),
                   SETTINGS, never)
    assert [(a.number, a.outcome) for a in out.status.attempts] == [(1, AttemptOutcome.RUNNING)]
    assert out.status.phase is Phase.STARTING and ready_reason(out) is Reason.WAITING_FOR_GPUS
    assert "Insufficient nvidia.com/gpu" in (out.status.message or "")
    assert [e.reason for e in out.events] == [Reason.WAITING_FOR_GPUS]
    again = converge(snapshot(spec(), out.status, pods=(pending(),), deployment=applied(start), now=long_after),
                     SETTINGS, never)
    assert not again.events and again.status.to_wire() == out.status.to_wire()


def test_the_startup_deadline_starts_with_the_engine_container() -> None:
    start = started()
    late = NOW + timedelta(seconds=1800 + SETTINGS.startup_grace_seconds + 60)
    engine_began = (late - timedelta(seconds=10)).strftime("%Y-%m-%dT%H:%M:%SZ")
    slow = pod(1)
    slow = replace(slow, facts=replace(slow.facts, engine_started_at=engine_began))
    out = converge(snapshot(spec(), start.status, pods=(slow,), deployment=applied(start), now=late), SETTINGS, never)
    assert out.status.attempts[0].outcome is AttemptOutcome.RUNNING
    assert not out.events and out.status.phase is Phase.STARTING


def test_ready_follows_the_pods() -> None:
    out, deployment = ready_server()
    gone = converge(snapshot(spec(), out.status, pods=(), deployment=deployment), SETTINGS, never)
    assert gone.status.phase is Phase.STARTING and ready_reason(gone) is Reason.WAITING_FOR_POD
    replacement = converge(snapshot(spec(), gone.status, pods=(pending("kimi-2"),), deployment=deployment),
                           SETTINGS, never)
    assert replacement.status.phase is Phase.STARTING and ready_reason(replacement) is Reason.WAITING_FOR_GPUS
    back = converge(snapshot(spec(), replacement.status, pods=(pod(1, ready=True, name="kimi-2"),),
                             deployment=deployment), SETTINGS, never)
    assert back.status.phase is Phase.READY
    assert [a.outcome for a in back.status.attempts] == [AttemptOutcome.SUCCEEDED]


def test_a_pod_lost_with_its_node_is_not_an_engine_failure() -> None:
    out, deployment = ready_server()
    on_gone_node = replace(pod(1, ready=True), node="deleted-node")
    lost = converge(snapshot(spec(), out.status, pods=(on_gone_node,), deployment=deployment), SETTINGS, never)
    assert lost.status.phase is Phase.STARTING and "deleted-node is gone" in (lost.status.message or "")
    gc_failed = replace(pod(1), phase="Failed", facts=replace(pod(1).facts, disrupted=True))
    after_gc = converge(snapshot(spec(), lost.status, pods=(gc_failed,), deployment=deployment), SETTINGS, never)
    assert [a.outcome for a in after_gc.status.attempts] == [AttemptOutcome.SUCCEEDED]
    assert after_gc.status.phase is Phase.STARTING


def test_image_pull_error_ends_in_a_condition_and_retries_on_spec_change() -> None:
    start = started()
    base = pod(1)
    pulling = replace(base, waiting_reason="ImagePullBackOff", facts=replace(
        base.facts, engine_started_at=None, image="registry.example/vllm:nope",
        waiting_message='Back-off pulling image "registry.example/vllm:nope"'))
    out = converge(snapshot(spec(), start.status, pods=(pulling,), deployment=applied(start)), SETTINGS, never)
    assert out.status.phase is Phase.FAILED and ready_reason(out) is Reason.IMAGE_PULL_FAILED
    assert "registry.example/vllm:nope" in (out.status.message or "")
    assert out.status.attempts[0].outcome is AttemptOutcome.RUNNING, "no attempt used"
    assert out.deployment is not None and out.deployment["spec"]["replicas"] == 0
    assert [e.reason for e in out.events] == [Reason.IMAGE_PULL_FAILED]
    stays = converge(snapshot(spec(), out.status, deployment=applied(out)), SETTINGS, never)
    assert stays.status.phase is Phase.FAILED and not stays.events
    body = spec()
    body["pod"] = {"annotations": {"retry": "1"}}  # e.g. after fixing the registry: any spec edit retries
    retried = converge(snapshot(body, out.status, deployment=applied(out), generation=2), SETTINGS, never)
    assert retried.status.phase is Phase.STARTING
    assert [e.reason for e in retried.events] == [Reason.REOPENED]
    assert retried.deployment is not None and retried.deployment["spec"]["replicas"] == 1


def test_replica_failure_is_surfaced() -> None:
    start = started()
    message = ('pods "kimi-5d8f7c9b4-" is forbidden: exceeded quota: no-pods, requested: pods=1, used: pods=0, '
               'limited: pods=0')
    deployment = replace(applied(start), live=LiveDeployment.of({}, replica_failure=message))
    out = converge(snapshot(spec(), start.status, deployment=deployment), SETTINGS, never)
    assert out.status.phase is Phase.FAILED and ready_reason(out) is Reason.POD_CREATION_FAILED
    assert "exceeded quota" in (out.status.message or "")
    assert out.status.attempts[0].outcome is AttemptOutcome.RUNNING


def _lost_to_node_loss() -> InferenceServerStatus:
    """Status as the operator wrote it before this fix, after both nodes were deleted."""
    start = started()
    st = start.status.model_copy(deep=True)
    effective = st.attempts[0].effective
    st.attempts = [
        Attempt(number=1, effective=effective, started_at="2026-01-01T12:00:00Z", outcome=AttemptOutcome.FAILED,
                failure_kind="Unknown", evidence="terminated"),
        Attempt(number=2, effective=EffectiveStatus.model_validate(effective.to_wire()),
                started_at="2026-01-01T12:01:00Z", outcome=AttemptOutcome.FAILED, failure_kind="Unknown",
                evidence="terminated"),
    ]
    out = Outcome(status=st)
    mark_phase(out, Phase.FAILED, Reason.ATTEMPTS_EXHAUSTED, "attempt 2 failed (Unknown: terminated)",
               "2026-01-01T12:02:00Z", 1)
    return out.status


def test_failed_by_node_loss_in_old_status_is_retried_once() -> None:
    old = _lost_to_node_loss()
    scaled = DeploymentView(template_hash="old", replicas=0)
    out = converge(snapshot(spec(), old, deployment=scaled), SETTINGS, never)
    assert [(a.number, a.outcome) for a in out.status.attempts] == [
        (1, AttemptOutcome.SUPERSEDED), (2, AttemptOutcome.SUPERSEDED), (3, AttemptOutcome.RUNNING)]
    assert out.status.phase is Phase.STARTING
    assert out.deployment is not None and out.deployment["spec"]["replicas"] == 1
    assert [e.reason for e in out.events] == [Reason.REOPENED]
    # an engine that then fails again without a word ends Failed, and stays so (no loop)
    unknown = diagnosed(Failure(FailureKind.UNKNOWN, {}, "terminated"))
    state = out.status
    for step in range(1, 8):
        current = state.attempts[-1].number
        crashed = (pod(current, terminated="Error"),)
        state = converge(snapshot(spec(), state, pods=crashed, deployment=applied(out),
                                  now=NOW + timedelta(minutes=step)), SETTINGS, unknown).status
        if state.phase is Phase.FAILED:
            break
    assert state.phase is Phase.FAILED
    final = converge(snapshot(spec(), state, deployment=applied(out), now=NOW + timedelta(minutes=30)), SETTINGS,
                     never)
    assert final.status.phase is Phase.FAILED and not final.events, "reopened at most once"


def test_a_lookalike_pod_is_ignored() -> None:
    out, deployment = ready_server()
    lookalike = replace(pod(1, terminated="OOMKilled", name="lookalike"), facts=PodFacts())
    after = converge(snapshot(spec(), out.status, pods=(pod(1, ready=True), lookalike), deployment=deployment),
                     SETTINGS, never)
    assert after.status.phase is Phase.READY and not after.events and after.deployment is None


def test_a_pod_of_a_hand_edited_template_is_ignored() -> None:
    out, deployment = ready_server()
    edited = replace(pod(1, terminated="Error", name="edited"), facts=replace(pod(1).facts, engine_digest="0" * 16))
    after = converge(snapshot(spec(), out.status, pods=(pod(1, ready=True), edited), deployment=deployment),
                     SETTINGS, never)
    assert after.status.phase is Phase.READY and not after.events


def test_hand_edit_of_the_deployment_is_reverted_with_an_event() -> None:
    start = started()
    assert start.deployment is not None
    rendered = start.deployment
    live = live_deployment(rendered, CONTAINER_NAME)
    fields = dict(live.fields)
    fields["container.image"] = "other/image:latest"
    edited = replace(applied(start), live=LiveDeployment.of(fields))
    out = converge(snapshot(spec(), start.status, deployment=edited), SETTINGS, never)
    assert out.deployment is not None
    notes = [e for e in out.events if e.reason is Reason.DRIFT_REVERTED]
    assert len(notes) == 1 and "other/image:latest" in notes[0].message
    same = converge(snapshot(spec(), start.status, deployment=replace(applied(start), live=live)), SETTINGS, never)
    assert same.deployment is None


def test_a_missing_weights_claim_is_not_a_gpu_shortage() -> None:
    """kube-scheduler's VolumeBinding message (claim created right after the Deployment) is a wait for the volume;
    the GPU shortage that follows it is WaitingForGPUs."""
    from dataclasses import replace as _replace

    from ctxfit.controller.views.pod_wait import WaitKind, waiting

    from tests.unit.controller.builders import pod

    base = pod(1)
    unscheduled = _replace(base, node=None, facts=_replace(
        base.facts, engine_started_at=None, scheduled="False",
        unschedulable_message='0/8 nodes are available: persistentvolumeclaim "llama-weights" not found.'))
    wait = waiting(unscheduled, {"rtx-0"})
    assert wait is not None and wait.kind is WaitKind.SCHEDULING and "llama-weights" in wait.message
    gpus = _replace(unscheduled, facts=_replace(unscheduled.facts, unschedulable_message=(
        "0/8 nodes are available: 1 Insufficient nvidia.com/gpu, "
        "7 node(s) didn't match Pod's node affinity/selector.")))
    wait = waiting(gpus, {"rtx-0"})
    assert wait is not None and wait.kind is WaitKind.UNSCHEDULABLE and "Insufficient nvidia.com/gpu" in wait.message
