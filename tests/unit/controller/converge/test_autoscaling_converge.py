"""Autoscaling in ``converge``: the ScaledObject, the replica count the operator leaves to KEDA's HPA,
pause while Failed, KEDA absent or turned off, ``status.autoscaling`` and ``status.replicas``."""

from __future__ import annotations

from dataclasses import replace
from datetime import timedelta
from typing import Any

import pytest
from ctxfit.api import InferenceServerSpec
from ctxfit.api.status import ConditionType, InferenceServerStatus
from ctxfit.controller.converge import Outcome, Snapshot, converge
from ctxfit.controller.converge.autoscaling import KEDA_RECHECK_SECONDS, Replicas, up_to_date, wanted_replicas
from ctxfit.controller.converge.refusals import Refusal, Write, fingerprint
from ctxfit.controller.converge.types import Keda, ScalingSnapshot
from ctxfit.controller.settings import Settings
from ctxfit.controller.views.pods import DeploymentView, deployment_view
from ctxfit.controller.views.workloads import ScaledObjectView, scaled_object_view
from ctxfit.recovery import Failure, FailureKind

from tests.unit.controller.builders import (
    GROUP_KV_FAILURE,
    H100_0,
    H100_1,
    KV_FAILURE,
    NOW,
    applied,
    diagnosed,
    group_spec,
    member,
    never,
    pod,
    snapshot,
    spec,
)

KEDA = Settings(backoff_seconds=10, metrics_port=0, health_port=0, keda_enabled=True,
                prometheus_address="http://prometheus.monitoring:9090")
PAUSED = "autoscaling.keda.sh/paused"


def auto_spec(replicas: int | None = None, **autoscaling: Any) -> dict[str, Any]:
    body = spec()
    body["autoscaling"] = {"minReplicas": 1, "maxReplicas": 4, **autoscaling}
    if replicas is not None:
        body["replicas"] = replicas
    return body


def snap(body: dict[str, Any], status: InferenceServerStatus | None = None, *,
         live: ScaledObjectView | None = None, keda: Keda = Keda.INSTALLED, **kwargs: Any) -> Snapshot:
    return replace(snapshot(body, status, **kwargs), scaling=ScalingSnapshot(keda, live))


def stored(obj: dict[str, Any], *, ready: str | None = "True", message: str = "") -> ScaledObjectView:
    """The ScaledObject as the API server and KEDA store it: KEDA's label, finalizer and status added."""
    body = {**obj, "metadata": {**obj["metadata"], "finalizers": ["finalizer.keda.sh"],
                                "labels": {**obj["metadata"]["labels"], "scaledobject.keda.sh/name": "kimi"}},
            "spec": {**obj["spec"], "idleReplicaCount": None},
            "status": {"hpaName": "keda-hpa-kimi",
                       "conditions": [{"type": "Ready", "status": ready, "message": message}] if ready else []}}
    return scaled_object_view(body)


def autoscaling_reason(out: Outcome) -> tuple[str, str] | None:
    cond = out.status.condition(ConditionType.AUTOSCALING)
    return (cond.status, cond.reason.value) if cond is not None else None


def running(body: dict[str, Any], replicas: int = 1) -> tuple[Outcome, DeploymentView, ScaledObjectView]:
    """A server whose Deployment and ScaledObject exist: (the pass that created the ScaledObject, the
    Deployment as the HPA left it with ``replicas``, the ScaledObject as stored and Ready)."""
    first = converge(snap(body), KEDA, never)
    deployment = replace(applied(first), replicas=replicas, current_replicas=replicas)
    second = converge(snap(body, first.status, deployment=deployment), KEDA, never)
    assert second.scaled_object is not None
    return second, deployment, stored(second.scaled_object)


def test_first_pass_creates_the_workload_at_the_initial_count_and_waits_for_it() -> None:
    out = converge(snap(auto_spec(replicas=2)), KEDA, never)
    assert out.deployment is not None and out.deployment["spec"]["replicas"] == 2
    assert out.scaled_object is None, "KEDA checks its scale target at once: the workload comes first"
    assert autoscaling_reason(out) == ("Unknown", "ScaledObjectPending")
    auto = out.status.autoscaling
    assert auto is not None and (auto.min_replicas, auto.max_replicas) == (1, 4)
    assert auto.kv_cache_usage_threshold is not None and 0 < auto.kv_cache_usage_threshold < 1
    assert auto.scaled_object == "kimi" and auto.paused is False and auto.rule


