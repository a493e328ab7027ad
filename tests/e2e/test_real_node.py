"""The harness's real node (hack/cluster_realnode.py): a kubelet with containerd, runc, CNI and kube-proxy
beside the kwok GPU nodes, whose pods really run.

1. The Node is the kubelet's (its version, containerd, its InternalIP on the node's veth), tainted and
   labelled so only pods that ask land there, and advertises the GPU capacity and GFD labels it was given.
2. A pod from the operator image (imported, `imagePullPolicy: Never`) runs as its non-root user, passes a real
   HTTP readiness probe, answers the test at its pod IP, `kubectl logs` and `kubectl exec` reach it through
   the kubelet, and it calls the apiserver at the `kubernetes` Service with its own ServiceAccount token.
3. A harness of its own with a real node: `Cluster.stop` leaves no process, network namespace, cgroup, mount or
   run dir behind.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import cluster_realnode as rn
import ctxfit_cluster as cc
import pytest

from .realnode_kit import http_get

SERVE = """
import http.server, json, os, ssl, sys, urllib.request
sa = "/var/run/secrets/kubernetes.io/serviceaccount"
req = urllib.request.Request(f"https://{os.environ['KUBERNETES_SERVICE_HOST']}:{os.environ['KUBERNETES_SERVICE_PORT']}/version",
                             headers={"Authorization": "Bearer " + open(sa + "/token").read()})
