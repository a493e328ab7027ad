"""Multi-node InferenceServers against the local control plane and the real LWS controller.

The LeaderWorkerSet controller (sigs.k8s.io/lws, built by hack/lws-bins.sh) is started once per session
by ``hack/addons_lws.py`` with its webhooks on 127.0.0.1; kwok runs the leader and worker pods like any
other engine pod (hack/README.md). Skipped when the binary is not built.
"""

from __future__ import annotations

from typing import Any

from kubernetes.client import CustomObjectsApi

from .operator_kit import GPU_PRODUCT_LABEL, LWS, OperatorProcess, ServerClient, condition, group, manifest, with_sim


def test_kimi_2x8_h100_group_ready_on_two_nodes(op: OperatorProcess, api: ServerClient,
                                                groups: CustomObjectsApi) -> None:
    """kimi-k25-2x8-h100.yaml: plans, a LeaderWorkerSet of size 2, leader and worker on two H100s, Ready."""
    api.create(manifest("kimi-k25-2x8-h100.yaml"))
    server = api.wait_phase("kimi-k25-2x8", "Ready", timeout=120)
    assert server["status"]["contextLength"] == 131072
    lws = group(groups, api.namespace, "kimi-k25-2x8")
    assert lws is not None and lws["spec"]["leaderWorkerTemplate"]["size"] == 2
    assert api.deployment("kimi-k25-2x8", missing_ok=True) is None
    pods = api.pods("kimi-k25-2x8")
    roles = sorted(p["metadata"]["labels"]["ctxfit.io/role"] for p in pods)
    assert roles == ["leader", "worker"]
    assert {p["metadata"]["labels"]["leaderworkerset.sigs.k8s.io/worker-index"] for p in pods} == {"0", "1"}
    nodes = {p["spec"]["nodeName"] for p in pods}
    assert len(nodes) == 2, f"leader and worker share a node: {nodes}"
    for node in nodes:
        assert api.node(node)["metadata"]["labels"][GPU_PRODUCT_LABEL] == "NVIDIA-H100-80GB-HBM3"
    env = {e["name"] for p in pods for e in p["spec"]["containers"][0].get("env", [])}
    assert {"LWS_LEADER_ADDRESS", "LWS_WORKER_INDEX", "LWS_GROUP_SIZE"} <= env, "LWS's pod webhook ran"
    service = api.service("kimi-k25-2x8")
    assert service["spec"]["selector"]["leaderworkerset.sigs.k8s.io/worker-index"] == "0"


def test_three_nodes_where_two_exist_stays_planning(op: OperatorProcess, api: ServerClient,
                                                     groups: CustomObjectsApi) -> None:
    obj = manifest("kimi-k25-2x8-h100.yaml")
    obj["spec"]["nodes"] = 3
    obj["spec"]["parallelism"] = {"tensor": 8, "pipeline": 3}
    api.create(obj)
    server = api.wait_phase("kimi-k25-2x8", "Planning", timeout=60)
    fits = condition(server, "BudgetFits")
    assert fits["reason"] == "NoEligibleNode"
    assert "a group needs 3 nodes with NVIDIA-H100-80GB-HBM3" in fits["message"] and "found 2" in fits["message"]
    op.settle(3)
    assert group(groups, api.namespace, "kimi-k25-2x8") is None and not api.pods("kimi-k25-2x8")


KV_MESSAGE = (
    "ValueError: To serve at least one request with the models's max seq len (262144), (17.16 GiB KV cache is "
    "needed, which is larger than the available KV cache memory (11.70 GiB). Based on the available memory, the "
    "estimated maximum model length is 178752. Try increasing `gpu_memory_utilization` or decreasing "
    "`max_model_len` when initializing the engine."
)


def kimi_2x8_262k(**sim: Any) -> dict[str, Any]:
    obj = manifest("kimi-k25-2x8-h100.yaml")
    obj["spec"]["context"]["target"] = 262144
    return with_sim(obj, "crash", message=KV_MESSAGE, **sim)