def test_second_pass_creates_the_scaled_object_once() -> None:
    out, deployment, live = running(auto_spec())
    obj = out.scaled_object
    assert obj is not None and obj["metadata"]["annotations"][PAUSED] == "false"
    assert obj["spec"]["scaleTargetRef"] == {"apiVersion": "apps/v1", "kind": "Deployment", "name": "kimi"}
    assert [(e.type, e.reason.value) for e in out.events] == [("Normal", "ScaledObjectCreated")]
    assert out.requeue_after is not None and out.requeue_after <= 10
    assert out.deployment is None
    again = converge(snap(auto_spec(), out.status, deployment=deployment, live=live), KEDA, never)
    assert again.scaled_object is None and not again.events, "what KEDA adds (label, finalizer, status) is no drift"
    assert autoscaling_reason(again) == ("True", "ScaledObjectReady")


def test_replicas_the_hpa_set_are_left_alone_and_reported() -> None:
    body = auto_spec()
    out, deployment, live = running(body)
    scaled = replace(deployment, replicas=3, current_replicas=2)  # the HPA asked for 3, 2 exist so far
    after = converge(snap(body, out.status, deployment=scaled, live=live), KEDA, never)
    assert after.deployment is None, "the operator does not write replicas back"
    auto = after.status.autoscaling
    assert auto is not None and (auto.desired_replicas, auto.current_replicas) == (3, 2)
    assert after.status.replicas == 2


def test_a_drift_revert_keeps_the_hpa_count() -> None:
    body = auto_spec()
    first = converge(snap(body), KEDA, never)
    assert first.deployment is not None
    edited = {**first.deployment, "spec": {**first.deployment["spec"], "replicas": 3}}
    container = edited["spec"]["template"]["spec"]["containers"][0]
    edited["spec"]["template"] = {**edited["spec"]["template"], "spec": {
        **edited["spec"]["template"]["spec"], "containers": [{**container, "args": [*container["args"], "--x"]}]}}
    out = converge(snap(body, first.status, deployment=deployment_view(edited)), KEDA, never)
    assert out.deployment is not None and "replicas" not in out.deployment["spec"]
    assert [e.reason.value for e in out.events if e.reason.value == "DriftReverted"] == ["DriftReverted"]


def test_a_step_down_keeps_the_current_replica_count() -> None:
    body = auto_spec()
    body["context"] = {"target": 262144}
    body["model"]["weightsPerGPU"] = "64Gi"
    start = converge(snap(body), KEDA, never)
    scaled = replace(applied(start), replicas=3, current_replicas=3)
    failed = converge(snap(body, start.status, pods=(pod(1, terminated="Error"),), deployment=scaled,
                           now=NOW + timedelta(seconds=30)), KEDA, diagnosed(KV_FAILURE))
    assert len(failed.status.attempts) == 2
    later = converge(snap(body, failed.status, deployment=scaled, now=NOW + timedelta(seconds=60)), KEDA, never)
    assert later.deployment is not None
    assert later.deployment["spec"]["template"]["metadata"]["annotations"]["ctxfit.io/attempt"] == "2"
    assert "replicas" not in later.deployment["spec"], "attempt 2 is applied without touching the count"
    assert later.status.autoscaling is not None and later.status.autoscaling.kv_cache_usage_threshold is not None


@pytest.mark.parametrize(("have", "want"), [(9, 4), (0, 1)], ids=["above-max", "below-min"])
def test_a_count_outside_the_bounds_goes_to_the_nearest_bound(have: int, want: int) -> None:
    body = auto_spec()
    out, deployment, live = running(body)
    after = converge(snap(body, out.status, deployment=replace(deployment, replicas=have), live=live), KEDA, never)
    assert after.deployment is not None and after.deployment["spec"]["replicas"] == want


def failed_server(body: dict[str, Any]) -> tuple[Outcome, DeploymentView, ScaledObjectView]:
    out, deployment, live = running(body, replicas=3)
    weights = Failure(FailureKind.WEIGHTS_DO_NOT_FIT, {}, "CUDA out of memory while loading weights")
    failed = converge(snap(body, out.status, pods=(pod(1, terminated="Error"),), deployment=deployment, live=live),
                      KEDA, diagnosed(weights))
    return failed, deployment, live


