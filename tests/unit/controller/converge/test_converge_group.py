"""Multi-node servers in ``converge``: group scheduling, LeaderWorkerSet, group readiness, step-down."""

from __future__ import annotations

from dataclasses import replace
from datetime import timedelta

from ctxfit.api import InferenceServerSpec
from ctxfit.api.status import ConditionType
from ctxfit.controller.converge import converge
from ctxfit.controller.converge.groups import best_group_node, group_is_ready, group_shortage

from tests.unit.controller.builders import (
    GROUP_KV_FAILURE,
    H100_0,
    H100_1,
    H200,
    NOW,
    SETTINGS,
    applied,
    diagnosed,
    group_spec,
    member,
    never,
    snapshot,
    spec,
)


def test_three_nodes_where_two_exist_stays_planning_with_needed_and_found() -> None:
    body = group_spec(nodes=3, parallelism={"tensor": 8, "pipeline": 3})
    out = converge(snapshot(body, nodes=(H100_0, H100_1, H200)), SETTINGS, never)
    assert out.status.phase is not None and out.status.phase.value == "Planning"
    fits = out.status.condition(ConditionType.BUDGET_FITS)
    assert fits is not None and fits.reason.value == "NoEligibleNode"
    assert fits.message == ("a group needs 3 nodes with NVIDIA-H100-80GB-HBM3 and 8 allocatable nvidia.com/gpu "
                            "each; found 2 (h100-0, h100-1)")
    assert out.deployment is None and out.waiting_for_nodes
    h100_2 = replace(H100_0, name="h100-2")
    later = converge(snapshot(body, out.status, nodes=(H100_0, H100_1, h100_2)), SETTINGS, never)
    assert later.deployment is not None and later.deployment["kind"] == "LeaderWorkerSet"
    assert later.deployment["spec"]["leaderWorkerTemplate"]["size"] == 3


def test_group_shortage_picks_the_product_with_most_nodes() -> None:
    two_nodes = InferenceServerSpec.model_validate(group_spec(gpu={"count": 8}))
    assert group_shortage(two_nodes, [H200, H100_0, H100_1]) is None
    assert best_group_node(two_nodes, [H200, H100_0, H100_1]) == H100_0
    one_each = group_shortage(two_nodes, [H200, H100_0])
    assert one_each is not None and "found 1" in one_each
    single = InferenceServerSpec.model_validate(spec())
    assert group_shortage(single, [H100_0]) is None


def test_plan_renders_a_leaderworkerset_and_a_leader_service() -> None:
    body = group_spec()
    out = converge(snapshot(body, nodes=(H100_0, H100_1)), SETTINGS, never)
    assert out.status.plan is not None and out.status.plan.fits
    lws = out.deployment
    assert lws is not None and lws["kind"] == "LeaderWorkerSet" and lws["spec"]["leaderWorkerTemplate"]["size"] == 2
    again = converge(snapshot(body, out.status, nodes=(H100_0, H100_1), deployment=applied(out)), SETTINGS, never)
    assert again.deployment is None, "an unchanged plan is no write"
    assert again.service is not None
    assert again.service["spec"]["selector"]["leaderworkerset.sigs.k8s.io/worker-index"] == "0"


def test_group_is_ready_only_when_every_pod_is() -> None:
    body = group_spec()
    start = converge(snapshot(body, nodes=(H100_0, H100_1)), SETTINGS, never)
    half = (member(1, "kimi-0", ready=True), member(1, "kimi-0-1"))
    out = converge(snapshot(body, start.status, pods=half, nodes=(H100_0, H100_1), deployment=applied(start)),
                   SETTINGS, never)
    assert out.status.phase is not None and out.status.phase.value == "Starting"
    both = (member(1, "kimi-0", ready=True), member(1, "kimi-0-1", ready=True))
    out = converge(snapshot(body, out.status, pods=both, nodes=(H100_0, H100_1), deployment=applied(start)),
                   SETTINGS, never)
    assert out.status.phase is not None and out.status.phase.value == "Ready"
    assert group_is_ready(InferenceServerSpec.model_validate(body), both)


def test_a_worker_kv_failure_steps_the_whole_group_down_once() -> None:
    body = group_spec(context={"target": 262144, "minimum": 32768, "headroom": 0.25})
    nodes = (H100_0, H100_1)
    start = converge(snapshot(body, nodes=nodes), SETTINGS, never)
    assert start.status.context_length == 262144
    diagnose = diagnosed(GROUP_KV_FAILURE)
    pods = (member(1, "kimi-0"), member(1, "kimi-0-1", terminated="Error"))
    failed = converge(snapshot(body, start.status, pods=pods, nodes=nodes, deployment=applied(start),
                               now=NOW + timedelta(seconds=30)), SETTINGS, diagnose)
    assert diagnose.calls == ["kimi-0-1"], "the worker's termination is read"
    first, second = failed.status.attempts
    assert first.failure_kind == "KVCacheTooSmall"
    assert second.effective.context_length < 262144
    later = NOW + timedelta(seconds=60)
    again = converge(snapshot(body, failed.status, pods=pods, nodes=nodes, deployment=applied(start), now=later),
                     SETTINGS, never)
    assert len(again.status.attempts) == 2, "the stale failed worker is not stepped on twice"
    lws = again.deployment
    assert lws is not None and lws["kind"] == "LeaderWorkerSet"
    for role in ("leaderTemplate", "workerTemplate"):  # one template change: LWS recreates the whole group
        annotations = lws["spec"]["leaderWorkerTemplate"][role]["metadata"]["annotations"]
        assert annotations["ctxfit.io/attempt"] == "2"
        assert annotations["ctxfit.io/context-length"] == str(second.effective.context_length)
