"""Failure texts that do not belong to one engine: PyTorch CUDA OOM, NCCL, /dev/shm, Triton, SIGTERM.

Sources:
- PyTorch ``c10/cuda/CUDACachingAllocator.cpp`` (torch 2.14 ``libc10_cuda.so`` strings, docs/engine-memory.md
  C): "CUDA out of memory. Tried to allocate ..."; the exception prints as ``torch.OutOfMemoryError``
  (``torch.cuda.OutOfMemoryError`` before torch 2.4). CUDA runtime: "CUDA error: out of memory"
  (e.g. in ``torch.cuda.graphs.CUDAGraph.capture_end``); cuBLAS "CUBLAS_STATUS_ALLOC_FAILED"; NCCL
  "Cuda failure 'out of memory'".
- NCCL ``src/misc/shmutils.cc``: "Error while creating shared memory segment /dev/shm/nccl-XXXX
  (size N)" (tests/fixtures/failures.yaml opt125m-tp2-shm, NCCL 2.21.5); issue 3: "exceeds memory available in
  /dev/shm. The request is for N bytes".
- PyTorch DataLoader: "insufficient shared memory (shm)"; "No space left on device" on /dev/shm; a
  SIGBUS "Bus error" (/dev/shm full while a segment is touched).
- Triton (vLLM/SGLang kernels on SM < 8.9, tests/fixtures/failures.yaml gemma4-31b-ampere-fp8): "type fp8e4nv not
  supported in this architecture", "fp8e4nv data type is not supported on CUDA arch < 89".
- vLLM's SIGTERM handler raises ``KeyboardInterrupt("terminated")`` (tests/fixtures/failures.yaml
  gemma3-1b-startup-probe): the kubelet stopped the container, i.e. a failed startup probe.
- NCCL "NCCL error" / ``ncclSystemError`` without a /dev/shm line: a wrapper (Unknown).
"""

from __future__ import annotations

from ctxfit.vocab.kinds import FailureKind
from ctxfit.vocab.patterns import (
    NUM,
    RANK_HINT,
    RANK_OOM,
    RANK_PROBE,
    RANK_SPECIFIC,
    RANK_WRAPPER,
    TORCH_OOM_EXTRACTORS,
    FailurePattern,
    Phase,
    PhaseMarker,
    extractor,
)

GENERIC_PATTERNS: tuple[FailurePattern, ...] = (
    FailurePattern(
        kind=FailureKind.UNKNOWN,
        markers=(
            "CUDA out of memory",
            "CUDA error: out of memory",
            "OutOfMemoryError",
            "CUBLAS_STATUS_ALLOC_FAILED",
            "Cuda failure 'out of memory'",
            "cudaErrorMemoryAllocation",
        ),
        rank=RANK_OOM,
        source="PyTorch c10/cuda/CUDACachingAllocator.cpp (torch 1.x-2.14); CUDA runtime; cuBLAS; NCCL",
        extractors=TORCH_OOM_EXTRACTORS,
        by_phase=True,
    ),
    FailurePattern(
        kind=FailureKind.SHARED_MEMORY_TOO_SMALL,
        markers=("Error while creating shared memory segment", "exceeds memory available in /dev/shm"),
        rank=RANK_SPECIFIC,
        source="NCCL src/misc/shmutils.cc (2.x); issue 3 /dev/shm wording",
        extractors=(
            extractor("requestedBytes", r"\(size " + NUM + r"\)"),
            extractor("requestedBytes", r"The request is for " + NUM + r" bytes"),
        ),
    ),
    FailurePattern(
        kind=FailureKind.KV_CACHE_DTYPE_UNSUPPORTED,
        markers=("fp8e4nv not supported", "fp8e4nv data type is not supported"),
        rank=RANK_SPECIFIC,
        source="Triton 3.x (fp8e4nv needs SM 8.9+), raised through vLLM/SGLang attention kernels",
    ),
    FailurePattern(
        kind=FailureKind.SHARED_MEMORY_TOO_SMALL,
        markers=("insufficient shared memory (shm)", "No space left on device", "Bus error"),
        rank=RANK_HINT,
        source="PyTorch DataLoader worker; ENOSPC / SIGBUS on a full /dev/shm",
        requires_any=("shm", "shared memory", "Bus error"),
    ),
    FailurePattern(
        kind=FailureKind.STARTUP_PROBE_TIMEOUT,
        markers=("KeyboardInterrupt: terminated",),
        rank=RANK_PROBE,
        source="vLLM entrypoints signal handler (SIGTERM -> KeyboardInterrupt('terminated'))",
    ),
    FailurePattern(
        kind=FailureKind.UNKNOWN,
        markers=("NCCL error", "ncclSystemError", "ncclInternalError", "ncclUnhandledCudaError"),
        rank=RANK_WRAPPER,
        source="torch.distributed DistBackendError / NCCL (cause not named)",
    ),
)
"""Engine-independent failure texts."""

EVENT_PATTERNS: tuple[FailurePattern, ...] = (
    FailurePattern(
        kind=FailureKind.STARTUP_PROBE_TIMEOUT,
        markers=("failed startup probe", "Startup probe failed", "Startup probe errored"),
        rank=RANK_PROBE,
        source="kubelet prober events (pkg/kubelet/prober: 'Startup probe failed: ...'; "
        "kuberuntime: 'Container X failed startup probe, will be restarted')",
    ),
)
"""Patterns run over the pod's Event messages."""

GENERIC_PHASE_MARKERS: tuple[PhaseMarker, ...] = (
    PhaseMarker(Phase.CAPTURE, "capture_end", "torch.cuda.graphs CUDAGraph.capture_end (traceback frame)"),
    PhaseMarker(Phase.CAPTURE, "capture_begin", "torch.cuda.graphs CUDAGraph.capture_begin (traceback frame)"),
    PhaseMarker(Phase.CAPTURE, "torch/cuda/graphs.py", "torch.cuda.graphs (traceback file)"),
    PhaseMarker(Phase.LOADING, "safetensors", "safetensors load (traceback/log)"),
)
"""Phase markers every engine shares (PyTorch frames)."""