def test_a_failed_server_pauses_its_scaled_object_and_releases_the_gpus() -> None:
    failed, _, _ = failed_server(auto_spec())
    assert failed.status.phase is not None and failed.status.phase.value == "Failed"
    assert failed.scaled_object is not None and failed.scaled_object["metadata"]["annotations"][PAUSED] == "true"
    assert failed.deployment is not None and failed.deployment["spec"]["replicas"] == 0
    assert autoscaling_reason(failed) == ("False", "AutoscalingPaused")
    assert "AutoscalingPaused" in [e.reason.value for e in failed.events]
    assert failed.status.autoscaling is not None and failed.status.autoscaling.paused is True
    assert failed.status.autoscaling.desired_replicas == 0, "the count written with the pause, not the HPA's 3"


def test_desired_replicas_is_the_count_the_operator_writes_in_the_pass() -> None:
    """Create, resume and a count outside the bounds: status shows what the workload is set to, not the old count."""
    created = converge(snap(auto_spec(replicas=2)), KEDA, never)
    assert created.status.autoscaling is not None and created.status.autoscaling.desired_replicas == 2
    out, deployment, live = running(auto_spec())
    clamped = converge(snap(auto_spec(), out.status, deployment=replace(deployment, replicas=9), live=live),
                       KEDA, never)
    assert clamped.status.autoscaling is not None and clamped.status.autoscaling.desired_replicas == 4


def test_a_fixed_spec_resumes_autoscaling_at_the_initial_count() -> None:
    body = auto_spec(replicas=2)
    failed, deployment, _ = failed_server(body)
    assert failed.scaled_object is not None
    paused_live = stored(failed.scaled_object)
    body["context"] = {"target": 65536}
    fixed = converge(snap(body, failed.status, deployment=replace(deployment, replicas=0, current_replicas=0),
                          live=paused_live, generation=2), KEDA, never)
    assert fixed.deployment is not None and fixed.deployment["spec"]["replicas"] == 2
    assert fixed.scaled_object is not None and fixed.scaled_object["metadata"]["annotations"][PAUSED] == "false"
    assert "AutoscalingResumed" in [e.reason.value for e in fixed.events]
    assert fixed.status.autoscaling is not None and fixed.status.autoscaling.desired_replicas == 2
    assert fixed.status.autoscaling.paused is False


def test_a_refused_resume_says_paused_not_resumed() -> None:
    """The API server refused the patch that resumes the ScaledObject: it is still paused, and status says so."""
    body = auto_spec(replicas=2)
    failed, deployment, _ = failed_server(body)
    assert failed.scaled_object is not None
    paused_live = stored(failed.scaled_object)
    body["context"] = {"target": 65536}
    at_zero = replace(deployment, replicas=0, current_replicas=0)
    fixed = converge(snap(body, failed.status, deployment=at_zero, live=paused_live, generation=2), KEDA, never)
    refusal = "the API server refused ScaledObject kimi (422): admission webhook denied the request"
    book = (Refusal(Write.SCALED_OBJECT, fingerprint(fixed.scaled_object), 0.0, refusal),)  # its backoff over
    again = converge(replace(snap(body, fixed.status, deployment=replace(at_zero, replicas=2), live=paused_live,
                                  generation=2), refusals=book), KEDA, never)
    assert again.scaled_object is not None, "the resume is tried again (after the backoff)"
    assert autoscaling_reason(again) == ("False", "ObjectRejected")
    cond = again.status.condition(ConditionType.AUTOSCALING)
    assert cond is not None and cond.message == refusal
    assert again.status.autoscaling is not None and again.status.autoscaling.paused is True
    assert not [e for e in again.events if e.reason.value == "AutoscalingResumed"]