version = json.load(urllib.request.urlopen(req, context=ssl.create_default_context(cafile=sa + "/ca.crt"), timeout=10))
print("apiserver", version["gitVersion"], "uid", os.getuid(), flush=True)
class H(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        body = json.dumps({"path": self.path, "uid": os.getuid()}).encode()
        self.send_response(200); self.send_header("Content-Length", str(len(body))); self.end_headers()
        self.wfile.write(body)
    def log_message(self, *args):
        print("GET", self.path, flush=True)
http.server.HTTPServer(("0.0.0.0", 8000), H).serve_forever()
"""


def test_the_node_is_a_real_kubelet(cluster: cc.Cluster, real_node: rn.RealNode) -> None:
    node = cluster.kubectl_json("get", "node", real_node.name)
    info = node["status"]["nodeInfo"]
    assert info["kubeletVersion"] == "v1.34.4" and info["containerRuntimeVersion"].startswith("containerd://1.")
    assert {"type": "InternalIP", "address": real_node.node_ip} in node["status"]["addresses"]
    assert node["status"]["daemonEndpoints"]["kubeletEndpoint"]["Port"] == real_node.kubelet_port
    assert rn.TAINT in [{k: t[k] for k in ("key", "value", "effect")} for t in node["spec"].get("taints", [])]
    labels = node["metadata"]["labels"]
    assert labels[rn.REAL_NODE_LABEL] == "true" and "type" not in labels  # not a kwok node
    assert labels["nvidia.com/gpu.product"] == rn.DEFAULT_GPUS.product
    assert labels["nvidia.com/gpu.memory"] == str(rn.DEFAULT_GPUS.gpu_memory_mib)
    assert node["status"]["allocatable"]["nvidia.com/gpu"] == str(rn.DEFAULT_GPUS.gpu_count)
    assert "kwok.x-k8s.io/node" not in node["metadata"].get("annotations", {})
    assert "localhost/ctxfit:dev" in real_node.images() and rn.PAUSE_IMAGE in real_node.images()


@pytest.mark.timeout(300)
def test_a_pod_really_runs(cluster: cc.Cluster, real_node: rn.RealNode, namespace: str,
                           operator_image: str) -> None:
    pod = {
        "apiVersion": "v1", "kind": "Pod", "metadata": {"name": "web", "namespace": namespace},
        "spec": {
            "nodeSelector": {rn.REAL_NODE_LABEL: "true"}, "tolerations": [rn.TOLERATION],
            "securityContext": {"runAsNonRoot": True, "seccompProfile": {"type": "RuntimeDefault"}},
            "containers": [{
                "name": "web", "image": operator_image, "imagePullPolicy": "Never",
                "command": ["python", "-c", SERVE], "ports": [{"containerPort": 8000}],
                "readinessProbe": {"httpGet": {"path": "/ready", "port": 8000}, "periodSeconds": 1},
                "securityContext": {"allowPrivilegeEscalation": False, "readOnlyRootFilesystem": True,
                                    "capabilities": {"drop": ["ALL"]}},
            }],
        },
    }
    cluster.apply(pod)

    def ready() -> dict | None:
        obj = cluster.kubectl_json("-n", namespace, "get", "pod", "web")
        statuses = obj["status"].get("containerStatuses") or [{}]
        if statuses[0].get("state", {}).get("terminated"):
            pytest.fail(f"the pod's container exited:\n{cluster.kubectl('-n', namespace, 'logs', 'web', check=False)}")
        return obj if statuses[0].get("ready") else None

    try:
        obj = cc.wait_until(ready, 120, "pod web Ready")
    except cc.HarnessError:
        pytest.fail(cluster.kubectl("-n", namespace, "describe", "pod", "web", check=False))
    assert obj["spec"]["nodeName"] == real_node.name
    ip = obj["status"]["podIP"]
    assert ip.startswith(real_node.pod_cidr.rsplit(".", 1)[0] + ".")
    assert json.loads(http_get(f"http://{ip}:8000/hello")) == {"path": "/hello", "uid": 65532}
    logs = cluster.kubectl("-n", namespace, "logs", "web")
    assert "apiserver v1.34.4 uid 65532" in logs  # its own token, through the kubernetes Service (kube-proxy)
    assert "GET /ready" in logs and "GET /hello" in logs  # the kubelet's probes, then the test
    assert cluster.kubectl("-n", namespace, "exec", "web", "--", "id", "-u").strip() == "65532"


def _leftovers(slot: int, work_dir: Path) -> list[str]:
    found = []
    if Path(f"/run/netns/ctxfit-rn{slot}").exists():
        found.append(f"netns ctxfit-rn{slot}")
    found += [str(d) for d in rn.cgroup_dirs(f"/ctxfit-rn{slot}") if d.exists()]
    with open("/proc/self/mountinfo") as f:
        found += [line.split()[4] for line in f if f"/ctxfit/rn{slot}" in line or str(work_dir) in line]
    if (rn.RUN_DIR / f"rn{slot}").exists():
        found.append(str(rn.RUN_DIR / f"rn{slot}"))
    for pid in os.listdir("/proc"):
        if pid.isdigit():
            try:
                cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace")
            except OSError:
                continue
            if f"/ctxfit/rn{slot}/" in cmdline or str(work_dir) in cmdline:
                found.append(f"process {pid}: {cmdline[:200]}")
    return found


@pytest.mark.timeout(300)
def test_cluster_stop_removes_the_node(cluster: cc.Cluster, tmp_path: Path,
                                       operator_image: str, container_engine) -> None:
    """A harness of its own (the session's keeps its node): start, run a pod, stop, nothing left."""
    own = cc.Cluster(tmp_path / "c", bin_dir=cluster.bin_dir)
    own.start(die_with_parent=True, nodes=[])
    try:
        node = rn.start_real_node(own, name="real-stop", gpus=None)
        own.apply({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "namespace": "default"},
                   "spec": {"tolerations": [rn.TOLERATION], "containers": [
                       {"name": "p", "image": rn.PAUSE_IMAGE, "imagePullPolicy": "Never"}]}})
        cc.wait_until(lambda: own.kubectl_json("get", "pod", "p")["status"].get("phase") == "Running", 60, "pod p")
        assert _leftovers(node.slot, tmp_path / "c")  # the check sees a running node
    finally:
        own.stop()
    assert not _leftovers(node.slot, tmp_path / "c")
