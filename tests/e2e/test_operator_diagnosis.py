"""Failure kinds against the real local control plane, with the operator running (kwok's simulated engine).

- MambaCacheTooSmall: the engine refuses max-num-seqs above its Mamba blocks; the operator lowers it to the
  block count, keeps the context, and the next attempt is Ready.
- CUDADriverTooOld: permanent at once, the explanation names the node the pod ran on.
- UnsupportedGPU on an unpinned spec in a mixed cluster: the GPU products the message rules out are excluded
  (``status.excludedProducts``, a ``GPUProductExcluded`` Event) and the server lands on another product.
"""

from __future__ import annotations

from typing import Any

from .operator_kit import OperatorProcess, ServerClient, condition, manifest, with_sim

MAMBA_MESSAGE = (
    "ValueError: max_num_seqs (1024) exceeds available Mamba cache blocks (614). Each decode sequence requires "
    "one Mamba cache block, so CUDA graph capture cannot proceed. Please lower max_num_seqs to at most 614 or "
    "increase gpu_memory_utilization."
)
DRIVER_MESSAGE = (
    "RuntimeError: Unexpected error from cudaGetDeviceCount(). Did you run some cuda functions before calling "
    "NumCudaDevices() that might have already set an error? Error 804: forward compatibility was attempted on "
    "non supported HW"
)


MXFP8_MESSAGE = (  # vLLM 0.19.0 config/vllm.py, a ModelOpt MXFP8 checkpoint (get_min_capability 100) on Hopper
    "ValueError: The quantization method modelopt_mxfp8 is not supported for the current GPU. Minimum capability: "
    "100. Current capability: 90."
)
H200, RTX = "NVIDIA-H200", "NVIDIA-RTX-PRO-6000-Blackwell-Server-Edition"


def kimi(max_num_seqs: int) -> dict[str, Any]:
    obj = manifest("kimi-128k.yaml")
    obj["spec"].setdefault("batching", {})["maxNumSeqs"] = max_num_seqs
    return obj


def test_mamba_cache_too_small_lowers_max_num_seqs(api: ServerClient, op: OperatorProcess) -> None:
    obj = with_sim(kimi(1024), "crash", message=MAMBA_MESSAGE, fail_if=("ctxfit.io/max-num-seqs", 614))
    api.create(obj)
    server = api.wait_phase("kimi-k25", "Ready")
    first, second = server["status"]["attempts"]
    assert first["failureKind"] == "MambaCacheTooSmall"
    assert first["effective"]["maxNumSeqs"] == 1024 and second["effective"]["maxNumSeqs"] == 614
    assert second["effective"]["contextLength"] == first["effective"]["contextLength"]


def test_cuda_driver_too_old_fails_naming_the_node(api: ServerClient, op: OperatorProcess) -> None:
    api.create(with_sim(manifest("kimi-128k.yaml"), "crash", message=DRIVER_MESSAGE))
    server = api.wait_phase("kimi-k25", "Failed")
    attempts = server["status"]["attempts"]
    assert [a["failureKind"] for a in attempts] == ["CUDADriverTooOld"]
    explanation = attempts[0]["explanation"]
    assert "on node " in explanation and "name unknown" not in explanation, explanation
    ready = condition(server, "Ready")
    assert ready["status"] == "False" and ready["reason"] == "PermanentFailure"


def test_unsupported_gpu_moves_an_unpinned_server_to_another_product(api: ServerClient, op: OperatorProcess) -> None:
    """The default pool (hack/README.md) offers H200 (the largest GPUs, chosen first), H100, L4 and RTX PRO 6000;
    the engine fails only on the H200 (``fail-if-node-selector``) with vLLM's minimum-capability wording, which
    rules out every product below compute capability 10.0: the next attempt runs on the RTX PRO 6000 (12.0)."""
    nodes = api.core.list_node(label_selector="type=kwok").items
    products = {n.metadata.labels.get("nvidia.com/gpu.product"): int(n.metadata.labels["nvidia.com/gpu.memory"])
                for n in nodes if n.metadata.labels.get("nvidia.com/gpu.memory")}
    assert max(products, key=lambda p: products[p]) == H200 and RTX in products, products
    obj = manifest("llama31-8b-h100.yaml")
    obj["spec"]["gpu"].pop("product")
    with_sim(obj, "crash", message=MXFP8_MESSAGE)
    obj["spec"]["pod"]["annotations"]["sim.ctxfit.io/fail-if-node-selector"] = f"nvidia.com/gpu.product={H200}"
    api.create(obj)
    server = api.wait_phase("llama31-8b", "Ready")
    status = server["status"]
    first, second = status["attempts"]
    assert first["failureKind"] == "UnsupportedGPU" and first["node"] == "h200-0"
    assert second["outcome"] == "Succeeded" and status["nodeProduct"] == RTX
    excluded = {e["product"]: e for e in status["excludedProducts"]}
    assert excluded[H200]["attempt"] == 1 and excluded[H200]["computeCapability"] == "9.0"
    assert {"NVIDIA-H100-80GB-HBM3", "NVIDIA-L4"} <= set(excluded) and RTX not in excluded
    deployment = api.deployment("llama31-8b")
    assert deployment is not None
    assert deployment["spec"]["template"]["spec"]["nodeSelector"]["nvidia.com/gpu.product"] == RTX
    running = [p["spec"].get("nodeName") or "" for p in api.pods("llama31-8b")]
    assert running and all(name.startswith("rtx-pro-6000-") for name in running), running
    reasons = api.wait(lambda: [e for e in api.events("llama31-8b") if e["reason"] == "GPUProductExcluded"],
                       "the GPUProductExcluded Event", timeout=10)
    assert H200 in reasons[0]["message"] and reasons[0]["type"] == "Warning"
    assert condition(server, "Ready")["status"] == "True"
