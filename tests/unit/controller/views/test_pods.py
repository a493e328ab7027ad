"""Pod -> facts -> waiting reason / ownership (``views/pod_facts.py``), table-driven on Pod dicts shaped like the
API server's (kubelet and scheduler wording of Kubernetes 1.34)."""

from __future__ import annotations

import copy
from typing import Any

import pytest
from ctxfit.controller.views.pod_facts import engine_digest
from ctxfit.controller.views.pod_wait import WaitKind, lost, owned_by, waiting
from ctxfit.controller.views.pods import pod_view

NODES = {"a100-0", "a100-1"}
UNSCHEDULABLE = ("0/9 nodes are available: 1 Insufficient nvidia.com/gpu, 8 node(s) didn't match Pod's node "
                 "affinity/selector. preemption: 0/9 nodes are available: 1 No preemption victims found for incoming "
                 "pod, 8 Preemption is not helpful for scheduling.")
TAINTED = ("0/3 nodes are available: 3 node(s) had untolerated taint {gpu: reserved}. preemption: 0/3 nodes are "
           "available: 3 Preemption is not helpful for scheduling.")
CORDONED = ("0/1 nodes are available: 1 node(s) were unschedulable. preemption: 0/1 nodes are available: "
            "1 Preemption is not helpful for scheduling.")


def pod(**over: Any) -> dict[str, Any]:
    """A Deployment-owned engine pod (ReplicaSet llama-7d9c5b8f6), Pending, unscheduled; ``over`` patches it."""
    body: dict[str, Any] = {
        "metadata": {"name": "llama-7d9c5b8f6-x2x4z", "namespace": "ns", "creationTimestamp": "2026-01-01T12:00:00Z",
                     "labels": {"ctxfit.io/server": "llama", "pod-template-hash": "7d9c5b8f6"},
                     "annotations": {"ctxfit.io/attempt": "1"},
                     "ownerReferences": [{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "llama-7d9c5b8f6",
                                          "uid": "u-rs", "controller": True, "blockOwnerDeletion": True}]},
        "spec": {"containers": [{"name": "engine", "image": "vllm/vllm-openai:v0.11.0", "command": ["vllm"],
                                 "args": ["serve", "--max-model-len", "32768"]}]},
        "status": {"phase": "Pending"},
    }
    for path, value in over.items():
        node = body
        keys = path.split("__")
        for key in keys[:-1]:
            node = node.setdefault(key, {})
        node[keys[-1]] = value
    return body


def scheduled(node: str = "a100-0", **status: Any) -> dict[str, Any]:
    return pod(spec__nodeName=node, status={"phase": "Pending", "conditions": [
        {"type": "PodScheduled", "status": "True"}], **status})


def engine_waiting(reason: str, message: str = "", image: str = "vllm/vllm-openai:v0.11.0") -> dict[str, Any]:
    return scheduled(containerStatuses=[{"name": "engine", "image": image, "ready": False, "restartCount": 0,
                                         "state": {"waiting": {"reason": reason, "message": message}}}])


def running(started: str = "2026-01-01T12:05:00Z", ready: bool = False) -> dict[str, Any]:
    return scheduled(phase="Running", containerStatuses=[
        {"name": "engine", "ready": ready, "restartCount": 0, "state": {"running": {"startedAt": started}}}])


WAITING = [
    pytest.param(pod(status={"phase": "Pending", "conditions": [
        {"type": "PodScheduled", "status": "False", "reason": "Unschedulable", "message": UNSCHEDULABLE}]}),
        WaitKind.UNSCHEDULABLE, "Insufficient nvidia.com/gpu", id="insufficient-gpu"),
    pytest.param(pod(status={"phase": "Pending", "conditions": [
        {"type": "PodScheduled", "status": "False", "reason": "Unschedulable", "message": TAINTED}]}),
        WaitKind.UNSCHEDULABLE, "untolerated taint", id="taint"),
    pytest.param(pod(status={"phase": "Pending", "conditions": [
        {"type": "PodScheduled", "status": "False", "reason": "Unschedulable", "message": CORDONED}]}),
        WaitKind.UNSCHEDULABLE, "were unschedulable", id="cordoned"),
    pytest.param(pod(), WaitKind.SCHEDULING, "waiting to be scheduled", id="not-yet-scheduled"),
    pytest.param(engine_waiting("ContainerCreating"), WaitKind.CREATING, "ContainerCreating", id="pulling"),
    pytest.param(scheduled(), WaitKind.CREATING, "Pending", id="scheduled-no-status-yet"),
    pytest.param(engine_waiting("CreateContainerConfigError", 'secret "db-pass" not found'), WaitKind.CREATING,
                 'CreateContainerConfigError: secret "db-pass" not found', id="missing-secret"),
    pytest.param(engine_waiting("ErrImagePull", 'failed to pull and unpack image "registry.example/x:1"',
                                image="registry.example/x:1"), WaitKind.IMAGE_ERROR, "registry.example/x:1",
                 id="err-image-pull"),
    pytest.param(engine_waiting("ImagePullBackOff", 'Back-off pulling image "vllm/vllm-openai:v0.11.0"'),
                 WaitKind.IMAGE_ERROR, "ImagePullBackOff", id="image-pull-backoff"),
    pytest.param(engine_waiting("InvalidImageName", 'Failed to apply default image tag "Bad Image": couldn\'t parse'),
                 WaitKind.IMAGE_ERROR, "InvalidImageName", id="invalid-image-name"),
    pytest.param(scheduled(initContainerStatuses=[{"name": "fetch-weights", "ready": False, "restartCount": 0,
                                                   "state": {"running": {"startedAt": "2026-01-01T12:00:05Z"}}}],
                           containerStatuses=[{"name": "engine", "ready": False, "restartCount": 0,
                                               "state": {"waiting": {"reason": "PodInitializing"}}}]),
                 WaitKind.INITIALIZING, "init container fetch-weights", id="init-running"),
    pytest.param(scheduled(initContainerStatuses=[{"name": "fetch-weights", "ready": False, "restartCount": 0,
                                                   "state": {"waiting": {"reason": "PodInitializing"}}}]),
                 WaitKind.INITIALIZING, "is PodInitializing", id="init-waiting"),
    pytest.param(running() | {"spec": {**running()["spec"], "nodeName": "gone-0"}}, WaitKind.NODE_LOST, "gone-0",
                 id="node-deleted"),
    pytest.param(scheduled(phase="Failed", conditions=[{"type": "DisruptionTarget", "status": "True",
                                                        "reason": "DeletionByPodGC"}]),
                 WaitKind.NODE_LOST, "disrupted", id="pod-gc"),
    pytest.param(scheduled(phase="Failed", reason="Evicted"), WaitKind.NODE_LOST, "disrupted", id="evicted"),
]


