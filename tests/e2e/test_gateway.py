"""The inference gateway end to end: the ctxfit operator with ``CTXFIT_GATEWAY_ENABLED`` on the local
control plane, the real Gateway API and InferencePool CRDs (hack/gateway-bins.sh), GIE's lightweight endpoint
picker reading the pools the operator writes, kwok GPU nodes running the engine pods.

- a pool created: owned by its server, selecting exactly its Ready pods (lwepp admits them), kept free of drift,
  garbage-collected with the server; ``kubectl get infsrv`` shows POOL;
- a pool shared by two servers on different GPU products (H200 and L4), each pod labelled with its own context;
  a server of another model is refused, naming the pool's creator;
- a clamp relabels the running pods in place, and the step-down that follows starts pods with the new label;
- a server leaving the pool: its pods lose the pool label, the creator's member list drops it, and a creator that
  stops creating deletes its pool;
- the CRDs absent: the server runs, its InferencePool condition says so, and the pool appears once the CRDs do.
"""

from __future__ import annotations

import copy
import json
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from addons_gateway import (
    gateway_available,
    install_gateway_crds,
    lwepp_available,
    remove_inference_pool_crd,
    start_lwepp,
    stop_lwepp,
    wait_lwepp_pods,
)
from ctxfit.api.observed import ObservedStatus
from ctxfit.controller.converge.verify import capacity_tokens
from kubernetes.client.rest import ApiException
from sim_startup import StartupLogServer, vllm_startup_log

from .operator_kit import OperatorProcess, ServerClient, condition

REPO = Path(__file__).resolve().parents[2]
POOLS = ("inference.networking.k8s.io", "v1", "inferencepools")
POOL_LABEL = "ctxfit.io/inference-pool"
RANGE_LABEL = "llm-d.ai/context-length-range"
CONTEXT_LABEL = "ctxfit.io/served-context-length"
READY_DELAY_MS = "4000"
GATEWAY_ENV = {"CTXFIT_GATEWAY_ENABLED": "true"}


def servers() -> dict[str, dict[str, Any]]:
    """The README example's two InferenceServers (manifests/llama31-8b-gateway.yaml) by name."""
    docs = yaml.safe_load_all((REPO / "manifests" / "llama31-8b-gateway.yaml").read_text())
    return {d["metadata"]["name"]: d for d in docs if d and d["kind"] == "InferenceServer"}


def server(name: str) -> dict[str, Any]:
    return copy.deepcopy(servers()[name])


@pytest.fixture
def gateway_crds(cluster: Any) -> None:
    """The Gateway API and InferencePool CRDs installed (again, if a test removed them)."""
    if not gateway_available(cluster):
        pytest.fail("Gateway API / InferencePool CRDs missing: run bash hack/k8s-bins.sh (make test does)")
    install_gateway_crds(cluster)


@pytest.fixture
def gw_op(cluster: Any, crd: Path, namespace: str, tmp_path: Path) -> Iterator[OperatorProcess]:
    operator = OperatorProcess(Path(cluster.kubeconfig), namespace, tmp_path / "operator.log", **GATEWAY_ENV).start()
    yield operator
    operator.stop()
    print(f"--- operator log ({operator.log_path}) ---\n{operator.log_path.read_text()[-8000:]}")


def pool(api: ServerClient, name: str) -> dict[str, Any] | None:
    try:
        out: dict[str, Any] = api.custom.get_namespaced_custom_object(*POOLS[:2], api.namespace, POOLS[2], name)
        return out
    except ApiException as exc:
        if exc.status == 404:
            return None
        raise


def serving_pods(api: ServerClient, name: str) -> list[dict[str, Any]]:
    return [p for p in api.pods(name) if any(c["type"] == "Ready" and c["status"] == "True"
                                            for c in p["status"].get("conditions") or [])]


def labels_of(pods: list[dict[str, Any]]) -> list[tuple[str | None, str | None, str | None]]:
    return sorted((p["metadata"]["labels"].get(POOL_LABEL), p["metadata"]["labels"].get(RANGE_LABEL),
                   p["metadata"]["labels"].get(CONTEXT_LABEL)) for p in pods)


