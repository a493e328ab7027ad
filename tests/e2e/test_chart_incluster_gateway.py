"""The inference gateway from the chart, in-cluster (README "Inference gateway"): the operator image installed by
helm with ``gateway.enabled=true`` runs on the harness's real node under the chart's own ServiceAccount and RBAC,
the Gateway API and InferencePool CRDs installed as the harness installs add-ons (hack/addons_gateway.py), and
one server's engine really runs: hack/fake-engine's image on the real node (kubelet + containerd).

The real node is given two A10Gs for this test (a status patch, restored after). One scenario, in order:

1. ``fake-llama-dp2`` (vLLM, two data-parallel ranks in one pod, TP 1) creates the pool ``fake-llama``: the
   operator writes the InferencePool under the chart's RBAC (owned by the server, ``targetPorts`` 8000 and
   8001); the pod starts one engine process per rank (the rank launcher) and the kubelet's exec readiness
   probe, which asks every rank's /health, marks it Ready; both ports answer ``/v1/models`` with the served
   model name and the context the status gives; the operator, in-cluster, labelled the pod with the pool and
   that context (pod patch RBAC) and read the engine's start-up log back (``status.observed``).
2. Requests are routed through the pool: GIE's lightweight endpoint picker (lwepp) watches it and admits the pod,
   and hack/extproc-gateway (a gateway's data plane: ext_proc to the picker, then the request to the endpoint it
   picks; no Envoy builds here) sends each ``/v1/models`` to one rank: round robin reaches both ranks' ports on
   the pod's IP, each answering with the pool's model name and the context the pod's label says.
3. ``fake-llama-h200`` (same model, kwok H200 nodes) joins the pool: its pods carry the pool label and their own,
   longer context; the picker admits exactly the pool's Ready pods (the kwok pods' IPs serve nothing, so no
   request goes there); no Forbidden in the operator's log.
"""

from __future__ import annotations

import dataclasses
import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import cluster_nodes
import cluster_realnode as rn
import ctxfit_cluster as cc
import images
import pytest
from addons_gateway import (
    SERVED_ENDPOINT_HEADER,
    extproc_gateway_available,
    gateway_available,
    install_gateway_crds,
    lwepp_available,
    start_extproc_gateway,
    start_lwepp,
    stop_extproc_gateway,
    stop_lwepp,
)
from addons_gateway import wait_lwepp_pods as lwepp_wait
from hub_standin import HubStandIn

from .chart_kit import ready_pod
from .fake_engine_kit import (
    KV_POOL,
    MODEL,
    PER_TOKEN,
    REPO,
    chart_operator,
    diagnose,
    fake_engine_server,
    load_fake_engine,
    ready_server,
)
from .realnode_kit import http_get

POOL = "fake-llama"
SERVED = "llama-3.1-8b"
DP = "fake-llama-dp2"
JOINER = "fake-llama-h200"
POOL_LABEL = "ctxfit.io/inference-pool"
RANGE_LABEL = "llm-d.ai/context-length-range"
CONTEXT_LABEL = "ctxfit.io/served-context-length"
TWO_A10G = dataclasses.replace(rn.DEFAULT_GPUS, gpu_count=2)
RANK_KV_POOL = KV_POOL + 2 * (1 << 30)  # 5 GiB per rank: 40,960 tokens, the plan's 32,768 fits the first time


@pytest.fixture
def two_gpus(cluster: cc.Cluster, real_node: rn.RealNode) -> Iterator[rn.RealNode]:
    """The real node advertises two A10Gs (GFD labels, nvidia.com/gpu) for the test, then its default again."""
    cluster_nodes.advertise_gpus(cluster.kubectl, real_node.name, TWO_A10G)
    try:
        yield real_node
    finally:
        cluster_nodes.advertise_gpus(cluster.kubectl, real_node.name, rn.DEFAULT_GPUS)


@pytest.fixture
def gateway_operator(cluster: cc.Cluster, two_gpus: rn.RealNode, operator_image: str) -> Iterator[str]:
    """The CRDs installed, then the chart with gateway.enabled=true: the release's namespace."""
    if not (gateway_available(cluster) and lwepp_available(cluster) and extproc_gateway_available(cluster)):
        pytest.fail("Gateway API / InferencePool CRDs, lwepp or extproc-gateway missing: run bash hack/k8s-bins.sh "
                    "(make test does)")
    install_gateway_crds(cluster)
    with chart_operator(cluster, operator_image, "ctxfit-gw", "--set", "gateway.enabled=true") as ns:
        yield ns


def _dp_server(image: str, hub_url: str) -> dict[str, Any]:
    return fake_engine_server(
        DP, image, hub_url, kv_pool=RANK_KV_POOL, load_seconds=8, startup_timeout=90, gpus=2,
        parallelism={"data": 2},
        routing={"servedModelName": SERVED, "inferencePool": {"create": {
            "name": POOL, "endpointPickerRef": {"name": f"{POOL}-epp", "port": {"number": 9002}}}}})