@pytest.mark.parametrize(("body", "kind", "needle"), WAITING)
def test_waiting_reason(body: dict[str, Any], kind: WaitKind, needle: str) -> None:
    view = pod_view(body)
    wait = waiting(view, NODES)
    assert wait is not None and wait.kind is kind
    assert needle in wait.message, wait.message


@pytest.mark.parametrize("body", [
    pytest.param(running(), id="engine-running-unready"),
    pytest.param(running(ready=True), id="ready"),
    pytest.param(scheduled(phase="Running", initContainerStatuses=[
        {"name": "sidecar", "started": True, "ready": True,
         "state": {"running": {"startedAt": "2026-01-01T12:00:01Z"}}},
        {"name": "fetch", "ready": False, "state": {"terminated": {"exitCode": 0, "reason": "Completed"}}}],
        containerStatuses=[{"name": "engine", "ready": False,
                            "state": {"running": {"startedAt": "2026-01-01T12:01:00Z"}}}]),
        id="init-done-sidecar-running"),
])
def test_engine_started_is_not_waiting(body: dict[str, Any]) -> None:
    view = pod_view(body)
    assert waiting(view, NODES) is None
    assert view.facts.engine_started_at is not None


def test_startup_clock_starts_with_the_engine_container_not_the_pod() -> None:
    assert pod_view(pod()).facts.engine_started_at is None
    assert pod_view(engine_waiting("ErrImagePull")).facts.engine_started_at is None
    assert pod_view(running("2026-01-01T12:30:00Z")).facts.engine_started_at == "2026-01-01T12:30:00Z"
    crashed = scheduled(containerStatuses=[{
        "name": "engine", "restartCount": 2, "state": {"waiting": {"reason": "CrashLoopBackOff"}},
        "lastState": {"terminated": {"exitCode": 1, "startedAt": "2026-01-01T12:10:00Z"}}}])
    assert pod_view(crashed).facts.engine_started_at == "2026-01-01T12:10:00Z"


def test_a_lost_pod_is_not_an_engine_failure() -> None:
    gc = pod_view(scheduled(phase="Failed", conditions=[{"type": "DisruptionTarget", "status": "True",
                                                         "reason": "DeletionByPodGC"}]))
    assert not gc.failed and lost(gc, NODES)
    plain_failed = pod_view(scheduled(phase="Failed"))
    assert plain_failed.failed and not lost(plain_failed, NODES)
    crashed = running()
    crashed["status"]["containerStatuses"][0]["state"] = {"terminated": {"exitCode": 1, "reason": "Error"}}
    assert pod_view(crashed).failed


DIGEST = engine_digest(pod()["spec"]["containers"][0])


@pytest.mark.parametrize(("mutate", "owned"), [
    pytest.param(lambda b: None, True, id="owned-current"),
    pytest.param(lambda b: b["metadata"].pop("ownerReferences"), False, id="bare-lookalike"),
    pytest.param(lambda b: b["metadata"]["ownerReferences"][0].update(kind="StatefulSet"), False, id="other-kind"),
    pytest.param(lambda b: b["metadata"]["ownerReferences"][0].update(controller=False), False, id="not-controller"),
    pytest.param(lambda b: b["metadata"]["ownerReferences"][0].update(name="other-7d9c5b8f6"), False,
                 id="other-deployment"),
    pytest.param(lambda b: b["metadata"]["labels"].pop("pod-template-hash"), False, id="no-template-label"),
    pytest.param(lambda b: b["spec"]["containers"][0].update(image="other/image:latest"), False, id="hand-set-image"),
    pytest.param(lambda b: b["spec"]["containers"][0]["args"].__setitem__(2, "999999"), False, id="hand-edited-args"),
])
def test_pods_are_attributed_by_ownership_and_template(mutate: Any, owned: bool) -> None:
    body = copy.deepcopy(pod())
    mutate(body)
    assert owned_by(pod_view(body), "llama", DIGEST) is owned
