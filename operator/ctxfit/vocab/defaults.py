"""Engine-agnostic defaults for the container: startup budget, host memory limit, /dev/shm.

- Startup: ``STARTUP_BASE_SECONDS = 600`` (engine init, CUDA-graph capture, torch.compile) plus the
  weights of one replica read at ``LOAD_BYTES_PER_SECOND = 0.5 GB/s`` (docs/field-reports.md: 540 GB loaded
  in 523 s, ~1 GB/s; half of that leaves room for slower volumes). Kimi-K2.5: 600 + 1080 = 1680 s.
- Host memory limit: ``HOST_MEMORY_BASE = 32 GiB`` plus ``HOST_MEMORY_PER_GPU = 16 GiB`` (one worker
  process per GPU with its CUDA host allocations, pinned buffers and the tokenizer/API server).
- /dev/shm: 2 GiB for one GPU, 16 GiB with TP/PP > 1 (NCCL and multiprocessing segments; the
  container default of 64 MiB fails: tests/fixtures/failures.yaml opt125m-tp2-shm).
"""

from __future__ import annotations

from ctxfit.api import GiB

STARTUP_BASE_SECONDS = 600
LOAD_BYTES_PER_SECOND = 500_000_000
STARTUP_UNKNOWN_WEIGHTS_SECONDS = 1200
"""Startup budget when the weight size is unknown (no weightsPerGPU, model not in the catalog): 20 min."""
HOST_MEMORY_BASE = 32 * GiB
HOST_MEMORY_PER_GPU = 16 * GiB
SHM_SINGLE_GPU = 2 * GiB
SHM_MULTI_GPU = 16 * GiB


def default_startup_timeout_seconds(weights_per_replica_bytes: int) -> int:
    """Startup-probe budget in seconds for a replica holding ``weights_per_replica_bytes`` of weights."""
    return STARTUP_BASE_SECONDS + int(weights_per_replica_bytes / LOAD_BYTES_PER_SECOND)


def default_memory_limit_bytes(gpu_count: int) -> int:
    """Container memory limit (bytes) for a replica with ``gpu_count`` GPUs."""
    return HOST_MEMORY_BASE + HOST_MEMORY_PER_GPU * gpu_count


def default_shm_bytes(gpu_count: int) -> int:
    """/dev/shm size (bytes): NCCL needs room as soon as more than one GPU talks."""
    return SHM_MULTI_GPU if gpu_count > 1 else SHM_SINGLE_GPU
