"""The chart as a user installs it: real helm, the image built from the Dockerfile (`make image`), the operator
running in-cluster on the harness's real node (kubelet + containerd: tests/e2e/realnode_kit.py) under the
chart's own ServiceAccount and RBAC, with its liveness/readiness probes on /healthz run by the kubelet.

One scenario, in order:
1. `helm install` (image.repository/tag from the built image, pullPolicy Never, the real node's toleration and
   selector) --wait: the operator pod is Ready on the real node, as uid 65532, with the chart's ServiceAccount;
2. manifests/kimi-128k.yaml is reconciled to Ready on the kwok GPU nodes; the operator's own log (read back
   through the kubelet) names it; its weights claim (`status.model.claimName`) is Bound;
3. `helm upgrade` (a changed value): a new operator pod takes over; the InferenceServer and its claim are the
   same objects (uids), still Ready / Bound;
4. `helm uninstall`: the operator is gone; the CRD (`crds.keep`), the InferenceServer and its claim stay, as the
   chart promises (README "On a real cluster", values.yaml crds.keep).
"""

from __future__ import annotations

import re
import uuid
from collections.abc import Iterator
from typing import Any

import cluster_realnode as rn
import ctxfit_cluster as cc
import pytest
import yaml

from .chart_kit import CHART, KIMI, helm, incluster_values, operator_pods, ready_pod

SERVER = yaml.safe_load(KIMI.read_text())["metadata"]["name"]


def _server(cluster: cc.Cluster, ns: str) -> dict[str, Any]:
    obj: dict[str, Any] = cluster.kubectl_json("-n", ns, "get", "inferenceserver", SERVER)
    return obj


def _diagnose(cluster: cc.Cluster, release_ns: str, server_ns: str) -> str:
    return "\n".join([
        cluster.kubectl("-n", release_ns, "get", "pods", "-o", "wide", check=False),
        cluster.kubectl("-n", release_ns, "describe", "pods", check=False)[-3000:],
        cluster.kubectl("-n", release_ns, "logs", "-l", "app.kubernetes.io/name=ctxfit", "--tail=60", check=False),
        cluster.kubectl("-n", server_ns, "get", "inferenceserver", SERVER, "-o", "yaml", check=False)[-3000:],
    ])


@pytest.fixture
def release(cluster: cc.Cluster) -> Iterator[dict[str, str]]:
    suffix = uuid.uuid4().hex[:6]
    names = {"release": f"ctxfit-{suffix}", "ns": f"ctxfit-incluster-{suffix}", "server_ns": f"e2e-incluster-{suffix}"}
    cluster.create_namespace(names["server_ns"])
    try:
        yield names
    finally:
        helm(cluster, "uninstall", names["release"], "--namespace", names["ns"], "--wait", check=False)
        # with the operator gone nothing removes kopf's finalizer: the test does, then deletes
        cluster.kubectl("-n", names["server_ns"], "patch", "inferenceserver", SERVER, "--type=merge",
                        "-p", '{"metadata":{"finalizers":[]}}', check=False)
        for ns in (names["server_ns"], names["ns"]):
            cluster.kubectl("delete", "namespace", ns, "--wait=false", "--ignore-not-found", check=False)


