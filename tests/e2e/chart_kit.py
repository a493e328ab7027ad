"""What the chart e2e tests share: the chart and manifest paths, ``helm`` against the test cluster, the rendered
operator container's environment, and the in-cluster operator's values and pods."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import cluster_realnode as rn
import ctxfit_cluster as cc
import pytest

REPO = Path(__file__).resolve().parents[2]
CHART = REPO / "charts" / "ctxfit"
KIMI = REPO / "manifests" / "kimi-128k.yaml"


def helm(cluster: cc.Cluster, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    cmd = [str(cluster.bin_dir / "helm"), "--kubeconfig", str(cluster.kubeconfig), *args]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300, check=False)
    if check and proc.returncode != 0:
        pytest.fail(f"`helm {' '.join(args)}` exited {proc.returncode}:\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}")
    return proc


def container_env(container: dict[str, Any], pod_name: str, namespace: str) -> dict[str, str]:
    """The rendered container's environment as the kubelet gives it to a pod ``pod_name`` in ``namespace``: the
    values, and the downward API's metadata.name / metadata.namespace (any other valueFrom fails the test)."""
    downward = {"metadata.name": pod_name, "metadata.namespace": namespace}
    env = {}
    for item in container["env"]:
        if "value" in item:
            env[item["name"]] = item["value"]
        else:
            path = item["valueFrom"]["fieldRef"]["fieldPath"]
            assert path in downward, f"{item['name']}: the test does not resolve {item['valueFrom']}"
            env[item["name"]] = downward[path]
    return env


def incluster_values(image: str) -> list[str]:
    repository, _, tag = image.rpartition(":")
    return ["--set", f"image.repository={repository}", "--set", f"image.tag={tag}",
            "--set", "image.pullPolicy=Never",
            "--set-json", f"nodeSelector={json.dumps({rn.REAL_NODE_LABEL: 'true'})}",
            "--set-json", f"tolerations={json.dumps([rn.TOLERATION])}"]


def operator_pods(cluster: cc.Cluster, ns: str) -> list[dict[str, Any]]:
    pods: list[dict[str, Any]] = cluster.kubectl_json("-n", ns, "get", "pods", "-l",
                                                      "app.kubernetes.io/name=ctxfit")["items"]
    return [p for p in pods if not p["metadata"].get("deletionTimestamp")]


def ready_pod(cluster: cc.Cluster, ns: str) -> dict[str, Any] | None:
    pods = operator_pods(cluster, ns)
    if len(pods) != 1:
        return None
    statuses = pods[0]["status"].get("containerStatuses") or [{}]
    return pods[0] if statuses[0].get("ready") else None
