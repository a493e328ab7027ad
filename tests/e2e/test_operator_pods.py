"""Readiness follows the pods, waiting is not failing, drift is reverted, pods are attributed by ownership,
on the local control plane (tests/fixtures/operator-faults.md
sections 2, 3, 4, 5, 7).

Every test runs on its own A100 nodes (a product not in the default pool), added for the test and deleted
afterwards, so deleting or cordoning them, or filling their GPUs, touches no other test.
"""

from __future__ import annotations

import dataclasses
import json
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from ctxfit_cluster import NodeSpec

from .operator_kit import OperatorProcess, ServerClient, condition

A100 = "NVIDIA-A100-SXM4-80GB"
OOM_MESSAGE = "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity of " \
              "79.25 GiB of which 1.20 GiB is free."


def base(name: str = "llama", **spec: Any) -> dict[str, Any]:
    """The shared BASE: Llama-3.1-8B on vLLM, 1 GPU of the test's own product, context 32768."""
    body: dict[str, Any] = {
        "model": {"name": "meta-llama/Llama-3.1-8B-Instruct"},
        "engine": {"kind": "vllm", "version": "0.11.0"},
        "gpu": {"count": 1, "product": A100},
        "context": {"target": 32768},
        "startup": {"timeoutSeconds": 30},
    }
    body.update(spec)
    return {"apiVersion": "ctxfit.io/v1alpha1", "kind": "InferenceServer", "metadata": {"name": name}, "spec": body}


@pytest.fixture
def nodes(cluster: Any, namespace: str) -> Iterator[Callable[[int], list[str]]]:
    """``nodes(n)`` adds n 8-GPU A100 nodes named after the test's namespace; all are deleted afterwards."""
    added: list[str] = []

    def add(count: int) -> list[str]:
        specs = [a100(f"a100-{namespace}-{len(added) + i}") for i in range(count)]
        cluster.add_nodes(specs)
        added.extend(s.name for s in specs)
        return [s.name for s in specs]

    yield add
    if added:
        cluster.kubectl("delete", "node", "--ignore-not-found", "--wait=false", *added, check=False)


def a100(name: str) -> NodeSpec:
    return NodeSpec(name=name, product=A100, gpu_memory_mib=81920, gpu_count=8, compute=(8, 0))


def ready_reason(api: ServerClient, name: str) -> tuple[str, str, str]:
    server = api.get(name)
    cond = condition(server, "Ready")
    return server["status"].get("phase", ""), cond["reason"], cond["message"]


def engine_container(api: ServerClient, name: str) -> dict[str, Any]:
    deployment = api.deployment(name)
    assert deployment is not None
    return dict(deployment["spec"]["template"]["spec"]["containers"][0])


def no_attempt_failed(api: ServerClient, name: str) -> None:
    attempts = api.get(name)["status"]["attempts"]
    assert all(a["outcome"] != "Failed" for a in attempts), attempts
    assert not [e for e in api.events(name) if e["reason"] == "AttemptFailed"]


def test_unschedulable_pod_waits_past_the_startup_timeout(api: ServerClient, cluster: Any, namespace: str,
                                                          nodes: Callable[[int], list[str]], tmp_path: Path) -> None:
    """All GPUs of the product taken: Pending on Insufficient nvidia.com/gpu past the startup timeout uses no
    attempt, status says it waits for GPUs quoting the scheduler; freeing the GPUs makes it Ready."""
    (node,) = nodes(1)
    hog = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "gpu-hog"},
           "spec": {"nodeSelector": {"nvidia.com/gpu.product": A100},
                    "containers": [{"name": "hog", "image": "busybox",
                                    "resources": {"limits": {"nvidia.com/gpu": "8"}}}]}}
    cluster.apply(hog, namespace=namespace)
    api.wait(lambda: api.core.read_namespaced_pod("gpu-hog", namespace).spec.node_name == node, "hog scheduled")
    op = OperatorProcess(Path(cluster.kubeconfig), namespace, tmp_path / "operator.log",
                         CTXFIT_STARTUP_GRACE_SECONDS="0").start()
    try:
        api.create(base())
        started = time.monotonic()
        # the scheduler's first word may be about the weights claim (created right after the Deployment)
        api.wait(lambda: ready_reason(api, "llama")[1] == "WaitingForGPUs"
                 and "Insufficient nvidia.com/gpu" in ready_reason(api, "llama")[2], "WaitingForGPUs")
        phase, _, message = ready_reason(api, "llama")
        assert phase == "Starting"
        assert "Insufficient nvidia.com/gpu" in message and "waiting for GPUs" in message
        time.sleep(max(0.0, 30 + 10 - (time.monotonic() - started)))  # past startupTimeoutSeconds (+0 grace)
        server = api.get("llama")
        assert [(a["number"], a["outcome"]) for a in server["status"]["attempts"]] == [(1, "Running")]
        assert condition(server, "Ready")["reason"] == "WaitingForGPUs"
        assert any(e["reason"] == "WaitingForGPUs" and "Insufficient nvidia.com/gpu" in e["message"]
                   for e in api.events("llama"))
        api.core.delete_namespaced_pod("gpu-hog", namespace, grace_period_seconds=0)
        server = api.wait_phase("llama", "Ready")
        assert [(a["number"], a["outcome"]) for a in server["status"]["attempts"]] == [(1, "Succeeded")]
        no_attempt_failed(api, "llama")
    finally:
        op.stop()
        print(f"--- operator log ---\n{op.log_path.read_text()[-6000:]}")


