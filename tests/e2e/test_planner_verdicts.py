"""Planner verdicts on the real control plane: a node whose driver is too old for the engine image is
not chosen (GFD ``nvidia.com/cuda.runtime-version``), and a layout the model cannot be split by is a
DoesNotFit verdict before anything starts."""

from __future__ import annotations

from typing import Any

from ctxfit_cluster import NodeSpec

from .operator_kit import GPU_PRODUCT_LABEL, OperatorProcess, ServerClient, condition, manifest


def h20_server() -> dict[str, Any]:
    obj = manifest("kimi-128k.yaml")
    obj["spec"]["gpu"]["product"] = "NVIDIA-H20"
    obj["spec"]["gpu"].pop("memory")
    obj["spec"]["engine"]["version"] = "0.10.1"  # image needs CUDA 12.8
    return obj


def test_old_driver_node_is_not_chosen(api: ServerClient, op: OperatorProcess, cluster: Any, namespace: str) -> None:
    """Only an H20 node with CUDA 12.4: Planning with the driver named; a 12.8 node unblocks it."""
    cluster.add_node(NodeSpec(name=f"h20-old-{namespace}", product="NVIDIA-H20", gpu_memory_mib=97871, gpu_count=8,
                              compute=(9, 0), labels={"nvidia.com/cuda.runtime-version.major": "12",
                                                      "nvidia.com/cuda.runtime-version.minor": "4"}))
    api.create(h20_server())
    server = api.wait_phase("kimi-k25", "Planning")
    fits = condition(server, "BudgetFits")
    assert (fits["status"], fits["reason"]) == ("Unknown", "NoEligibleNode")
    assert f"h20-old-{namespace}" in fits["message"] and "12.8" in fits["message"]
    assert api.deployment("kimi-k25", missing_ok=True) is None
    good = f"h20-new-{namespace}"
    cluster.add_node(NodeSpec(name=good, product="NVIDIA-H20", gpu_memory_mib=97871, gpu_count=8, compute=(9, 0),
                              labels={"nvidia.com/cuda.runtime-version.major": "12",
                                      "nvidia.com/cuda.runtime-version.minor": "8"}))
    api.wait_phase("kimi-k25", "Ready")
    pods = api.pods("kimi-k25")
    assert pods and all(p["spec"].get("nodeName") != f"h20-old-{namespace}" for p in pods)
    deployment = api.deployment("kimi-k25")
    assert deployment is not None
    assert deployment["spec"]["template"]["spec"]["nodeSelector"][GPU_PRODUCT_LABEL] == "NVIDIA-H20"


def test_layout_that_cannot_split_is_does_not_fit(api: ServerClient, op: OperatorProcess) -> None:
    """Llama-3.1-8B on 3 GPUs at TP 3: BudgetFits False / DoesNotFit naming the dividing sizes; nothing runs."""
    obj = manifest("kimi-128k.yaml")
    obj["metadata"]["name"] = "llama-tp3"
    obj["spec"]["model"] = {"name": "meta-llama/Llama-3.1-8B-Instruct"}
    obj["spec"]["gpu"]["count"] = 3
    obj["spec"]["parallelism"] = {"tensor": 3}
    obj["spec"]["context"] = {"target": 8192}
    obj["spec"].pop("memory", None)
    obj["spec"].pop("resources", None)
    api.create(obj)
    server = api.wait_phase("llama-tp3", "Failed")
    fits = condition(server, "BudgetFits")
    assert (fits["status"], fits["reason"]) == ("False", "DoesNotFit")
    assert "parallelism.tensor 3" in fits["message"] and "1, 2, 4, 8" in fits["message"]
    assert server["status"]["plan"]["fits"] is False and server["status"]["plan"]["targetFits"] is False
    assert api.deployment("llama-tp3", missing_ok=True) is None
