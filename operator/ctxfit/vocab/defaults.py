"""Engine-agnostic defaults for the container: startup budget, host memory limit, /dev/shm.

- Startup: ``STARTUP_BASE_SECONDS = 600`` (engine init, CUDA-graph capture, torch.compile) plus the
  weights of one replica read at ``LOAD_BYTES_PER_SECOND = 0.5 GB/s`` (docs/field-reports.md: 540 GB loaded
  in 523 s, ~1 GB/s; half of that leaves room for slower volumes). Kimi-K2.5: 600 + 1080 = 1680 s.
- Host memory limit: ``HOST_MEMORY_BASE = 32 GiB`` plus ``HOST_MEMORY_PER_GPU = 16 GiB`` (one worker
  process per GPU with its CUDA host allocations, pinned buffers and the tokenizer/API server), plus
  what loading holds in host memory, so the first start does not meet the OOM killer:

  * the weights of one replica (``LOAD_RESIDENT_FRACTION = 1.0`` x weights per GPU x GPUs). vLLM's
    default loader and SGLang's read safetensors through ``safetensors.safe_open`` (an mmap; vLLM
    ``model_executor/model_loader/weight_utils.py`` ``safetensors_weights_iterator``); every page
    the workers touch is page cache charged to the container's memory cgroup (cgroup v2
    ``memory.current`` counts file pages: https://docs.kernel.org/admin-guide/cgroup-v2.html), and
    the run:ai streamer (``--load-format runai_streamer``) buffers up to ``RUNAI_STREAMER_MEMORY_LIMIT``
    in CPU memory, unlimited by default
    (https://github.com/run-ai/runai-model-streamer/blob/master/docs/src/env-vars.md);
  * ``--cpu-offload-gb`` GiB per GPU (vLLM ``CacheConfig.cpu_offload_gb``, SGLang
    ``ServerArgs.cpu_offload_gb``: weights kept in host memory) and ``--swap-space`` GiB per GPU
    (vLLM ``CacheConfig.swap_space``), when the engine args set them.
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
LOAD_RESIDENT_FRACTION = 1.0
"""Share of a replica's weights that loading may hold in host memory at once (see the module docstring)."""
HOST_OFFLOAD_FLAGS = ("--cpu-offload-gb", "--swap-space")
"""Engine flags whose value is GiB of host memory per GPU (vLLM and SGLang ``--cpu-offload-gb``, vLLM
``--swap-space``)."""
SHM_SINGLE_GPU = 2 * GiB
SHM_MULTI_GPU = 16 * GiB


def default_startup_timeout_seconds(weights_per_replica_bytes: int) -> int:
    """Startup-probe budget in seconds for a replica holding ``weights_per_replica_bytes`` of weights."""
    return STARTUP_BASE_SECONDS + int(weights_per_replica_bytes / LOAD_BYTES_PER_SECOND)


def default_memory_limit_bytes(gpu_count: int, weights_per_replica_bytes: int = 0, offload_bytes: int = 0) -> int:
    """Container memory limit (bytes) for a replica with ``gpu_count`` GPUs.

    ``HOST_MEMORY_BASE + HOST_MEMORY_PER_GPU x gpu_count + LOAD_RESIDENT_FRACTION x weights_per_replica_bytes
    + offload_bytes``, rounded up to a whole GiB (the rule and its sources: module docstring).
    """
    total = (HOST_MEMORY_BASE + HOST_MEMORY_PER_GPU * gpu_count
             + int(LOAD_RESIDENT_FRACTION * max(0, weights_per_replica_bytes)) + max(0, offload_bytes))
    return -(-total // GiB) * GiB


def host_offload_bytes(engine_args: list[str], gpu_count: int) -> int:
    """Host bytes the engine args ask for: ``--cpu-offload-gb``/``--swap-space`` GiB per GPU x GPUs.

    Unparseable values count as 0 (the engine rejects them itself).
    """
    total = 0.0
    for i, arg in enumerate(engine_args):
        name, _, value = arg.partition("=")
        if name in HOST_OFFLOAD_FLAGS:
            text = value if value else (engine_args[i + 1] if i + 1 < len(engine_args) else "")
            try:
                gib = float(text)
            except ValueError:
                continue
            if 0 < gib < float("inf"):
                total += gib
    return int(total * GiB) * gpu_count


def default_shm_bytes(gpu_count: int) -> int:
    """/dev/shm size (bytes): NCCL needs room as soon as more than one GPU talks."""
    return SHM_MULTI_GPU if gpu_count > 1 else SHM_SINGLE_GPU