def test_image_pull_error_names_the_image(api: ServerClient, op: OperatorProcess,
                                          nodes: Callable[[int], list[str]]) -> None:
    """ErrImagePull/ImagePullBackOff -> Failed with a condition naming the image, no attempt used, GPUs
    released; a spec change with a good image retries."""
    nodes(1)
    bad = "sim.invalid/vllm-openai:v0.11.0-missing"
    api.create(base(engine={"kind": "vllm", "version": "0.11.0", "image": bad}))
    server = api.wait_phase("llama", "Failed")
    ready = condition(server, "Ready")
    assert ready["reason"] == "ImagePullFailed" and bad in ready["message"], ready
    assert [a["outcome"] for a in server["status"]["attempts"]] == ["Running"]
    assert any(e["reason"] == "ImagePullFailed" and bad in e["message"] for e in api.events("llama"))
    api.wait(lambda: api.deployment("llama")["spec"]["replicas"] == 0, "scaled to 0 (GPUs released)")
    api.patch_spec("llama", {"engine": {"image": "vllm/vllm-openai:v0.11.0"}})
    server = api.wait_phase("llama", "Ready")
    no_attempt_failed(api, "llama")


def test_whitespace_image_replica_failure_is_surfaced(api: ServerClient, op: OperatorProcess,
                                                      nodes: Callable[[int], list[str]]) -> None:
    """An image with surrounding spaces: the ReplicaSet cannot create the pod (ReplicaFailure) -> a condition
    with the API server's message instead of Starting forever."""
    nodes(1)
    created = api.kubectl_apply(base(engine={"kind": "vllm", "version": "0.11.0",
                                             "image": " vllm/vllm-openai:v0.11.0 "}))
    if created.returncode != 0:  # rejected at admission is also an answer to the user
        assert "image" in created.stderr, created.stderr
        return
    server = api.wait_phase("llama", "Failed")
    ready = condition(server, "Ready")
    assert ready["reason"] == "PodCreationFailed" and "whitespace" in ready["message"], ready
    assert any(e["reason"] == "PodCreationFailed" for e in api.events("llama"))
    no_attempt_failed(api, "llama")


def test_quota_replica_failure_is_surfaced_and_retried_on_spec_change(
        api: ServerClient, op: OperatorProcess, cluster: Any, namespace: str,
        nodes: Callable[[int], list[str]]) -> None:
    """Variant: a ResourceQuota forbids pods -> PodCreationFailed with the quota message; quota lifted and the
    spec edited (a pod annotation: no re-plan) -> Ready, no attempt used."""
    nodes(1)
    cluster.apply({"apiVersion": "v1", "kind": "ResourceQuota", "metadata": {"name": "no-pods"},
                   "spec": {"hard": {"pods": "0"}}}, namespace=namespace)
    api.create(base())
    server = api.wait_phase("llama", "Failed")
    ready = condition(server, "Ready")
    assert ready["reason"] == "PodCreationFailed" and "exceeded quota" in ready["message"], ready
    cluster.kubectl("delete", "resourcequota", "no-pods", "-n", namespace)
    api.patch_spec("llama", {"pod": {"annotations": {"example.com/retry": "1"}}})
    server = api.wait_phase("llama", "Ready")
    assert [(a["number"], a["outcome"]) for a in server["status"]["attempts"]] == [(1, "Succeeded")]
    assert any(e["reason"] == "Reopened" for e in api.events("llama"))