def test_a_created_pool(cluster: Any, gateway_crds: None, gw_op: OperatorProcess, api: ServerClient,
                        namespace: str) -> None:
    obj = server("llama31-8b-h200")
    created = api.create(obj)
    ready = api.wait_phase("llama31-8b-h200", "Ready")
    doc = api.wait(lambda: pool(api, "llama31-8b"), "pool llama31-8b created")
    owner = doc["metadata"]["ownerReferences"][0]
    assert (owner["kind"], owner["name"], owner["uid"], owner["controller"]) == \
        ("InferenceServer", "llama31-8b-h200", created["metadata"]["uid"], True)
    assert doc["spec"]["selector"] == {"matchLabels": {POOL_LABEL: "llama31-8b"}}
    assert doc["spec"]["targetPorts"] == [{"number": 8000}]
    assert doc["spec"]["endpointPickerRef"]["name"] == "llama31-8b-epp"
    pods = api.wait(lambda: serving_pods(api, "llama31-8b-h200"), "a Ready engine pod")
    assert labels_of(pods) == [("llama31-8b", "0-131072", "131072")]
    routing = api.wait(lambda: api.get("llama31-8b-h200")["status"].get("routing"), "status.routing")
    assert (routing["pool"], routing["role"], routing["servedModelName"], routing["contextLength"]) == \
        ("llama31-8b", "Created", "llama-3.1-8b", 131072)
    assert condition(api.get("llama31-8b-h200"), "InferencePool")["reason"] == "PoolCreated"
    assert ready["status"]["contextLength"] == 131072
    table = subprocess.run([str(api.kubectl_bin), "get", "infsrv", "-n", namespace], capture_output=True, text=True,
                           env=api.env, check=True).stdout
    header, row = table.splitlines()[:2]
    assert "POOL" in header.split() and "llama31-8b" in row.split()
    if lwepp_available(cluster):  # the real endpoint picker admits exactly the Ready serving pods
        lwepp = start_lwepp(cluster, namespace, "llama31-8b")
        try:
            names = {p["metadata"]["name"] for p in pods}
            assert wait_lwepp_pods(lwepp, names, timeout=60) == names
        finally:
            stop_lwepp(cluster)
    # drift: an edit of the pool is reverted
    edited = json.loads(json.dumps(doc))
    edited["spec"]["targetPorts"] = [{"number": 9999}]
    api.custom.replace_namespaced_custom_object(*POOLS[:2], namespace, POOLS[2], "llama31-8b", edited)
    api.wait(lambda: (p := pool(api, "llama31-8b")) and p["spec"]["targetPorts"] == [{"number": 8000}],
             "the edited pool reverted")
    assert any(e["reason"] == "DriftReverted" and "InferencePool" in e["message"]
               for e in api.events("llama31-8b-h200"))
    # garbage-collected with its server
    api.custom.delete_namespaced_custom_object("ctxfit.io", "v1alpha1", namespace, "inferenceservers",
                                               "llama31-8b-h200")
    api.wait(lambda: pool(api, "llama31-8b") is None, "the pool garbage-collected with its server", timeout=120)


@pytest.mark.parametrize("case", ["vllm-dp2", "sglang-dp2"])
def test_a_data_parallel_server_pools_one_port_per_rank(cluster: Any, gateway_crds: None, gw_op: OperatorProcess,
                                                        api: ServerClient, namespace: str, case: str) -> None:
    """Two data-parallel ranks in a pod (vLLM: external load balancing; SGLang: one launch_server per replica):
    the pool lists a port per rank, the pod says it serves both, the Service exposes both."""
    obj = yaml.safe_load((REPO / "tests" / "golden" / "gateway" / case / "inferenceserver.yaml").read_text())
    name = obj["metadata"]["name"]
    api.create(obj)
    api.wait_phase(name, "Ready")
    doc = api.wait(lambda: pool(api, name), "the pool created")
    assert doc["spec"]["targetPorts"] == [{"number": 8000}, {"number": 8001}]
    (pod,) = api.wait(lambda: serving_pods(api, name), "the engine pod Ready")
    assert pod["metadata"]["annotations"]["llm-d.ai/active-ports"] == "8000,8001"
    container = pod["spec"]["containers"][0]
    assert [p["containerPort"] for p in container["ports"]] == [8000, 8001]
    assert container["readinessProbe"]["exec"]["command"][-2:] == ["8000", "8001"]
    assert [(p["name"], p["port"]) for p in api.service(name)["spec"]["ports"]] == \
        [("http", 8000), ("http-rank1", 8001)]