def test_an_invalid_spec_pauses_a_live_scaled_object() -> None:
    body = auto_spec()
    out, deployment, live = running(body)
    body["engine"]["kind"] = "tgi"
    bad = converge(snap(body, out.status, deployment=deployment, live=live), KEDA, never)
    assert bad.scale_to_zero and bad.scaled_object_pause
    assert autoscaling_reason(bad) == ("False", "AutoscalingPaused")
    assert bad.status.autoscaling is not None and bad.status.autoscaling.paused is True, \
        "status says paused, as the condition and the Event do"
    assert bad.status.autoscaling.desired_replicas == 0, "scaled to 0 with the pause"
    still_bad = converge(snap(body, bad.status, deployment=replace(deployment, replicas=0, current_replicas=0),
                              live=replace(live, annotations={**live.annotations, PAUSED: "true"})), KEDA, never)
    assert not still_bad.scaled_object_pause and not still_bad.events
    assert still_bad.status.autoscaling is not None and still_bad.status.autoscaling.paused is True
    assert autoscaling_reason(still_bad) == ("False", "AutoscalingPaused")


def test_a_server_that_fails_without_a_plan_says_paused_in_status() -> None:
    """Failed with nothing that fits any more (a new spec): the live ScaledObject is paused, and status says so."""
    body = auto_spec()
    out, deployment, live = running(body, replicas=2)
    body["model"]["weightsPerGPU"] = "200Gi"
    failed = converge(snap(body, out.status, deployment=deployment, live=live, generation=2), KEDA, never)
    assert failed.status.phase is not None and failed.status.phase.value == "Failed"
    assert failed.scaled_object_pause and autoscaling_reason(failed) == ("False", "AutoscalingPaused")
    assert failed.status.autoscaling is not None and failed.status.autoscaling.paused is True
    assert failed.scale_to_zero and failed.status.autoscaling.desired_replicas == 0


def test_keda_not_installed_is_a_condition_looked_at_again_every_minute() -> None:
    body = auto_spec()
    first = converge(snap(body, keda=Keda.ABSENT), KEDA, never)
    second = converge(snap(body, first.status, deployment=applied(first), keda=Keda.ABSENT), KEDA, never)
    assert second.scaled_object is None
    assert autoscaling_reason(second) == ("False", "KEDANotInstalled")
    cond = second.status.condition(ConditionType.AUTOSCALING)
    assert cond is not None and cond.message.startswith("KEDA not installed")
    warnings = [(e.type, e.reason.value) for e in [*first.events, *second.events] if e.type == "Warning"]
    assert warnings == [("Warning", "KEDANotInstalled")], "one Warning, not one per pass"
    assert second.requeue_after is not None and second.requeue_after <= KEDA_RECHECK_SECONDS
    third = converge(snap(body, second.status, deployment=applied(first), keda=Keda.ABSENT), KEDA, never)
    assert not third.events, "the Warning is posted once, not on every look"
    assert third.requeue_after is not None and third.requeue_after >= 1, "no retry storm"


def test_keda_turned_off_in_the_operator_is_a_condition() -> None:
    body = auto_spec()
    first = converge(snap(body, keda=Keda.DISABLED), KEDA, never)
    assert autoscaling_reason(first) == ("False", "KEDADisabled")
    assert first.deployment is not None and first.deployment["spec"]["replicas"] == 1


def test_keda_not_ready_is_surfaced_with_its_message() -> None:
    body = auto_spec()
    out, deployment, live = running(body)
    refused = replace(live, ready="False", ready_message="ScaledObject doesn't have correct triggers specification")
    after = converge(snap(body, out.status, deployment=deployment, live=refused), KEDA, never)
    assert autoscaling_reason(after) == ("False", "ScaledObjectNotReady")
    assert [(e.type, e.reason.value) for e in after.events] == [("Warning", "ScaledObjectNotReady")]


def test_autoscaling_removed_deletes_the_scaled_object_then_clears_status() -> None:
    body = auto_spec()
    out, deployment, live = running(body, replicas=3)
    plain = spec()
    removing = converge(snap(plain, out.status, deployment=deployment, live=live, generation=2), KEDA, never)
    assert removing.scaled_object_delete
    assert [e.reason.value for e in removing.events] == ["ScaledObjectDeleted"]
    assert removing.status.autoscaling is not None, "kept until the ScaledObject is gone"
    assert removing.deployment is not None and removing.deployment["spec"]["replicas"] == 1, "spec.replicas again"
    gone = converge(snap(plain, removing.status, deployment=replace(deployment, replicas=1), generation=2), KEDA, never)
    assert not gone.scaled_object_delete and gone.status.autoscaling is None
    assert gone.status.condition(ConditionType.AUTOSCALING) is None


