"""Issue 9 kinds against the real local control plane, with the operator running (kwok's simulated engine).

- MambaCacheTooSmall: the engine refuses max-num-seqs above its Mamba blocks; the operator lowers it to the
  block count, keeps the context, and the next attempt is Ready.
- CUDADriverTooOld: permanent at once, the explanation names the node the pod ran on.
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