def test_a_pool_shared_by_two_gpu_products(cluster: Any, gateway_crds: None, gw_op: OperatorProcess,
                                           api: ServerClient, namespace: str) -> None:
    api.create(server("llama31-8b-h200"))
    api.create(server("llama31-8b-l4"))
    api.wait_phase("llama31-8b-h200", "Ready")
    api.wait_phase("llama31-8b-l4", "Ready")
    h200 = api.wait(lambda: len(p := serving_pods(api, "llama31-8b-h200")) == 1 and p, "H200 pod Ready")
    l4 = api.wait(lambda: len(p := serving_pods(api, "llama31-8b-l4")) == 2 and p, "both L4 pods Ready")
    assert labels_of(h200) == [("llama31-8b", "0-131072", "131072")]
    assert labels_of(l4) == [("llama31-8b", "0-24576", "24576")] * 2
    assert {api.node(p["spec"]["nodeName"])["metadata"]["labels"]["nvidia.com/gpu.product"] for p in h200 + l4} == \
        {"NVIDIA-H200", "NVIDIA-L4"}

    def members() -> list[dict[str, Any]] | None:
        routing = api.get("llama31-8b-h200")["status"].get("routing") or {}
        found = routing.get("members") or []
        return found if [(m["server"], m.get("readyReplicas")) for m in found] == \
            [("llama31-8b-h200", 1), ("llama31-8b-l4", 2)] else None

    found = api.wait(members, "the creator lists both servers with their Ready replicas")
    assert [(m["gpuProduct"], m["contextLength"]) for m in found] == [("NVIDIA-H200", 131072), ("NVIDIA-L4", 24576)]
    joiner = api.get("llama31-8b-l4")
    assert condition(joiner, "InferencePool")["reason"] == "PoolJoined"
    covered = api.wait(lambda: (c := condition(api.get("llama31-8b-l4"), "PoolContextCovered"))["status"] == "True"
                       and c, "PoolContextCovered True on the joiner")
    assert "llama31-8b-h200" in covered["message"]
    if lwepp_available(cluster):
        lwepp = start_lwepp(cluster, namespace, "llama31-8b")
        try:
            names = {p["metadata"]["name"] for p in h200 + l4}
            assert wait_lwepp_pods(lwepp, names, timeout=60) == names
        finally:
            stop_lwepp(cluster)
    # another model may not join: refused, naming the server that defines the pool; no engine starts
    other = server("llama31-8b-l4")
    other["metadata"]["name"] = "qwen-l4"
    other["spec"]["model"] = {"name": "Qwen/Qwen3-8B", "weightsPerGPU": "16Gi"}
    api.create(other)
    refused = api.wait_phase("qwen-l4", "Failed")
    admitted = condition(refused, "Admitted")
    assert (admitted["status"], admitted["reason"]) == ("False", "PoolModelMismatch")
    assert "InferenceServer llama31-8b-h200" in admitted["message"]
    assert not api.pods("qwen-l4")
    text = gw_op.scrape()
    assert 'ctxfit_server_pool_info{' in text and 'pool="llama31-8b"' in text
    assert 'ctxfit_server_pool_context_length_tokens{' in text


