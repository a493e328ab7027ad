"""The impure shell with fakes: ``reconcile`` write order and error handling, the work queue, pod filter."""

from __future__ import annotations

import asyncio
from collections.abc import Hashable
from types import SimpleNamespace
from typing import Any

import pytest
from ctxfit.controller.app.handlers import on_owned, on_pod
from ctxfit.controller.reconcile import reconcile
from ctxfit.controller.runtime.workqueue import WorkQueue

from tests.unit.controller.builders import RTX
from tests.unit.controller.fakekube import FakeClaims, FakeKube, runtime, server


def test_a_fresh_plan_applies_the_deployment_before_status() -> None:
    kube = FakeKube(server())
    result = reconcile(runtime(kube), "ns", "kimi-k25", (RTX,), ())
    assert kube.calls == ["apply:Deployment", "status", "event:Planned"], "a fresh plan applies first"
    assert result.requeue_after is not None


def test_conflict_writes_nothing_else_and_retries_soon() -> None:
    """With attempts in status, the status write comes first: on a conflict nothing else is written."""
    first = reconcile(runtime(FakeKube(server())), "ns", "kimi-k25", (RTX,), ())
    assert first.stored is not None
    changed = {**first.stored, "spec": {**first.stored["spec"], "context": {"target": 65536}}}
    changed["metadata"] = {**changed["metadata"], "generation": 2}
    kube = FakeKube(changed, conflict=True)
    result = reconcile(runtime(kube), "ns", "kimi-k25", (RTX,), ())
    assert kube.calls == []
    assert result.conflict and result.requeue_after is not None and result.requeue_after < 1
    ok = FakeKube(changed)
    reconcile(runtime(ok), "ns", "kimi-k25", (RTX,), ())
    assert ok.calls[0] == "status" and "apply:Deployment" in ok.calls


def test_api_errors_are_counted_not_raised() -> None:
    rt = runtime(FakeKube(server(), error=500))
    result = reconcile(rt, "ns", "kimi-k25", (RTX,), ())
    assert result.requeue_after is not None
    assert rt.metrics.registry.get_sample_value("ctxfit_reconcile_errors_total", {"reason": "api_500"}) == 1


def test_metrics_follow_status() -> None:
    rt = runtime(FakeKube(server()))
    reconcile(rt, "ns", "kimi-k25", (RTX,), ())
    labels = {"namespace": "ns", "name": "kimi-k25", "engine": "vllm"}
    sample = rt.metrics.registry.get_sample_value
    assert sample("ctxfit_server_context_length_tokens", labels) == 131072
    assert sample("ctxfit_server_target_context_length_tokens", labels) == 131072
    assert sample("ctxfit_server_kv_bytes_per_token", labels) == 70272
    assert sample("ctxfit_server_phase", {**labels, "phase": "Starting"}) == 1
    assert sample("ctxfit_server_phase", {**labels, "phase": "Ready"}) == 0
    assert sample("ctxfit_reconcile_duration_seconds_count", {}) == 1
    rt.metrics.forget("ns", "kimi-k25")
    assert sample("ctxfit_server_context_length_tokens", labels) is None


def test_deleted_server_is_forgotten() -> None:
    assert reconcile(runtime(FakeKube(None)), "ns", "gone", (RTX,), ()).requeue_after is None


def test_work_queue_coalesces_and_serializes() -> None:
    async def scenario() -> list[Hashable]:
        seen: list[Hashable] = []
        running: set[Hashable] = set()

        async def worker(key: Hashable) -> float | None:
            assert key not in running, "two reconciles of one key at once"
            running.add(key)
            seen.append(key)
            await asyncio.sleep(0.02)
            running.discard(key)
            return None

        queue = WorkQueue(worker, concurrency=2)
        for _ in range(5):
            queue.add("a")
        queue.add("b")
        await asyncio.sleep(0.2)
        queue.add_after("c", 0.05)
        queue.add_after("c", 10)  # a later request keeps the earlier timer
        await asyncio.sleep(0.2)
        await queue.close()
        return seen

    seen = asyncio.run(scenario())
    assert seen.count("a") == 2, "one run, plus one for everything that came in meanwhile"
    assert seen.count("b") == 1 and seen.count("c") == 1


@pytest.mark.parametrize("event_type", ["MODIFIED", "DELETED"])
def test_unchanged_pods_enqueue_nothing(event_type: str) -> None:
    added: list[Any] = []
    state = SimpleNamespace(indexes=("pods", "nodes"), pod_views={}, queue=SimpleNamespace(add=added.append))
    body = SimpleNamespace(metadata=SimpleNamespace(uid="u1"))
    pod = {"metadata": {"name": "p", "namespace": "ns", "labels": {"ctxfit.io/server": "kimi"},
                        "annotations": {"ctxfit.io/attempt": "1"}}, "status": {"phase": "Running"}}

    class Body(dict[str, Any]):
        metadata = body.metadata

    async def call(kind: str) -> None:
        await on_pod(event={"type": kind}, body=Body(pod), namespace="ns", labels={"ctxfit.io/server": "kimi"},
                     memo=SimpleNamespace(state=state), pods_by_server=None, gpu_nodes=None)

    asyncio.run(call("ADDED"))
    asyncio.run(call(event_type))
    assert added == [("ns", "kimi")] * (1 if event_type == "MODIFIED" else 2)