REPLICA_RULES = [
    # (autoscaling, failed, have replicas, live paused) -> Replicas
    (None, False, 3, False, Replicas(None)),
    (None, True, 3, False, Replicas(0)),
    ({}, True, 3, False, Replicas(0)),
    ({}, False, None, False, Replicas(2)),
    ({}, False, 3, False, Replicas(3, write=False)),
    ({}, False, 0, True, Replicas(2)),
    ({}, False, 0, False, Replicas(1)),
    ({}, False, 7, False, Replicas(4)),
    ({"minReplicas": 0, "scaleToZero": True}, False, 0, False, Replicas(0, write=False)),
]


@pytest.mark.parametrize(("autoscaling", "failed", "have", "paused", "want"), REPLICA_RULES,
                         ids=["plain", "plain-failed", "failed", "create", "hpa-owned", "resume", "below-min",
                              "above-max", "scaled-to-zero"])
def test_replica_rules(autoscaling: dict[str, Any] | None, failed: bool, have: int | None, paused: bool,
                       want: Replicas) -> None:
    body = spec()
    body["replicas"] = 2
    if autoscaling is not None:
        body["autoscaling"] = {"minReplicas": 1, "maxReplicas": 4, **autoscaling}
    parsed = InferenceServerSpec.model_validate(body)
    view = DeploymentView("h", have) if have is not None else None
    live = ScaledObjectView({}, {PAUSED: "true" if paused else "false"}, {})
    assert wanted_replicas(parsed, view, failed, ScalingSnapshot(Keda.INSTALLED, live)) == want


@pytest.mark.parametrize(("value", "paused"), [("true", True), ("false", False), ("0", False), ("yes", True)])
def test_paused_reads_the_annotation_as_keda_does(value: str, paused: bool) -> None:
    """KEDA ``getBoolAnnotation``: ``strconv.ParseBool``; a value it cannot parse counts as true."""
    assert ScaledObjectView({}, {PAUSED: value}, {}).paused is paused
    assert not ScaledObjectView({}, {}, {}).paused


def test_up_to_date_compares_what_ctxfit_renders() -> None:
    _, _, live = running(auto_spec())
    rendered = {"metadata": {"labels": {"ctxfit.io/server": "kimi"}, "annotations": {PAUSED: "false"}},
                "spec": dict(live.spec)}
    assert up_to_date(rendered, live)
    rendered["spec"]["maxReplicaCount"] = 5
    assert not up_to_date(rendered, live)
    assert not up_to_date({**rendered, "metadata": {"annotations": {PAUSED: "true"}}}, live)


def test_a_multi_node_server_scales_its_leaderworkerset_and_keeps_the_group_count() -> None:
    """``spec.nodes`` > 1: the ScaledObject targets the LeaderWorkerSet; a new configuration keeps its replicas."""
    body = group_spec(autoscaling={"minReplicas": 1, "maxReplicas": 2})
    nodes = (H100_0, H100_1)
    first = converge(snap(body, nodes=nodes), KEDA, never)
    assert first.deployment is not None and first.deployment["kind"] == "LeaderWorkerSet"
    assert first.deployment["spec"]["replicas"] == 1
    groups = replace(applied(first), replicas=2, current_replicas=2)  # the HPA asked for a second group
    second = converge(snap(body, first.status, nodes=nodes, deployment=groups), KEDA, never)
    assert second.deployment is None
    assert second.scaled_object is not None
    assert second.scaled_object["spec"]["scaleTargetRef"] == {
        "apiVersion": "leaderworkerset.x-k8s.io/v1", "kind": "LeaderWorkerSet", "name": "kimi"}
    failed = converge(snap(body, second.status, nodes=nodes, deployment=groups,
                           pods=(member(1, "kimi-0", terminated="Error"),), now=NOW + timedelta(seconds=30)),
                      KEDA, diagnosed(GROUP_KV_FAILURE))
    assert len(failed.status.attempts) == 2
    later = converge(snap(body, failed.status, nodes=nodes, deployment=groups, now=NOW + timedelta(seconds=90)),
                     KEDA, never)
    assert later.deployment is not None and later.deployment["kind"] == "LeaderWorkerSet"
    assert "replicas" not in later.deployment["spec"], "the new configuration keeps the HPA's group count"