def _joiner() -> dict[str, Any]:
    return {
        "apiVersion": "ctxfit.io/v1alpha1", "kind": "InferenceServer", "metadata": {"name": JOINER},
        "spec": {
            "model": {"name": MODEL},
            "engine": {"kind": "vllm", "version": "0.19.0"},
            "gpu": {"count": 1, "product": "NVIDIA-H200"},
            "context": {"target": 131072, "minimum": 8192},
            "routing": {"servedModelName": SERVED, "inferencePool": {"join": {"name": POOL}}},
        },
    }


def _get(cluster: cc.Cluster, ns: str, *what: str) -> dict[str, Any]:
    out: dict[str, Any] = cluster.kubectl_json("-n", ns, "get", *what)
    return out


def _serving_pods(cluster: cc.Cluster, ns: str, name: str) -> list[dict[str, Any]]:
    pods = _get(cluster, ns, "pods", "-l", f"ctxfit.io/server={name}")["items"]
    return [p for p in pods if not p["metadata"].get("deletionTimestamp")
            and any(c["type"] == "Ready" and c["status"] == "True" for c in p["status"].get("conditions") or [])]


def _labelled(pods: list[dict[str, Any]], context: int) -> bool:
    want = {POOL_LABEL: POOL, RANGE_LABEL: f"0-{context}", CONTEXT_LABEL: str(context)}
    return bool(pods) and all({k: p["metadata"]["labels"].get(k) for k in want} == want for p in pods)


THROUGH = """
import json, sys, urllib.request
with urllib.request.urlopen(sys.argv[1], timeout=20) as r:
    print(json.dumps({"endpoint": r.headers.get(sys.argv[2]), "body": json.loads(r.read())}))
"""


def _through(gateway: str, path: str) -> tuple[str, dict[str, Any]]:
    """GET ``path`` through the gateway (from a child process, as realnode_kit.http_get): (endpoint served, body)."""
    out = json.loads(http_get_via(gateway + path))
    return out["endpoint"], out["body"]


def http_get_via(url: str) -> str:
    proc = subprocess.run([sys.executable, "-c", THROUGH, url, SERVED_ENDPOINT_HEADER], capture_output=True,
                          text=True, timeout=40, check=False)
    if proc.returncode != 0:
        raise OSError(f"GET {url}: {proc.stderr.strip()[-500:]}")
    return proc.stdout


def _diagnose(cluster: cc.Cluster, release_ns: str, ns: str) -> str:
    return diagnose(cluster, release_ns, ns, ("inferencepools", "-o", "yaml"), pods=f"ctxfit.io/server={DP}")