def test_nodes_deleted_then_recreated_recovers(api: ServerClient, op: OperatorProcess, cluster: Any,
                                               nodes: Callable[[int], list[str]]) -> None:
    """Both nodes of the product deleted: not Ready, no attempt used; nodes re-created: Ready again, no spec
    change."""
    names = nodes(2)
    api.create(base())
    api.wait_phase("llama", "Ready")
    generation = api.get("llama")["metadata"]["generation"]
    cluster.kubectl("delete", "node", *names)
    api.wait(lambda: ready_reason(api, "llama")[0] != "Ready", "not Ready once the node is gone", timeout=20)
    # the pod garbage collector removes the orphaned pod (~40 s quarantine); its replacement cannot be scheduled
    api.wait(lambda: ready_reason(api, "llama")[1] == "WaitingForGPUs", "replacement Pending", timeout=120)
    no_attempt_failed(api, "llama")
    cluster.add_nodes([a100(n) for n in names])
    server = api.wait_phase("llama", "Ready", timeout=60)
    assert server["metadata"]["generation"] == generation
    assert [a["outcome"] for a in server["status"]["attempts"]] == ["Succeeded"]
    no_attempt_failed(api, "llama")


def test_cordon_and_delete_pod_is_not_ready_until_replaced(api: ServerClient, op: OperatorProcess, cluster: Any,
                                                           namespace: str, nodes: Callable[[int], list[str]]) -> None:
    """Ready is not latched: cordon the only node and delete the pod -> not Ready while the replacement is
    Pending (quoting the scheduler), Ready again after uncordon."""
    (node,) = nodes(1)
    api.create(base())
    api.wait_phase("llama", "Ready")
    cluster.kubectl("cordon", node)
    for pod in api.pods("llama"):
        api.core.delete_namespaced_pod(pod["metadata"]["name"], namespace)
    api.wait(lambda: ready_reason(api, "llama")[1] == "WaitingForGPUs", "replacement Pending", timeout=30)
    phase, _, message = ready_reason(api, "llama")
    assert phase == "Starting" and "unschedulable" in message, message
    cluster.kubectl("uncordon", node)
    server = api.wait_phase("llama", "Ready")
    assert [a["outcome"] for a in server["status"]["attempts"]] == ["Succeeded"]
    no_attempt_failed(api, "llama")


def test_hand_edits_are_reverted(api: ServerClient, op: OperatorProcess, cluster: Any, namespace: str,
                                 nodes: Callable[[int], list[str]]) -> None:
    """Args and image edited by hand in the Deployment are reverted (with an Event); a deleted Service is back
    within seconds (owned objects are watched, not resynced)."""
    nodes(1)
    api.create(base())
    api.wait_phase("llama", "Ready")
    api.wait(lambda: api.service("llama"), "Service")
    op.settle(2)
    assert not [e for e in api.events("llama") if e["reason"] == "DriftReverted"], "no false drift"
    want = engine_container(api, "llama")
    args = list(want["args"])
    args[args.index("--max-model-len") + 1] = "999999"
    patch = [{"op": "replace", "path": "/spec/template/spec/containers/0/args", "value": args}]
    cluster.kubectl("patch", "deployment", "llama", "-n", namespace, "--type=json", "-p", json.dumps(patch))
    api.wait(lambda: engine_container(api, "llama")["args"] == want["args"], "args reverted", timeout=10)
    api.wait(lambda: any(e["reason"] == "DriftReverted" and "999999 -> 32768" in e["message"]
                         for e in api.events("llama")), "DriftReverted Event for args", timeout=10)
    cluster.kubectl("set", "image", "deployment/llama", "engine=other/image:latest", "-n", namespace)
    api.wait(lambda: engine_container(api, "llama")["image"] == want["image"], "image reverted", timeout=10)
    api.wait(lambda: any(e["reason"] == "DriftReverted" and "other/image:latest" in e["message"]
                         for e in api.events("llama")), "DriftReverted Event for the image", timeout=10)
    selector = dict(api.service("llama")["spec"]["selector"])
    api.core.patch_namespaced_service("llama", namespace, {"spec": {"selector": {"app": "elsewhere"}}})
    api.wait(lambda: api.service("llama")["spec"]["selector"] == selector, "Service selector reverted", timeout=10)
    uid = api.service("llama")["metadata"]["uid"]
    api.core.delete_namespaced_service("llama", namespace)
    deleted = time.monotonic()
    api.wait(lambda: api.service("llama")["metadata"]["uid"] != uid, "Service re-created", timeout=10)
    assert time.monotonic() - deleted < 10
    server = api.wait_phase("llama", "Ready")
    assert server["status"]["contextLength"] == 32768
    assert [a["outcome"] for a in server["status"]["attempts"]] == ["Succeeded"]