def test_deferred_first_pass_starts_the_engine_first() -> None:
    """With ``defer_status_after_create`` a new server's first pass only creates the Deployment."""
    kube = FakeKube(server())
    rt = runtime(kube)
    rt.defer_status_after_create = True
    first = reconcile(rt, "ns", "kimi-k25", (RTX,), (), deployment=None, service_port=None)
    assert kube.calls == ["apply:Deployment"]
    assert first.applied is not None and first.requeue_after == 0
    second = reconcile(rt, "ns", "kimi-k25", (RTX,), (), deployment=first.applied, service_port=None)
    assert kube.calls == ["apply:Deployment", "status", "event:Planned", "apply:Service"], "no second Deployment write"
    assert second.stored is not None and second.applied is None


def test_owned_objects_enqueue_their_server_only_when_what_is_compared_changes() -> None:
    """Owned Deployment/Service events: a status-only change enqueues nothing; a hand edit, a ReplicaFailure or a
    deletion enqueues the server at once (no GET: the view comes from the watched body)."""
    added: list[Any] = []
    state = SimpleNamespace(indexes=("pods", "nodes"), owned_views={}, queue=SimpleNamespace(add=added.append),
                            runtime=runtime(FakeKube(None)))
    deployment: dict[str, Any] = {
        "metadata": {"name": "kimi", "namespace": "ns", "uid": "d1", "generation": 1,
                     "annotations": {"ctxfit.io/pod-template-hash": "h1"},
                     "ownerReferences": [{"apiVersion": "ctxfit.io/v1alpha1", "kind": "InferenceServer",
                                          "name": "kimi", "uid": "server-uid", "controller": True}]},
        "spec": {"replicas": 1, "template": {"spec": {"containers": [
            {"name": "engine", "image": "vllm/vllm-openai:v0.11.0", "args": ["--max-model-len", "32768"]}]}}},
        "status": {"observedGeneration": 1, "replicas": 1}}
    service: dict[str, Any] = {
        "metadata": {"name": "kimi", "namespace": "ns", "uid": "s1"},
        "spec": {"type": "ClusterIP", "selector": {"ctxfit.io/server": "kimi"},
                 "ports": [{"name": "http", "port": 8000, "targetPort": "http"}]}}

    def call(kind: str, obj: dict[str, Any], plural: str) -> None:
        class Body(dict[str, Any]):
            metadata = SimpleNamespace(uid=obj["metadata"]["uid"])

        asyncio.run(on_owned(event={"type": kind}, body=Body(obj), namespace="ns", name="kimi",
                             resource=SimpleNamespace(plural=plural), memo=SimpleNamespace(state=state),
                             pods_by_server=None, gpu_nodes=None))

    call("ADDED", deployment, "deployments")
    deployment["status"] = {"observedGeneration": 1, "replicas": 1, "readyReplicas": 1}
    call("MODIFIED", deployment, "deployments")
    assert len(added) == 1, "a status-only change enqueues nothing"
    deployment["spec"]["template"]["spec"]["containers"][0]["image"] = "other/image:latest"
    call("MODIFIED", deployment, "deployments")
    deployment["status"]["conditions"] = [{"type": "ReplicaFailure", "status": "True", "message": "exceeded quota"}]
    call("MODIFIED", deployment, "deployments")
    call("DELETED", deployment, "deployments")
    assert len(added) == 4
    call("ADDED", service, "services")
    service["metadata"]["resourceVersion"] = "2"
    call("MODIFIED", service, "services")
    assert len(added) == 5
    service["spec"]["selector"]["extra"] = "x"
    call("MODIFIED", service, "services")
    scaled: dict[str, Any] = {
        "metadata": {"name": "kimi", "namespace": "ns", "uid": "so1", "annotations": {
            "autoscaling.keda.sh/paused": "false"}},
        "spec": {"minReplicaCount": 1}, "status": {"conditions": [{"type": "Ready", "status": "True"}]}}
    before = len(added)
    call("ADDED", scaled, "scaledobjects")
    scaled["status"]["lastActiveTime"] = "2026-01-01T00:00:00Z"
    call("MODIFIED", scaled, "scaledobjects")
    assert len(added) == before + 1, "KEDA's own status churn enqueues nothing"
    scaled["metadata"]["annotations"]["autoscaling.keda.sh/paused"] = "true"
    call("MODIFIED", scaled, "scaledobjects")  # paused by hand
    call("DELETED", scaled, "scaledobjects")  # deleted by hand
    assert len(added) == before + 3
    call("DELETED", service, "services")
    assert added == [("ns", "kimi")] * 10


def test_the_cache_claim_comes_before_the_deployment_and_is_read_once_it_exists() -> None:
    """A fresh plan creates the claim without reading it first, and before the Deployment that mounts it: a
    claim of that name that is not the server's ends the pass (``guarded.Foreign``) before any pod could mount
    it."""
    kube = FakeKube(server())
    rt = runtime(kube)
    rt.claims = FakeClaims(kube)
    first = reconcile(rt, "ns", "kimi-k25", (RTX,), ())
    assert kube.calls[:2] == ["apply:PersistentVolumeClaim:kimi-k25-weights", "apply:Deployment"]
    assert first.stored is not None
    again = FakeKube(first.stored)
    rt.claims = FakeClaims(again)
    rt.kube = again
    reconcile(rt, "ns", "kimi-k25", (RTX,), ())
    assert again.calls[0] == "get-claim:kimi-k25-weights"


def test_cached_bodies_are_compact_and_lose_only_managed_fields() -> None:
    from ctxfit.controller.app.lifecycle import slim, unslim

    body = server()
    body["metadata"]["managedFields"] = [{"manager": "ctxfit", "fieldsV1": {"f:status": {}}}]
    kept = slim(body)
    assert isinstance(kept, bytes) and b"managedFields" not in kept
    back = unslim(kept)
    assert back is not None and "managedFields" not in back["metadata"]
    del body["metadata"]["managedFields"]
    assert back == body and unslim(None) is None