def test_group_kv_failure_steps_the_whole_group_down_once(op: OperatorProcess, api: ServerClient,
                                                           groups: CustomObjectsApi) -> None:
    """The group's engine says 'estimated maximum model length is 178752' -> one step-down, the group is Ready."""
    api.create(kimi_2x8_262k(fail_if=("ctxfit.io/context-length", 178752)))
    server = api.wait_phase("kimi-k25-2x8", "Ready", timeout=180)
    attempts = server["status"]["attempts"]
    assert [a["outcome"] for a in attempts] == ["Failed", "Succeeded"]
    assert attempts[0]["failureKind"] == "KVCacheTooSmall"
    assert attempts[1]["effective"]["contextLength"] == server["status"]["contextLength"] <= 178752
    lws = group(groups, api.namespace, "kimi-k25-2x8")
    assert lws is not None
    for role in ("leaderTemplate", "workerTemplate"):
        annotations = lws["spec"]["leaderWorkerTemplate"][role]["metadata"]["annotations"]
        assert annotations["ctxfit.io/attempt"] == "2"
    # the LWS controller may recreate the new group once more right after it was Ready (an attempt-1 pod still
    # terminating counts as a deleted pod of the group): between two incarnations the group has no live pods
    pods = api.wait(lambda: len(live := api.pods("kimi-k25-2x8")) == 2 and live, "the group's two pods", timeout=60)
    assert sorted(p["metadata"]["annotations"]["ctxfit.io/attempt"] for p in pods) == ["2", "2"]


def test_group_that_keeps_failing_ends_failed_within_the_budget(op: OperatorProcess, api: ServerClient,
                                                                groups: CustomObjectsApi) -> None:
    """A group whose engine fails at every size is recreated at most ``spec.attempts`` times, then Failed."""
    obj = kimi_2x8_262k()
    obj["spec"]["attempts"] = 3
    api.create(obj)
    server = api.wait_phase("kimi-k25-2x8", "Failed", timeout=240)
    assert 1 <= len(server["status"]["attempts"]) <= 3
    assert condition(server, "Ready")["status"] == "False"
    lws = api.wait(lambda: (g := group(groups, api.namespace, "kimi-k25-2x8")) and g["spec"]["replicas"] == 0
                   and g, "the group scaled to zero", timeout=60)
    assert lws["spec"]["replicas"] == 0


def test_hand_edit_of_the_group_is_reverted(op: OperatorProcess, api: ServerClient, groups: CustomObjectsApi) -> None:
    """A hand edit of the LeaderWorkerSet (worker command line, group size) is drift: applied again, one Event."""
    api.create(manifest("kimi-k25-2x8-h100.yaml"))
    api.wait_phase("kimi-k25-2x8", "Ready", timeout=120)
    rendered = group(groups, api.namespace, "kimi-k25-2x8")
    assert rendered is not None
    op.settle(6)  # > one resync (5 s): the stored LeaderWorkerSet, with the webhook's defaults, is not drift
    assert not [e for e in api.events("kimi-k25-2x8") if e["reason"] == "DriftReverted"]
    worker = "/spec/leaderWorkerTemplate/workerTemplate/spec/containers/0/args"
    groups.patch_namespaced_custom_object(
        *LWS[:2], api.namespace, LWS[2], "kimi-k25-2x8",
        [{"op": "replace", "path": worker, "value": ["exec sleep infinity"]},
         {"op": "replace", "path": "/spec/leaderWorkerTemplate/size", "value": 3}],
        _content_type="application/json-patch+json")
    reverted = api.wait(lambda: [e for e in api.events("kimi-k25-2x8") if e["reason"] == "DriftReverted"],
                        "a DriftReverted Event", timeout=60)
    assert reverted[0]["type"] == "Warning"
    assert reverted[0]["message"].startswith("reverted a change to LeaderWorkerSet kimi-k25-2x8: worker args ")
    assert "exec sleep infinity -> exec ray start" in reverted[0]["message"]
    assert reverted[0]["message"].endswith("size 3 -> 2")
    now = api.wait(lambda: (g := group(groups, api.namespace, "kimi-k25-2x8"))
                   and g["spec"]["leaderWorkerTemplate"]["size"] == 2 and g, "size 2 again", timeout=30)
    template = now["spec"]["leaderWorkerTemplate"]["workerTemplate"]["spec"]["containers"][0]
    assert template["args"] == rendered["spec"]["leaderWorkerTemplate"]["workerTemplate"]["spec"]["containers"][0][
        "args"]
    api.wait_phase("kimi-k25-2x8", "Ready", timeout=120)
    op.settle(6)
    assert len([e for e in api.events("kimi-k25-2x8") if e["reason"] == "DriftReverted"]) == 1, "reverted once"