@pytest.mark.timeout(900)
def test_chart_install_upgrade_uninstall_in_cluster(cluster: cc.Cluster, real_node: rn.RealNode,
                                                    operator_image: str, release: dict[str, str]) -> None:
    rel, ns, server_ns = release["release"], release["ns"], release["server_ns"]
    values = incluster_values(operator_image)

    # 1. install: the operator pod Ready (the kubelet's readiness probe on /healthz) on the real node
    helm(cluster, "install", rel, str(CHART), "--namespace", ns, "--create-namespace", "--take-ownership",
         *values, "--wait", "--timeout", "180s")
    pod = ready_pod(cluster, ns)
    assert pod is not None, _diagnose(cluster, ns, server_ns)
    spec = pod["spec"]
    assert spec["nodeName"] == real_node.name
    assert spec["serviceAccountName"] == cluster.kubectl_json("-n", ns, "get", "serviceaccounts", "-l",
                                                              "app.kubernetes.io/name=ctxfit")["items"][0]["metadata"]["name"]
    assert spec["containers"][0]["image"] == operator_image
    assert cluster.kubectl("-n", ns, "exec", pod["metadata"]["name"], "--", "id", "-u").strip() == "65532"
    assert pod["status"]["containerStatuses"][0]["restartCount"] == 0

    # 2. the operator, in-cluster, drives kimi-128k to Ready on the kwok GPU nodes
    cluster.kubectl("-n", server_ns, "apply", "-f", str(KIMI))
    try:
        server = cc.wait_until(lambda: (s := _server(cluster, server_ns)).get("status", {}).get("phase") == "Ready"
                               and s, 180, f"{server_ns}/{SERVER} Ready")
    except cc.HarnessError:
        pytest.fail(_diagnose(cluster, ns, server_ns))
    assert server["status"]["contextLength"] == 131072
    claim_name = server["status"]["model"]["claimName"]
    claim = cluster.kubectl_json("-n", server_ns, "get", "pvc", claim_name)
    assert claim["status"]["phase"] == "Bound"
    operator_log = cluster.kubectl("-n", ns, "logs", pod["metadata"]["name"])  # through the kubelet
    assert SERVER in operator_log and "Forbidden" not in operator_log, operator_log[-3000:]
    # its identity is the pod's name, from the chart's POD_NAME (downward API): the Events it posted say so
    instances = {e.get("reportingInstance") for e in cluster.kubectl_json("-n", server_ns, "get", "events")["items"]
                 if e.get("reportingComponent") == "ctxfit-operator"}
    assert instances and all(re.fullmatch(rf"{pod['metadata']['name']}-\d+", i or "") for i in instances), instances

    # 3. upgrade: a new operator pod; the same server and claim, still Ready and Bound
    helm(cluster, "upgrade", rel, str(CHART), "--namespace", ns, *values, "--set", "operator.logLevel=DEBUG",
         "--wait", "--timeout", "180s")
    try:
        old_uid = pod["metadata"]["uid"]
        new_pod = cc.wait_until(lambda: (p := ready_pod(cluster, ns)) and p["metadata"]["uid"] != old_uid and p,
                                120, "the upgraded operator pod Ready")
    except cc.HarnessError:
        pytest.fail(_diagnose(cluster, ns, server_ns))
    env = {e["name"]: e.get("value") for e in new_pod["spec"]["containers"][0]["env"]}
    assert env["CTXFIT_LOG_LEVEL"] == "DEBUG"
    after = _server(cluster, server_ns)
    assert after["metadata"]["uid"] == server["metadata"]["uid"] and after["status"]["phase"] == "Ready"
    claim_after = cluster.kubectl_json("-n", server_ns, "get", "pvc", claim_name)
    assert claim_after["metadata"]["uid"] == claim["metadata"]["uid"] and claim_after["status"]["phase"] == "Bound"
    # the new operator took the server over: it reconciles it (kopf's DEBUG lines name it) without a new attempt
    cc.wait_until(lambda: SERVER in cluster.kubectl("-n", ns, "logs", new_pod["metadata"]["name"]), 60,
                  "the upgraded operator handles the server")
    assert len(_server(cluster, server_ns)["status"]["attempts"]) == len(server["status"]["attempts"])

    # 4. uninstall: operator gone; CRD, server and claim kept
    helm(cluster, "uninstall", rel, "--namespace", ns, "--wait", "--timeout", "120s")
    cc.wait_until(lambda: not operator_pods(cluster, ns), 60, "operator pods gone")
    assert cluster.kubectl_proc("-n", ns, "get", "deployment", rel).returncode != 0
    crd = cluster.kubectl_json("get", "crd", "inferenceservers.ctxfit.io")
    assert crd["metadata"]["annotations"].get("helm.sh/resource-policy") == "keep"
    kept = _server(cluster, server_ns)
    assert kept["metadata"]["uid"] == server["metadata"]["uid"] and not kept["metadata"].get("deletionTimestamp")
    claim_kept = cluster.kubectl_json("-n", server_ns, "get", "pvc", claim_name)
    assert claim_kept["metadata"]["uid"] == claim["metadata"]["uid"]
    assert not claim_kept["metadata"].get("deletionTimestamp")
