"""Fake GPU nodes: their manifests (NVIDIA GPU Feature Discovery labels, nvidia.com/gpu capacity),
the GPU types and default pool of the harness, and the Cluster methods that add nodes and wait for them.

kwok manages every node annotated ``kwok.x-k8s.io/node=fake`` (kwok's --manage-nodes-with-annotation-selector
in cluster_kwok.py) and keeps the status a node is created with, which is how the GPU capacity gets in;
the labels are those GPU Feature Discovery sets (``nvidia.com/gpu.product``, ``.memory`` in MiB,
``.count``, ``.compute.major``/``.minor``, ``.family``).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import yaml
from cluster_kubectl import KubectlClient
from cluster_procs import wait_until


@dataclass
class NodeSpec:
    """A fake node carrying NVIDIA GPU Feature Discovery labels and nvidia.com/gpu capacity."""

    name: str
    product: str | None = None  # nvidia.com/gpu.product, e.g. NVIDIA-H100-80GB-HBM3; None = CPU node
    gpu_memory_mib: int = 0  # nvidia.com/gpu.memory
    gpu_count: int = 0  # nvidia.com/gpu.count and capacity nvidia.com/gpu
    compute: tuple[int, int] = (0, 0)  # nvidia.com/gpu.compute.major / .minor
    family: str | None = None  # nvidia.com/gpu.family
    cpu: str = "128"
    memory: str = "1536Gi"
    pods: str = "110"
    ephemeral_storage: str = "2Ti"
    labels: dict[str, str] = field(default_factory=dict)
    annotations: dict[str, str] = field(default_factory=dict)
    taints: list[dict[str, str]] = field(default_factory=list)

    def manifest(self) -> dict[str, Any]:
        """The Node object to create, status included (capacity = allocatable)."""
        labels = {
            "type": "kwok",
            "kubernetes.io/hostname": self.name,
            "kubernetes.io/os": "linux",
            "kubernetes.io/arch": "amd64",
            "node.kubernetes.io/instance-type": "kwok",
        }
        resources = {
            "cpu": self.cpu,
            "memory": self.memory,
            "pods": self.pods,
            "ephemeral-storage": self.ephemeral_storage,
        }
        if self.product:
            labels.update(
                {
                    "nvidia.com/gpu.present": "true",
                    "nvidia.com/gpu.product": self.product,
                    "nvidia.com/gpu.memory": str(self.gpu_memory_mib),
                    "nvidia.com/gpu.count": str(self.gpu_count),
                    "nvidia.com/gpu.compute.major": str(self.compute[0]),
                    "nvidia.com/gpu.compute.minor": str(self.compute[1]),
                }
            )
            if self.family:
                labels["nvidia.com/gpu.family"] = self.family
            resources["nvidia.com/gpu"] = str(self.gpu_count)
        labels.update(self.labels)
        node: dict[str, Any] = {
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": {
                "name": self.name,
                "labels": labels,
                "annotations": {
                    "node.alpha.kubernetes.io/ttl": "0",
                    "kwok.x-k8s.io/node": "fake",
                    **self.annotations,
                },
            },
            "spec": {},
            "status": {
                "capacity": dict(resources),
                "allocatable": dict(resources),
                "nodeInfo": {
                    "architecture": "amd64",
                    "operatingSystem": "linux",
                    "kubeletVersion": "fake",
                    "kubeProxyVersion": "fake",
                    "bootID": "",
                    "containerRuntimeVersion": "",
                    "kernelVersion": "",
                    "machineID": "",
                    "osImage": "",
                    "systemUUID": "",
                },
                "phase": "Running",
            },
        }
        if self.taints:
            node["spec"]["taints"] = list(self.taints)
        return node


GPU_TYPES: dict[str, dict[str, Any]] = {
    "rtx-pro-6000": dict(
        product="NVIDIA-RTX-PRO-6000-Blackwell-Server-Edition",
        gpu_memory_mib=97887,
        compute=(12, 0),
        family="blackwell",
    ),
    "h100": dict(product="NVIDIA-H100-80GB-HBM3", gpu_memory_mib=81559, compute=(9, 0), family="hopper"),
    "h200": dict(product="NVIDIA-H200", gpu_memory_mib=143771, compute=(9, 0), family="hopper"),
    "l4": dict(product="NVIDIA-L4", gpu_memory_mib=23034, compute=(8, 9), family="ada-lovelace"),
}


def gpu_node(name: str, gpu_type: str, gpu_count: int = 8, **kw: Any) -> NodeSpec:
    """NodeSpec for one of GPU_TYPES (rtx-pro-6000, h100, h200, l4)."""
    return NodeSpec(name=name, gpu_count=gpu_count, **{**GPU_TYPES[gpu_type], **kw})


def default_nodes() -> list[NodeSpec]:
    """The default pool: 2x 8xRTX PRO 6000, 2x 8xH100, 1x 8xH200, 2x 1xL4."""
    nodes: list[NodeSpec] = []
    for gpu_type, n in (("rtx-pro-6000", 2), ("h100", 2), ("h200", 1)):
        nodes += [gpu_node(f"{gpu_type}-{i}", gpu_type, 8) for i in range(n)]
    nodes += [gpu_node(f"l4-{i}", "l4", 1, cpu="16", memory="64Gi") for i in range(2)]
    return nodes


def gfd_labels(gpus: NodeSpec) -> dict[str, str]:
    """The GPU Feature Discovery labels of a NodeSpec (nvidia.com/gpu.*)."""
    labels: dict[str, str] = gpus.manifest()["metadata"]["labels"]
    return {k: v for k, v in labels.items() if k.startswith("nvidia.com/")}


def advertise_gpus(kubectl: Callable[..., str], node: str, gpus: NodeSpec, timeout: float = 30) -> None:
    """Give a node with a real kubelet (the harness's real node, a kind node) GFD labels and ``nvidia.com/gpu``
    capacity and allocatable, as Kubernetes documents advertising an extended resource no device plugin reports
    (a status patch; the kubelet keeps resources it does not manage). ``kubectl(*args) -> stdout``."""
    kubectl("label", "node", node, "--overwrite", *[f"{k}={v}" for k, v in gfd_labels(gpus).items()])
    count = str(gpus.gpu_count)
    patch = [{"op": "add", "path": "/status/capacity/nvidia.com~1gpu", "value": count},
             {"op": "add", "path": "/status/allocatable/nvidia.com~1gpu", "value": count}]
    kubectl("patch", "node", node, "--subresource=status", "--type=json", "-p", json.dumps(patch))

    def advertised() -> bool:
        obj = json.loads(kubectl("get", "node", node, "-o", "json"))
        return bool(obj["status"].get("allocatable", {}).get("nvidia.com/gpu") == count)

    wait_until(advertised, timeout, f"nvidia.com/gpu={count} on node {node}")


class NodesMixin(KubectlClient):
    """Cluster methods for fake nodes (they only need kubectl)."""

    def add_node(self, spec: NodeSpec | None = None, wait: bool = True, **kw: Any) -> str:
        """Add a fake node: add_node(NodeSpec(...)) or add_node(name=..., gpu_type="h100", gpu_count=8, ...)
        or add_node(name=..., product=..., gpu_memory_mib=..., gpu_count=..., compute=(9, 0))."""
        if spec is None:
            gpu_type = kw.pop("gpu_type", None)
            spec = (
                gpu_node(kw.pop("name"), gpu_type, kw.pop("gpu_count", 8), **kw)
                if gpu_type
                else NodeSpec(**kw)
            )
        self.add_nodes([spec], wait=wait)
        return spec.name

    def add_nodes(self, specs: list[NodeSpec], wait: bool = True, timeout: float = 60) -> None:
        """Create the nodes (one kubectl create) and, with `wait`, wait until they are Ready and schedulable.
        Raises KubectlError (e.g. a node of that name exists), HarnessError after `timeout` seconds."""
        if not specs:
            return
        # create (not apply): a Node's status is kept on create, which is how the GPU capacity gets in
        self.kubectl(
            "create", "-f", "-", input=yaml.safe_dump_all([s.manifest() for s in specs], sort_keys=False)
        )
        if wait:
            self.wait_nodes_ready([s.name for s in specs], timeout=timeout)

    def wait_nodes_ready(self, names: list[str], timeout: float = 60) -> None:
        """Until each node is Ready and has no node.kubernetes.io/not-ready taint (schedulable)."""
        want = set(names)

        def ready() -> bool:
            items = self.kubectl_json("get", "nodes")["items"]
            ok = set()
            for n in items:
                conds = {c["type"]: c["status"] for c in n.get("status", {}).get("conditions", [])}
                taints = [t["key"] for t in n.get("spec", {}).get("taints", []) or []]
                if conds.get("Ready") == "True" and "node.kubernetes.io/not-ready" not in taints:
                    ok.add(n["metadata"]["name"])
            return want <= ok

        wait_until(ready, timeout, f"nodes Ready: {sorted(want)}", interval=0.3)