@pytest.mark.timeout(900)
def test_a_pool_from_the_chart_with_a_real_data_parallel_engine(
        cluster: cc.Cluster, two_gpus: rn.RealNode, container_engine: images.Engine, fake_engine_image: str,
        gateway_operator: str, namespace: str, tmp_path: Path) -> None:
    release_ns, ns, node = gateway_operator, namespace, two_gpus
    operator_pod = ready_pod(cluster, release_ns)
    assert operator_pod is not None, _diagnose(cluster, release_ns, ns)
    env = {e["name"]: e.get("value") for e in operator_pod["spec"]["containers"][0]["env"]}
    assert env.get("CTXFIT_GATEWAY_ENABLED") == "true", env
    load_fake_engine(container_engine, fake_engine_image, node, tmp_path)

    with HubStandIn({MODEL: REPO}, host=node.host_ip) as hub:
        cluster.apply(_dp_server(fake_engine_image, hub.url), namespace=ns)
        try:
            server = cc.wait_until(lambda: ready_server(cluster, ns, DP), 420, f"{ns}/{DP} Ready", interval=1)
        except cc.HarnessError:
            pytest.fail(_diagnose(cluster, release_ns, ns))
    status = server["status"]
    context = status["contextLength"]
    assert len(status["attempts"]) == 1 and context == 32768, json.dumps(status["attempts"], indent=1)

    # 1. the pool, written by the in-cluster operator under the chart's RBAC
    pool = _get(cluster, ns, "inferencepools.inference.networking.k8s.io", POOL)
    (owner,) = pool["metadata"]["ownerReferences"]
    assert (owner["kind"], owner["name"], owner["uid"], owner.get("controller")) == \
        ("InferenceServer", DP, server["metadata"]["uid"], True)
    assert pool["spec"]["selector"] == {"matchLabels": {POOL_LABEL: POOL}}
    assert pool["spec"]["targetPorts"] == [{"number": 8000}, {"number": 8001}]
    assert status["routing"]["pool"] == POOL and status["routing"]["role"] == "Created", status["routing"]

    # ... the pod on the real node: one engine per rank, Ready by the kubelet's exec probe over both ranks
    try:
        (pod,) = cc.wait_until(lambda: (pods := _serving_pods(cluster, ns, DP)) and _labelled(pods, context)
                               and pods, 60, "the DP pod Ready and labelled")
    except (cc.HarnessError, ValueError):
        pytest.fail(_diagnose(cluster, release_ns, ns))
    assert pod["spec"]["nodeName"] == node.name
    engine = next(c for c in pod["spec"]["containers"] if c["name"] == "engine")
    probe = engine["readinessProbe"]["exec"]["command"]
    assert probe[:2] == ["python3", "-c"] and probe[-2:] == ["8000", "8001"], probe
    (state,) = [c for c in pod["status"]["containerStatuses"] if c["name"] == "engine"]
    assert state["ready"] is True and state["started"] is True and state["restartCount"] == 0, state
    assert pod["metadata"]["annotations"]["llm-d.ai/active-ports"] == "8000,8001"
    ip = pod["status"]["podIP"]
    for port in (8000, 8001):  # each rank serves its own port, with the pool's model name and the context
        models = json.loads(http_get(f"http://{ip}:{port}/v1/models"))
        assert [(m["id"], m["max_model_len"]) for m in models["data"]] == [(SERVED, context)], (port, models)
    log = cluster.kubectl("-n", ns, "logs", pod["metadata"]["name"], "-c", "engine")
    # the rank launcher started two engines (their lines share the container's log and may interleave)
    assert log.count("fake-engine: vllm serve") == 2, log[-3000:]
    for rank, port in ((0, 8000), (1, 8001)):
        assert f"--port {port} --data-parallel-rank {rank}" in log, log[-3000:]
    # the operator read the start-up log back through the kubelet: every rank's pool, the served context
    observed = status.get("observed") or _get(cluster, ns, "inferenceserver", DP)["status"].get("observed")
    assert observed and observed["servedContextLength"] == context, observed
    assert observed["kvCacheTokens"] == RANK_KV_POOL // PER_TOKEN, observed

    # 2. requests routed through the pool: the picker picks a rank endpoint, the data plane sends the request there
    lwepp = start_lwepp(cluster, ns, POOL)
    try:
        assert lwepp_wait(lwepp, {pod["metadata"]["name"]}, timeout=60) == {pod["metadata"]["name"]}, \
            lwepp.records()[-20:]
        assert lwepp.selector() == {POOL_LABEL: POOL}
        gateway = start_extproc_gateway(cluster, lwepp)
        served = []
        for _ in range(4):
            endpoint, models = _through(gateway, "/v1/models")
            assert [(m["id"], m["max_model_len"]) for m in models["data"]] == [(SERVED, context)], models
            served.append(endpoint)
        assert set(served) == {f"{ip}:8000", f"{ip}:8001"}, served  # both ranks, at the pod's own IP

        # 3. a server of the same model on kwok H200 nodes joins: its own, longer context on its pods
        cluster.apply(_joiner(), namespace=ns)
        try:
            joined = cc.wait_until(lambda: ready_server(cluster, ns, JOINER), 180, f"{ns}/{JOINER} Ready")
            longer = joined["status"]["contextLength"]
            assert longer > context
            h200_pods = cc.wait_until(lambda: (pods := _serving_pods(cluster, ns, JOINER))
                                      and _labelled(pods, longer) and pods, 60, "the joiner's pods labelled")
        except cc.HarnessError:
            pytest.fail(_diagnose(cluster, release_ns, ns))
        assert joined["status"]["routing"]["pool"] == POOL and joined["status"]["routing"]["role"] == "Joined"
        assert _labelled(_serving_pods(cluster, ns, DP), context)  # the creator's labels unchanged
        expected = {pod["metadata"]["name"], *(p["metadata"]["name"] for p in h200_pods)}
        assert lwepp_wait(lwepp, expected, timeout=60) == expected, lwepp.records()[-20:]
        assert not [r for r in lwepp.records() if "No container ports match" in str(r.get("msg"))]
    finally:
        stop_extproc_gateway(cluster)
        stop_lwepp(cluster)
    operator_log = cluster.kubectl("-n", release_ns, "logs", operator_pod["metadata"]["name"])
    assert "Forbidden" not in operator_log, operator_log[-3000:]

    for name in (JOINER, DP):  # deleted while the operator runs (its finalizer), the pool with its creator
        cluster.kubectl("-n", ns, "delete", "inferenceserver", name, "--wait=true", "--timeout=120s")
    cc.wait_until(lambda: cluster.kubectl_proc("-n", ns, "get", "inferencepools.inference.networking.k8s.io",
                                               POOL).returncode != 0, 120, "the pool garbage-collected")