def test_a_clamp_relabels_in_place_and_the_step_down_starts_right(cluster: Any, gateway_crds: None, crd: Path,
                                                                    api: ServerClient, namespace: str,
                                                                    tmp_path: Path) -> None:
    """The engine reports a KV pool of 70,000 tokens for a 131,072 context: the running pod is relabelled to what
    it holds at once (the backoff keeps it running a while), and the attempt that follows starts at a context
    that fits, its pods labelled with it."""
    obj = server("llama31-8b-h200")
    obj["spec"]["pod"] = {"annotations": {"sim.ctxfit.io/delay-ms": READY_DELAY_MS}}
    plans: dict[str, Any] = {}

    def make(name: str, context: int) -> str:
        plan = plans.get(name) or api.wait(lambda: api.get(name)["status"]["plan"], f"{name} planned", 60)
        plans[name] = plan
        return vllm_startup_log(kv_cache_bytes=70_000 * plan["kvBytesPerToken"],
                                kv_bytes_per_token=plan["kvBytesPerToken"], max_model_len=context)

    op = OperatorProcess(Path(cluster.kubeconfig), namespace, tmp_path / "operator.log", **GATEWAY_ENV,
                         CTXFIT_BACKOFF_SECONDS="25").start()
    try:
        with StartupLogServer(cluster, api.core, api.namespace, make):
            api.create(obj)

            def clamped() -> int | None:
                st = api.get("llama31-8b-h200").get("status", {})
                observed = st.get("observed")
                return capacity_tokens(ObservedStatus.model_validate(observed)) if observed else None

            held = api.wait(clamped, "the engine's report read", timeout=90)
            assert held is not None and held < 131072

            def relabelled() -> list[dict[str, Any]] | None:
                pods = [p for p in serving_pods(api, "llama31-8b-h200")
                        if p["metadata"]["annotations"].get("ctxfit.io/attempt") == "1"]
                return pods if pods and labels_of(pods)[0][1] == f"0-{held}" else None

            pods = api.wait(relabelled, "the clamped attempt-1 pod relabelled in place", timeout=20)
            assert labels_of(pods) == [("llama31-8b", f"0-{held}", str(held))]
            assert pods[0]["metadata"]["annotations"]["ctxfit.io/context-length"] == "131072"  # same pod, no restart
            assert pods[0]["status"]["containerStatuses"][0]["restartCount"] == 0
            routing = api.wait(lambda: (r := api.get("llama31-8b-h200")["status"].get("routing"))
                               and r["contextLength"] == held and r, "status.routing says what the Ready pod holds")
            assert routing["contextRange"] == f"0-{held}"
            second = api.wait(lambda: [p for p in serving_pods(api, "llama31-8b-h200")
                                       if p["metadata"]["annotations"].get("ctxfit.io/attempt") == "2"],
                              "attempt 2 Ready", timeout=120)
            tokens = int(second[0]["metadata"]["annotations"]["ctxfit.io/context-length"])
            assert tokens < held
            assert labels_of(second)[0] == ("llama31-8b", f"0-{tokens}", str(tokens))
    finally:
        op.stop()
        print(f"--- operator log ---\n{(tmp_path / 'operator.log').read_text()[-8000:]}")


def test_a_server_leaving_the_pool(cluster: Any, gateway_crds: None, gw_op: OperatorProcess, api: ServerClient,
                                   namespace: str) -> None:
    api.create(server("llama31-8b-h200"))
    api.create(server("llama31-8b-l4"))
    api.wait(lambda: len(serving_pods(api, "llama31-8b-l4")) == 2, "the L4 pods Ready in the pool")
    api.patch_spec("llama31-8b-l4", {"routing": None})
    api.wait(lambda: (p := serving_pods(api, "llama31-8b-l4")) and len(p) == 2
             and labels_of(p) == [(None, None, None)] * 2, "the L4 pods without pool labels")
    st = api.wait(lambda: (s := api.get("llama31-8b-l4")["status"]) and "routing" not in s and s, "no routing status")
    assert not [c for c in st["conditions"] if c["type"] in ("InferencePool", "PoolContextCovered")]
    api.wait(lambda: [m["server"] for m in (api.get("llama31-8b-h200")["status"].get("routing") or {})
                      .get("members", [])] == ["llama31-8b-h200"], "the creator no longer lists the L4 server")
    # the creator stops creating: its pool is deleted, its pods leave it
    api.patch_spec("llama31-8b-h200", {"routing": {"inferencePool": None}})
    api.wait(lambda: pool(api, "llama31-8b") is None, "the pool deleted")
    api.wait(lambda: (p := serving_pods(api, "llama31-8b-h200")) and labels_of(p) == [(None, None, None)],
             "the H200 pod without pool labels")


def test_the_crds_absent(cluster: Any, crd: Path, gateway_crds: None, gw_op: OperatorProcess, api: ServerClient,
                         namespace: str) -> None:
    remove_inference_pool_crd(cluster)
    try:
        api.create(server("llama31-8b-h200"))
        ready = api.wait_phase("llama31-8b-h200", "Ready")
        cond = api.wait(lambda: condition(api.get("llama31-8b-h200"), "InferencePool"), "InferencePool condition")
        assert (cond["status"], cond["reason"]) == ("False", "InferencePoolCRDMissing")
        assert condition(ready, "Ready")["status"] == "True" and api.service("llama31-8b-h200")
        pods = serving_pods(api, "llama31-8b-h200")
        assert labels_of(pods) == [("llama31-8b", "0-131072", "131072")]  # the labels stay true
        gw_op.settle(5)
        assert gw_op.alive()
        assert sum(1 for e in api.events("llama31-8b-h200") if e["reason"] == "InferencePoolCRDMissing") == 1
    finally:
        install_gateway_crds(cluster)
    api.wait(lambda: pool(api, "llama31-8b"), "the pool created once the CRDs are back", timeout=120)
    api.wait(lambda: condition(api.get("llama31-8b-h200"), "InferencePool")["reason"] == "PoolCreated",
             "InferencePool True", timeout=60)