def test_lookalike_pod_is_ignored(api: ServerClient, op: OperatorProcess, cluster: Any, namespace: str,
                                  nodes: Callable[[int], list[str]]) -> None:
    """A bare pod carrying the server's label, attempt annotation and a crashing engine's fate does not drive
    the server: it stays Ready, attempts unchanged, the Deployment keeps its replica."""
    nodes(1)
    api.create(base())
    api.wait_phase("llama", "Ready")
    before = api.get("llama")["status"]["attempts"]
    lookalike = {"apiVersion": "v1", "kind": "Pod",
                 "metadata": {"name": "llama-lookalike",
                              "labels": {"ctxfit.io/server": "llama", "app.kubernetes.io/managed-by": "ctxfit",
                                         "sim.ctxfit.io/behavior": "crash"},
                              "annotations": {"ctxfit.io/attempt": "1", "sim.ctxfit.io/message": OOM_MESSAGE,
                                              "sim.ctxfit.io/restart-delay-ms": "500"}},
                 "spec": {"nodeSelector": {"nvidia.com/gpu.product": A100},
                          "containers": [{"name": "engine", "image": "busybox"}]}}
    cluster.apply(lookalike, namespace=namespace)
    api.wait(lambda: any(s.state.waiting or s.state.terminated for s in
                         api.core.read_namespaced_pod("llama-lookalike", namespace).status.container_statuses or []),
             "look-alike crashed")
    op.settle(15)
    server = api.get("llama")
    assert server["status"]["phase"] == "Ready"
    assert server["status"]["attempts"] == before
    assert all(a.get("pod") != "llama-lookalike" for a in server["status"]["attempts"])
    assert api.deployment("llama")["spec"]["replicas"] == 1
    no_attempt_failed(api, "llama")


def test_failed_by_node_loss_before_the_fix_recovers(api: ServerClient, cluster: Any, namespace: str,
                                                     nodes: Callable[[int], list[str]], tmp_path: Path) -> None:
    """A status written by the old operator after node loss (attempts 'failed (Unknown: terminated)', Failed,
    scaled to 0) is not kept failed forever: the operator retries once, with no spec change."""
    nodes(1)
    first = OperatorProcess(Path(cluster.kubeconfig), namespace, tmp_path / "operator-1.log").start()
    try:
        api.create(base())
        server = api.wait_phase("llama", "Ready")
    finally:
        first.stop()
    status = server["status"]
    done = dict(status["attempts"][0])
    lost = [{**done, "number": n, "outcome": "Failed", "failureKind": "Unknown", "evidence": "terminated",
             "explanation": "unrecognized failure: terminated"} for n in (1, 2)]
    message = "attempt 2 failed (Unknown: terminated); no further attempts, scaled to 0"
    conditions = [c if c["type"] != "Ready" else {**c, "status": "False", "reason": "AttemptsExhausted",
                                                  "message": message}
                  for c in status["conditions"]]
    server["status"] = {**status, "phase": "Failed", "message": message, "attempts": lost, "conditions": conditions}
    api.custom.replace_namespaced_custom_object_status("ctxfit.io", "v1alpha1", namespace, "inferenceservers", "llama",
                                                       server)
    api.apps.patch_namespaced_deployment_scale("llama", namespace, {"spec": {"replicas": 0}})
    api.wait(lambda: not api.pods("llama"), "scaled to 0")
    generation = api.get("llama")["metadata"]["generation"]
    second = OperatorProcess(Path(cluster.kubeconfig), namespace, tmp_path / "operator-2.log").start()
    try:
        server = api.wait_phase("llama", "Ready")
    finally:
        second.stop()
    assert server["metadata"]["generation"] == generation
    assert [(a["number"], a["outcome"]) for a in server["status"]["attempts"]] == [
        (1, "Superseded"), (2, "Superseded"), (3, "Succeeded")]
    assert any(e["reason"] == "Reopened" for e in api.events("llama"))


def test_what_the_api_server_stores_is_not_drift(api: ServerClient, namespace: str) -> None:
    """Every golden rendering, created with a server-side dry run (the API server's defaults and canonical
    quantities applied), compares equal to itself: no false drift, so no revert loop."""
    from ctxfit.controller.views.workloads import drifted, live_deployment, owned_service_port
    from ctxfit.render import render_deployment, render_service

    from tests.unit.render.renderkit import CASES, render_input

    for case in CASES:
        inp = dataclasses.replace(render_input(case), namespace=namespace)
        want = render_deployment(inp)
        stored = api.apps.api_client.sanitize_for_serialization(
            api.apps.create_namespaced_deployment(namespace, want, dry_run="All"))
        assert drifted(want, live_deployment(stored, "engine"), "engine") == [], case
        service = render_service(inp)
        stored_service = api.core.api_client.sanitize_for_serialization(
            api.core.create_namespaced_service(namespace, service, dry_run="All"))
        assert owned_service_port(stored_service, inp.name) == inp.spec.serving.port, case
