"""Acceptance of the local control plane: real apiserver/etcd/controller-manager/scheduler,
kwok GPU nodes and the simulated-engine contract of hack/README.md."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import ctxfit_cluster as cc
import pytest

from .conftest import report

HACK = Path(__file__).resolve().parents[2] / "hack"
IMAGE = "ghcr.io/ctxfit/fake-engine:sim"  # never pulled: kwok runs no containers


def wait_for(
    pred: Callable[[], Any], timeout: float = 30, what: str = "condition", interval: float = 0.25
) -> Any:
    return cc.wait_until(pred, timeout, what, interval)


def pod(name: str, labels: dict | None = None, annotations: dict | None = None, **spec: Any) -> dict:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "labels": labels or {}, "annotations": annotations or {}},
        "spec": {
            "containers": [{"name": "engine", "image": IMAGE}],
            "terminationGracePeriodSeconds": 0,
            **spec,
        },
    }


def deployment(
    name: str,
    gpus: int = 0,
    labels: dict | None = None,
    annotations: dict | None = None,
    node_selector: dict | None = None,
    tolerations: list | None = None,
) -> dict:
    container: dict[str, Any] = {"name": "engine", "image": IMAGE}
    if gpus:
        container["resources"] = {"limits": {"nvidia.com/gpu": str(gpus)}}
    tpl_spec: dict[str, Any] = {"containers": [container], "terminationGracePeriodSeconds": 0}
    if node_selector:
        tpl_spec["nodeSelector"] = node_selector
    if tolerations:
        tpl_spec["tolerations"] = tolerations
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": name},
        "spec": {
            "replicas": 1,
            "selector": {"matchLabels": {"app": name}},
            "template": {
                "metadata": {"labels": {"app": name, **(labels or {})}, "annotations": annotations or {}},
                "spec": tpl_spec,
            },
        },
    }


def condition(obj: dict, ctype: str) -> str | None:
    for c in obj.get("status", {}).get("conditions", []) or []:
        if c["type"] == ctype:
            return c["status"]
    return None


def engine_status(p: dict) -> dict:
    for s in p.get("status", {}).get("containerStatuses", []) or []:
        if s["name"] == "engine":
            return s
    return {}


class PodWatcher:
    """Records every version of every pod in a namespace (a real watch), to prove a pod was never Ready."""

    def __init__(self, cluster: cc.Cluster, namespace: str):
        self.cluster, self.namespace = cluster, namespace
        self.proc = subprocess.Popen(
            [
                str(cluster.bin_dir / "kubectl"),
                "--kubeconfig",
                str(cluster.kubeconfig),
                "-n",
                namespace,
                "get",
                "pods",
                "--watch",
                "--output-watch-events",
                "-o",
                "json",
            ],
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
        )
        self.versions: dict[str, list[dict]] = {}
        self._lock = threading.Lock()
        self._thread = threading.Thread(target=self._read, daemon=True)
        self._thread.start()

    def _read(self) -> None:
        dec = json.JSONDecoder()
        buf = ""
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            buf += line
            while True:
                s = buf.lstrip()
                if not s:
                    buf = ""
                    break
                try:
                    ev, end = dec.raw_decode(s)
                except json.JSONDecodeError:
                    break
                buf = s[end:]
                obj = ev.get("object", {})
                with self._lock:
                    self.versions.setdefault(obj.get("metadata", {}).get("name", "?"), []).append(obj)

    def ever_ready(self, name: str) -> bool:
        with self._lock:
            return any(condition(v, "Ready") == "True" for v in self.versions.get(name, []))

    def ever_ready_prefix(self, prefix: str) -> list[str]:
        with self._lock:
            return [
                n
                for n, vs in self.versions.items()
                if n.startswith(prefix) and any(condition(v, "Ready") == "True" for v in vs)
            ]

    def seen(self, name: str) -> int:
        with self._lock:
            return len(self.versions.get(name, []))

    def close(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            self.proc.kill()


@pytest.fixture
def watcher(cluster: cc.Cluster, namespace: str):
    w = PodWatcher(cluster, namespace)
    time.sleep(0.5)  # let the watch open before pods are created
    yield w
    w.close()


def get_pod(cluster: cc.Cluster, ns: str, name: str) -> dict:
    return cluster.kubectl_json("-n", ns, "get", "pod", name)


def pods_of(cluster: cc.Cluster, ns: str, app: str) -> list[dict]:
    return cluster.kubectl_json("-n", ns, "get", "pods", "-l", f"app={app}")["items"]


def events_for(cluster: cc.Cluster, ns: str, name: str) -> list[dict]:
    return cluster.kubectl_json("-n", ns, "get", "events", "--field-selector", f"involvedObject.name={name}")[
        "items"
    ]


# ------------------------------------------------------------------------------------------------


def test_start_time_under_60s(cluster: cc.Cluster) -> None:
    if getattr(cluster, "reused", False):
        pytest.skip("reusing a running cluster (CTXFIT_KUBECONFIG)")
    print(f"harness start: {cluster.start_seconds:.1f} s")
    assert cluster.start_seconds is not None and cluster.start_seconds < 60


def test_versions_are_real(cluster: cc.Cluster) -> None:
    v = json.loads(cluster.kubectl("get", "--raw", "/version"))
    assert v["gitVersion"].startswith("v1.34."), v


def test_gpu_nodes_ready(cluster: cc.Cluster) -> None:
    nodes = {n["metadata"]["name"]: n for n in cluster.kubectl_json("get", "nodes")["items"]}
    for spec in cc.default_nodes():
        n = nodes[spec.name]
        assert condition(n, "Ready") == "True", spec.name
        labels = n["metadata"]["labels"]
        assert labels["nvidia.com/gpu.product"] == spec.product
        assert labels["nvidia.com/gpu.memory"] == str(spec.gpu_memory_mib)
        assert labels["nvidia.com/gpu.count"] == str(spec.gpu_count)
        assert (labels["nvidia.com/gpu.compute.major"], labels["nvidia.com/gpu.compute.minor"]) == tuple(
            map(str, spec.compute)
        )
        assert labels["nvidia.com/gpu.present"] == "true"
        assert n["status"]["allocatable"]["nvidia.com/gpu"] == str(spec.gpu_count)
        assert n["status"]["capacity"]["nvidia.com/gpu"] == str(spec.gpu_count)
    products = sorted(
        n["metadata"]["labels"]["nvidia.com/gpu.product"]
        for n in nodes.values()
        if n["metadata"]["name"] in {s.name for s in cc.default_nodes()}
    )
    assert products.count("NVIDIA-RTX-PRO-6000-Blackwell-Server-Edition") == 2
    assert products.count("NVIDIA-H100-80GB-HBM3") == 2
    assert products.count("NVIDIA-H200") == 1
    assert products.count("NVIDIA-L4") == 2
    h200 = nodes["h200-0"]["metadata"]["labels"]
    assert h200["nvidia.com/gpu.memory"] == "143771"
    rtx = nodes["rtx-pro-6000-0"]["metadata"]["labels"]
    assert (rtx["nvidia.com/gpu.memory"], rtx["nvidia.com/gpu.compute.major"]) == ("97887", "12")
    # `kubectl get nodes` as a user would run it
    out = cluster.kubectl("get", "nodes", "-L", "nvidia.com/gpu.product")
    assert out.count(" Ready ") >= 7


def test_gpu_deployment_lands_on_8gpu_node_and_overcommit_stays_pending(
    cluster: cc.Cluster, namespace: str
) -> None:
    # anywhere in the default pool: 8 GPUs only fit an 8-GPU node
    cluster.apply(deployment("eight", gpus=8), namespace=namespace)
    wait_for(
        lambda: [p for p in pods_of(cluster, namespace, "eight") if condition(p, "Ready") == "True"],
        60,
        "deployment 'eight' Ready",
    )
    cluster.kubectl("-n", namespace, "rollout", "status", "deployment/eight", "--timeout=60s")
    (p,) = pods_of(cluster, namespace, "eight")
    node = cluster.kubectl_json("get", "node", p["spec"]["nodeName"])
    assert node["metadata"]["labels"]["nvidia.com/gpu.count"] == "8"

    # a node of our own (add_node), tainted so nothing else lands there: fill it, then ask for one more GPU
    node_name = f"h100-{namespace}"
    key = "ctxfit.io/e2e-node"
    cluster.add_node(
        name=node_name,
        gpu_type="h100",
        gpu_count=8,
        labels={key: namespace},
        taints=[{"key": key, "value": namespace, "effect": "NoSchedule"}],
    )
    try:
        sel = {key: namespace}
        tol = [{"key": key, "operator": "Equal", "value": namespace, "effect": "NoSchedule"}]
        cluster.apply(deployment("fill", gpus=8, node_selector=sel, tolerations=tol), namespace=namespace)
        cluster.kubectl("-n", namespace, "rollout", "status", "deployment/fill", "--timeout=60s")
        assert pods_of(cluster, namespace, "fill")[0]["spec"]["nodeName"] == node_name
        cluster.apply(deployment("more", gpus=1, node_selector=sel, tolerations=tol), namespace=namespace)

        def unschedulable() -> dict | None:
            pods = pods_of(cluster, namespace, "more")
            if not pods:
                return None
            ev = [
                e
                for e in events_for(cluster, namespace, pods[0]["metadata"]["name"])
                if e["reason"] == "FailedScheduling"
            ]
            return {"pod": pods[0], "events": ev} if ev else None

        got = wait_for(unschedulable, 60, "FailedScheduling event")
        assert got["pod"]["status"]["phase"] == "Pending"
        assert "Insufficient nvidia.com/gpu" in got["events"][0]["message"], got["events"][0]["message"]
        time.sleep(2)
        assert pods_of(cluster, namespace, "more")[0]["status"]["phase"] == "Pending"
        assert condition(pods_of(cluster, namespace, "more")[0], "PodScheduled") == "False"
    finally:
        cluster.kubectl(
            "-n", namespace, "delete", "deployment", "fill", "more", "--ignore-not-found", check=False
        )
        cluster.kubectl("delete", "node", node_name, "--ignore-not-found", check=False)


def test_crash_loop_with_termination_message(
    cluster: cc.Cluster, namespace: str, watcher: PodWatcher
) -> None:
    msg = "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB"
    cluster.apply(
        pod(
            "crasher",
            labels={"sim.ctxfit.io/behavior": "crash"},
            annotations={
                "sim.ctxfit.io/exit-code": "3",
                "sim.ctxfit.io/message": msg,
                "sim.ctxfit.io/reason": "Error",
                "sim.ctxfit.io/restart-delay-ms": "500",
            },
        ),
        namespace=namespace,
    )

    def restarted(n: int) -> dict | None:
        p = get_pod(cluster, namespace, "crasher")
        s = engine_status(p)
        return p if s.get("restartCount", 0) >= n else None

    p1 = wait_for(lambda: restarted(1), 30, "first restart")
    c1 = engine_status(p1)["restartCount"]
    p2 = wait_for(lambda: restarted(c1 + 2), 30, "restartCount rising")
    s = engine_status(p2)
    assert s["restartCount"] > c1
    assert s["lastState"]["terminated"]["message"] == msg
    assert s["lastState"]["terminated"]["exitCode"] == 3
    assert s["lastState"]["terminated"]["reason"] == "Error"
    assert s["state"]["waiting"]["reason"] == "CrashLoopBackOff"
    assert s["ready"] is False
    assert p2["status"]["phase"] == "Running"
    assert condition(p2, "Ready") == "False"
    assert watcher.seen("crasher") >= 3
    assert not watcher.ever_ready("crasher")


def test_oomkilled(cluster: cc.Cluster, namespace: str, watcher: PodWatcher) -> None:
    cluster.apply(
        pod(
            "oom",
            labels={"sim.ctxfit.io/behavior": "oomkilled"},
            annotations={"sim.ctxfit.io/restart-delay-ms": "500"},
        ),
        namespace=namespace,
    )
    first = wait_for(
        lambda: (
            engine_status(get_pod(cluster, namespace, "oom")).get("state", {}).get("terminated")
            or engine_status(get_pod(cluster, namespace, "oom")).get("lastState", {}).get("terminated")
        ),
        30,
        "OOMKilled termination",
    )
    assert (first["reason"], first["exitCode"]) == ("OOMKilled", 137)
    p = wait_for(
        lambda: (lambda q: q if engine_status(q).get("restartCount", 0) >= 2 else None)(
            get_pod(cluster, namespace, "oom")
        ),
        30,
        "OOMKilled restarts",
    )
    s = engine_status(p)
    assert s["lastState"]["terminated"]["reason"] == "OOMKilled"
    assert s["lastState"]["terminated"]["exitCode"] == 137
    assert s["state"]["waiting"]["reason"] == "CrashLoopBackOff"
    assert not watcher.ever_ready("oom")


def test_crash_with_restart_policy_never_fails_the_pod(cluster: cc.Cluster, namespace: str) -> None:
    cluster.apply(
        pod(
            "once",
            labels={"sim.ctxfit.io/behavior": "crash"},
            annotations={"sim.ctxfit.io/exit-code": "2"},
            restartPolicy="Never",
        ),
        namespace=namespace,
    )
    p = wait_for(
        lambda: (lambda q: q if q["status"].get("phase") == "Failed" else None)(
            get_pod(cluster, namespace, "once")
        ),
        30,
        "phase Failed",
    )
    assert engine_status(p)["state"]["terminated"]["exitCode"] == 2
    time.sleep(1.5)
    assert engine_status(get_pod(cluster, namespace, "once"))["restartCount"] == 0


def test_conditional_failure_both_ways(cluster: cc.Cluster, namespace: str, watcher: PodWatcher) -> None:
    cond = {
        "sim.ctxfit.io/fail-if-annotation": "ctxfit.io/context-length",
        "sim.ctxfit.io/fail-if-above": "65536",
        "sim.ctxfit.io/restart-delay-ms": "500",
        "sim.ctxfit.io/message": "KV cache too small",
    }
    crash = {"sim.ctxfit.io/behavior": "crash"}
    cluster.apply(
        [
            pod("too-long", labels=crash, annotations={**cond, "ctxfit.io/context-length": "131072"}),
            pod("fits", labels=crash, annotations={**cond, "ctxfit.io/context-length": "32768"}),
            pod("at-limit", labels=crash, annotations={**cond, "ctxfit.io/context-length": "65536"}),
            pod("no-value", labels=crash, annotations=cond),
            pod(
                "oom-big",
                labels={"sim.ctxfit.io/behavior": "oomkilled"},
                annotations={
                    "sim.ctxfit.io/fail-if-annotation": "ctxfit.io/memory-limit-bytes",
                    "sim.ctxfit.io/fail-if-above": "85000000000",
                    "ctxfit.io/memory-limit-bytes": "85899345920",
                },
            ),
        ],
        namespace=namespace,
    )
    for name in ("fits", "at-limit", "no-value"):
        wait_for(
            lambda n=name: condition(get_pod(cluster, namespace, n), "Ready") == "True", 30, f"{name} Ready"
        )
    wait_for(
        lambda: engine_status(get_pod(cluster, namespace, "too-long")).get("restartCount", 0) >= 1,
        30,
        "too-long crashing",
    )
    wait_for(
        lambda: (
            engine_status(get_pod(cluster, namespace, "oom-big"))
            .get("state", {})
            .get("terminated", {})
            .get("reason")
            == "OOMKilled"
            or engine_status(get_pod(cluster, namespace, "oom-big")).get("restartCount", 0) >= 1
        ),
        30,
        "oom-big OOMKilled",
    )
    assert not watcher.ever_ready("too-long")
    assert not watcher.ever_ready("oom-big")
    s = engine_status(get_pod(cluster, namespace, "too-long"))
    assert s["lastState"]["terminated"]["message"] == "KV cache too small"

    # the operator's step-down, as a Deployment: the first ReplicaSet crashes, the stepped-down one is Ready
    cluster.apply(
        deployment("engine", labels=crash, annotations={**cond, "ctxfit.io/context-length": "131072"}),
        namespace=namespace,
    )
    wait_for(
        lambda: any(
            engine_status(p).get("restartCount", 0) >= 1 for p in pods_of(cluster, namespace, "engine")
        ),
        30,
        "deployment's pod crashing",
    )
    cluster.kubectl(
        "-n",
        namespace,
        "patch",
        "deployment",
        "engine",
        "--type=merge",
        "-p",
        json.dumps(
            {"spec": {"template": {"metadata": {"annotations": {"ctxfit.io/context-length": "65536"}}}}}
        ),
    )
    cluster.kubectl("-n", namespace, "rollout", "status", "deployment/engine", "--timeout=60s")
    ready = [p for p in pods_of(cluster, namespace, "engine") if condition(p, "Ready") == "True"]
    assert ready and ready[0]["metadata"]["annotations"]["ctxfit.io/context-length"] == "65536"
    crashed = [
        n
        for n, vs in watcher.versions.items()
        if n.startswith("engine-")
        and any(v["metadata"]["annotations"].get("ctxfit.io/context-length") == "131072" for v in vs)
    ]
    assert crashed
    assert not [n for n in crashed if watcher.ever_ready(n)]


def test_conditional_failure_below_both_ways(
    cluster: cc.Cluster, namespace: str, watcher: PodWatcher
) -> None:
    """fail-if-below: fails while annotation K is < M (alone, or with fail-if-above: either bound)."""
    key = "ctxfit.io/memory-limit-bytes"
    below = {
        "sim.ctxfit.io/fail-if-annotation": key,
        "sim.ctxfit.io/fail-if-below": "644245094400",  # 600Gi
        "sim.ctxfit.io/restart-delay-ms": "500",
    }
    band = {**below, "sim.ctxfit.io/fail-if-above": "858993459200"}  # fail outside [600Gi, 800Gi]
    oom = {"sim.ctxfit.io/behavior": "oomkilled"}
    crash = {"sim.ctxfit.io/behavior": "crash"}
    never = {"sim.ctxfit.io/behavior": "never-ready"}
    cluster.apply(
        [
            pod("oom-low", labels=oom, annotations={**below, key: "536870912000"}),  # 500Gi
            pod("oom-high", labels=oom, annotations={**below, key: "805306368000"}),  # 750Gi
            pod("oom-at", labels=oom, annotations={**below, key: "644245094400"}),  # == M: not below
            pod("oom-nan", labels=oom, annotations={**below, key: "lots"}),
            pod("crash-low", labels=crash, annotations={**below, key: "1"}),
            pod("stuck-low", labels=never, annotations={**below, key: "1"}),
            pod("stuck-high", labels=never, annotations={**below, key: "1000000000000"}),
            pod("band-low", labels=crash, annotations={**band, key: "536870912000"}),
            pod("band-in", labels=crash, annotations={**band, key: "751619276800"}),  # 700Gi
            pod("band-high", labels=crash, annotations={**band, key: "966367641600"}),  # 900Gi
        ],
        namespace=namespace,
    )
    for name in ("oom-high", "oom-at", "oom-nan", "stuck-high", "band-in"):
        wait_for(
            lambda n=name: condition(get_pod(cluster, namespace, n), "Ready") == "True", 30, f"{name} Ready"
        )
    for name in ("oom-low", "crash-low", "band-low", "band-high"):
        wait_for(
            lambda n=name: engine_status(get_pod(cluster, namespace, n)).get("restartCount", 0) >= 1,
            30,
            f"{name} failing",
        )
    s = engine_status(get_pod(cluster, namespace, "oom-low"))
    assert (s["lastState"]["terminated"]["reason"], s["lastState"]["terminated"]["exitCode"]) == ("OOMKilled", 137)
    assert s["state"]["waiting"]["reason"] == "CrashLoopBackOff"
    wait_for(
        lambda: [e for e in events_for(cluster, namespace, "stuck-low") if e["reason"] == "Unhealthy"],
        30,
        "stuck-low Unhealthy event",
    )
    time.sleep(1)
    for name in ("oom-low", "crash-low", "stuck-low", "band-low", "band-high"):
        assert condition(get_pod(cluster, namespace, name), "Ready") != "True", name
        assert not watcher.ever_ready(name), name
    assert condition(get_pod(cluster, namespace, "stuck-low"), "Ready") == "False"


def test_never_ready_has_unhealthy_event(cluster: cc.Cluster, namespace: str, watcher: PodWatcher) -> None:
    cluster.apply(pod("stuck", labels={"sim.ctxfit.io/behavior": "never-ready"}), namespace=namespace)

    def unhealthy() -> list[dict]:
        return [e for e in events_for(cluster, namespace, "stuck") if e["reason"] == "Unhealthy"]

    (ev,) = wait_for(unhealthy, 30, "Unhealthy event")
    p = get_pod(cluster, namespace, "stuck")
    ip = p["status"]["podIP"]
    assert ev["type"] == "Warning"
    assert ev["message"] == (
        f'Startup probe failed: Get "http://{ip}:8000/health": '
        f"dial tcp {ip}:8000: connect: connection refused"
    )
    assert p["status"]["phase"] == "Running"
    assert "running" in engine_status(p)["state"]
    time.sleep(3)
    p = get_pod(cluster, namespace, "stuck")
    assert condition(p, "Ready") == "False" and engine_status(p)["ready"] is False
    assert not watcher.ever_ready("stuck")


def test_ready_after_delay(cluster: cc.Cluster, namespace: str) -> None:
    t0 = time.monotonic()
    cluster.apply(
        pod(
            "slow", labels={"sim.ctxfit.io/behavior": "ready"}, annotations={"sim.ctxfit.io/delay-ms": "3000"}
        ),
        namespace=namespace,
    )
    wait_for(lambda: get_pod(cluster, namespace, "slow")["spec"].get("nodeName"), 30, "scheduled")
    assert condition(get_pod(cluster, namespace, "slow"), "Ready") != "True"
    wait_for(
        lambda: condition(get_pod(cluster, namespace, "slow"), "Ready") == "True", 30, "Ready after delay"
    )
    assert time.monotonic() - t0 >= 2.9


def test_pod_logs_served_by_kwok(cluster: cc.Cluster, namespace: str) -> None:
    cluster.apply(
        pod(
            "talker",
            labels={"sim.ctxfit.io/behavior": "crash"},
            annotations={"sim.ctxfit.io/restart-delay-ms": "60000"},
        ),
        namespace=namespace,
    )
    wait_for(lambda: get_pod(cluster, namespace, "talker")["status"].get("podIP"), 30, "pod started")
    assert "simulated engine log" in cluster.kubectl("-n", namespace, "logs", "talker")
    cluster.set_pod_logs(
        namespace,
        "talker",
        "INFO loading model\nINFO ready on :8000",
        previous="ERROR torch.OutOfMemoryError: CUDA out of memory",
    )
    wait_for(
        lambda: "loading model" in cluster.kubectl("-n", namespace, "logs", "talker", check=False),
        15,
        "per-pod logs",
    )
    assert cluster.kubectl("-n", namespace, "logs", "talker").splitlines() == [
        "INFO loading model",
        "INFO ready on :8000",
    ]
    prev = cluster.kubectl("-n", namespace, "logs", "talker", "--previous")
    assert prev.strip() == "ERROR torch.OutOfMemoryError: CUDA out of memory"


def test_namespace_deletion_completes(cluster: cc.Cluster) -> None:
    ns = f"e2e-del-{uuid.uuid4().hex[:6]}"
    cluster.create_namespace(ns)
    cluster.kubectl("-n", ns, "apply", "-f", "-", input=json.dumps(deployment("d")))
    cluster.kubectl("-n", ns, "rollout", "status", "deployment/d", "--timeout=60s")
    cluster.kubectl("-n", ns, "create", "configmap", "c", "--from-literal=a=b")
    cluster.kubectl("delete", "namespace", ns, "--timeout=90s")
    assert cluster.kubectl_proc("get", "namespace", ns).returncode != 0


def test_owner_deletion_garbage_collects_dependents(cluster: cc.Cluster, namespace: str) -> None:
    owner = json.loads(cluster.kubectl("-n", namespace, "create", "configmap", "owner", "-o", "json"))
    ref = {"apiVersion": "v1", "kind": "ConfigMap", "name": "owner", "uid": owner["metadata"]["uid"]}
    for i in range(3):
        cluster.apply(
            {
                "apiVersion": "v1",
                "kind": "ConfigMap",
                "metadata": {"name": f"dep-{i}", "namespace": namespace, "ownerReferences": [ref]},
            },
            namespace=namespace,
        )
    cluster.apply(deployment("app"), namespace=namespace)
    cluster.kubectl("-n", namespace, "rollout", "status", "deployment/app", "--timeout=60s")
    assert pods_of(cluster, namespace, "app")
    cluster.kubectl("-n", namespace, "delete", "configmap", "owner")
    cluster.kubectl("-n", namespace, "delete", "deployment", "app", "--cascade=background")
    wait_for(
        lambda: (
            not [
                c
                for c in cluster.kubectl_json("-n", namespace, "get", "configmaps")["items"]
                if c["metadata"]["name"].startswith("dep-")
            ]
        ),
        60,
        "dependents collected",
    )
    wait_for(
        lambda: not cluster.kubectl_json("-n", namespace, "get", "replicasets")["items"],
        60,
        "ReplicaSet collected",
    )
    wait_for(lambda: not pods_of(cluster, namespace, "app"), 60, "pods collected")


def test_cli_up_status_down_leaves_nothing(tmp_path: Path, cluster: cc.Cluster) -> None:
    """A separate instance through the CLI: up, kubectl get nodes, status, down; then no process and
    no listening port of it remains."""
    work = tmp_path / "cli"
    env = {**os.environ, "CTXFIT_K8S_BIN_DIR": str(cluster.bin_dir)}
    env.pop("KUBECONFIG", None)
    up = subprocess.run(
        [sys.executable, str(HACK / "cluster.py"), "up", "--dir", str(work)],
        capture_output=True,
        text=True,
        env=env,
        timeout=180,
    )
    try:
        assert up.returncode == 0, up.stderr[-3000:]
        assert f"export KUBECONFIG={work / 'kubeconfig'}" in up.stdout
        second = cc.Cluster(work)
        nodes = second.kubectl("get", "nodes", "-L", "nvidia.com/gpu.product,nvidia.com/gpu.count")
        assert nodes.count(" Ready ") == len(cc.default_nodes()), nodes
        assert "NVIDIA-H200" in nodes
        st = subprocess.run(
            [sys.executable, str(HACK / "cluster.py"), "status", "--dir", str(work)],
            capture_output=True,
            text=True,
            env=env,
        )
        assert st.returncode == 0 and st.stdout.startswith("up:"), st.stdout
        pids, ports = second.pids, second.ports
        assert set(pids) == set(cc.COMPONENTS)
        assert all(cc.port_listening(p) for name, p in ports.items() if name != "etcd_peer")
        report(
            f"ctxfit e2e harness: second instance (CLI `up`) started in {second.state['start_seconds']:.1f} s"
        )
    finally:
        down = subprocess.run(
            [sys.executable, str(HACK / "cluster.py"), "down", "--dir", str(work)],
            capture_output=True,
            text=True,
            env=env,
            timeout=60,
        )
    assert down.returncode == 0, down.stderr
    for name, pid in pids.items():
        assert not cc.pid_alive(pid), f"{name} (pid {pid}) still running"
    # no process of any kind still runs a binary with this work dir in its arguments
    leftovers = subprocess.run(["pgrep", "-f", str(work)], capture_output=True, text=True).stdout.split()
    assert [p for p in leftovers if cc.pid_alive(int(p))] == []
    for name, port in ports.items():
        assert not cc.port_listening(port), f"{name} port {port} still listening"
    assert not (work / "data").exists() and not (work / "state.json").exists()
    st = subprocess.run(
        [sys.executable, str(HACK / "cluster.py"), "status", "--dir", str(work)],
        capture_output=True,
        text=True,
        env=env,
    )
    assert st.returncode == 1 and st.stdout.startswith("down")


def test_conditional_failure_of_one_role(cluster: cc.Cluster, namespace: str, watcher: PodWatcher) -> None:
    """fail-if-label: only the pods with that label value fail (a group's workers, not its leader)."""
    cond = {
        "sim.ctxfit.io/fail-if-label": "ctxfit.io/role=worker",
        "sim.ctxfit.io/fail-if-annotation": "ctxfit.io/context-length",
        "sim.ctxfit.io/fail-if-above": "65536",
        "sim.ctxfit.io/restart-delay-ms": "500",
    }
    crash = {"sim.ctxfit.io/behavior": "crash"}
    long, short = {"ctxfit.io/context-length": "131072"}, {"ctxfit.io/context-length": "32768"}
    cluster.apply(
        [
            pod("worker-long", labels={**crash, "ctxfit.io/role": "worker"}, annotations={**cond, **long}),
            pod("worker-short", labels={**crash, "ctxfit.io/role": "worker"}, annotations={**cond, **short}),
            pod("leader-long", labels={**crash, "ctxfit.io/role": "leader"}, annotations={**cond, **long}),
            pod("unlabelled-long", labels=crash, annotations={**cond, **long}),
            pod("other-value", labels={**crash, "ctxfit.io/role": "worker-2"}, annotations={**cond, **long}),
        ],
        namespace=namespace,
    )
    for name in ("worker-short", "leader-long", "unlabelled-long", "other-value"):
        wait_for(
            lambda n=name: condition(get_pod(cluster, namespace, n), "Ready") == "True", 30, f"{name} Ready"
        )
    wait_for(
        lambda: engine_status(get_pod(cluster, namespace, "worker-long")).get("restartCount", 0) >= 1,
        30,
        "worker-long crashing",
    )
    assert not watcher.ever_ready("worker-long")
