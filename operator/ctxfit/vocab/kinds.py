"""Failure kinds and the classifier's result type.

A ``Failure`` is what the classifier concluded from one failed start: a ``FailureKind``, the numbers
it read from the engine's message (camelCase names; bytes as ``int``, fractions as ``float``), and
the line it matched (``evidence``), so a person can check the diagnosis.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum


class FailureKind(StrEnum):
    """Why an engine container died. Values are the wire names (``ctxfit diagnose``, status, Events)."""

    KV_CACHE_TOO_SMALL = "KVCacheTooSmall"
    NO_KV_CACHE_MEMORY = "NoKVCacheMemory"
    STATIC_MEMORY_TOO_SMALL = "StaticMemoryTooSmall"
    GRAPH_CAPTURE_OOM = "GraphCaptureOOM"
    SAMPLER_WARMUP_OOM = "SamplerWarmupOOM"
    WEIGHTS_DO_NOT_FIT = "WeightsDoNotFit"
    INSUFFICIENT_FREE_GPU_MEMORY = "InsufficientFreeGPUMemory"
    HOST_OOM_KILLED = "HostOOMKilled"
    STARTUP_PROBE_TIMEOUT = "StartupProbeTimeout"
    SHARED_MEMORY_TOO_SMALL = "SharedMemoryTooSmall"
    KV_CACHE_DTYPE_UNSUPPORTED = "KVCacheDtypeUnsupported"
    CONTEXT_EXCEEDS_MODEL_LIMIT = "ContextExceedsModelLimit"
    GPU_OUT_OF_MEMORY = "GPUOutOfMemory"
    MAMBA_CACHE_TOO_SMALL = "MambaCacheTooSmall"
    LORA_BUFFERS_OOM = "LoRABuffersOOM"
    DRAFT_MODEL_OOM = "DraftModelOOM"
    INVALID_PARALLELISM = "InvalidParallelism"
    CUDA_DRIVER_TOO_OLD = "CUDADriverTooOld"
    UNSUPPORTED_GPU = "UnsupportedGPU"
    MODEL_ACCESS_DENIED = "ModelAccessDenied"
    MODEL_NOT_FOUND = "ModelNotFound"
    CACHE_VOLUME_FULL = "CacheVolumeFull"
    EPHEMERAL_STORAGE_EVICTED = "EphemeralStorageEvicted"
    DOWNLOAD_INTERRUPTED = "DownloadInterrupted"
    UNKNOWN = "Unknown"


MEMORY_KINDS = frozenset(
    {
        FailureKind.KV_CACHE_TOO_SMALL,
        FailureKind.NO_KV_CACHE_MEMORY,
        FailureKind.STATIC_MEMORY_TOO_SMALL,
        FailureKind.GRAPH_CAPTURE_OOM,
        FailureKind.SAMPLER_WARMUP_OOM,
        FailureKind.WEIGHTS_DO_NOT_FIT,
        FailureKind.INSUFFICIENT_FREE_GPU_MEMORY,
        FailureKind.HOST_OOM_KILLED,
        FailureKind.SHARED_MEMORY_TOO_SMALL,
        FailureKind.KV_CACHE_DTYPE_UNSUPPORTED,
        FailureKind.GPU_OUT_OF_MEMORY,
        FailureKind.MAMBA_CACHE_TOO_SMALL,
        FailureKind.LORA_BUFFERS_OOM,
        FailureKind.DRAFT_MODEL_OOM,
    }
)
"""Kinds caused by running out of some memory (GPU, host or /dev/shm): after one of them the policy never
raises the context length."""

PERMANENT_KINDS = frozenset(
    {
        FailureKind.WEIGHTS_DO_NOT_FIT,
        FailureKind.INVALID_PARALLELISM,
        FailureKind.CUDA_DRIVER_TOO_OLD,
        FailureKind.UNSUPPORTED_GPU,
        FailureKind.MODEL_ACCESS_DENIED,
        FailureKind.MODEL_NOT_FOUND,
    }
)
"""Kinds no configuration knob of ctxfit can fix: the policy stops at once (configuration errors are
permanent at once; a driver too old is permanent for that node; a GPU whose compute capability has no
kernel for the model's attention, weights or dtype is permanent for that GPU product; credentials are the
user's)."""

NODE_KINDS = frozenset({FailureKind.CUDA_DRIVER_TOO_OLD, FailureKind.UNSUPPORTED_GPU})
"""Kinds that belong to the node the pod ran on (its driver, its GPU product): the failure carries the node's
name."""

DOWNLOAD_KINDS = frozenset(
    {
        FailureKind.MODEL_ACCESS_DENIED,
        FailureKind.MODEL_NOT_FOUND,
        FailureKind.CACHE_VOLUME_FULL,
        FailureKind.EPHEMERAL_STORAGE_EVICTED,
        FailureKind.DOWNLOAD_INTERRUPTED,
    }
)
"""Kinds about getting the weights onto the node (``ctxfit.recovery.download``): none of them is a failed
engine configuration, so none may change an engine flag (no context or memory step-down)."""

Number = int | float
"""A value read from a message: ``int`` for bytes, tokens and counts; ``float`` for fractions."""


@dataclass(frozen=True)
class Failure:
    """The classifier's diagnosis of one failed start.

    Attributes:
        kind: what went wrong.
        numbers: values read from the message, camelCase names, e.g. ``requestedContextLength`` (tokens),
            ``estimatedMaxContextLength`` (tokens), ``neededBytes`` / ``availableBytes`` / ``freeBytes`` /
            ``totalBytes`` / ``requestedBytes`` (bytes, int; the engines print GiB = 2^30 even as "GB"),
            ``minimumMemFractionStatic`` / ``memFractionStatic`` / ``gpuMemoryUtilization`` (fractions),
            ``dummyRequests``, ``derivedMaxContextLength``, ``exitCode``; ``inUseBytes`` /
            ``allocatedBytes`` / ``reservedBytes`` (a CUDA OOM), ``maxNumSeqs`` / ``availableMambaBlocks``
            (MambaCacheTooSmall), ``attentionHeads`` / ``kvHeads`` / ``layers`` / ``experts`` / ``vocabSize`` /
            ``dividedCount`` and ``tensorParallelSize`` / ``pipelineParallelSize`` / ``expertParallelSize`` /
            ``parallelSize`` (InvalidParallelism), ``driverCudaVersion`` (torch "found version 12040") /
            ``requiredCudaVersion`` (CUDADriverTooOld); ``computeCapability`` / ``minimumComputeCapability``
            (UnsupportedGPU, as major.minor, e.g. 7.5); ``otherProcessesBytes`` (a CUDA OOM: memory other
            processes hold on the GPU); ``fp8E5m2Supported`` (1 when the message names fp8e5 among the FP8 types
            the GPU supports); HostOOMKilled read from the log: ``requestedBytes``
            (a failed host mmap / CPU allocation).
        evidence: the matched line (trimmed to ``EVIDENCE_MAX_CHARS`` at a word boundary), or a
            description of the Kubernetes signal (``terminated: reason=OOMKilled exitCode=137``).
        node: the node the pod ran on, for kinds that belong to the node (``NODE_KINDS``), else None.
        silent: ``UNKNOWN`` with nothing to quote: no termination reason, exit code, error line or matching
            Event (the pod showed nothing; e.g. it was lost with its node).
    """

    kind: FailureKind
    numbers: dict[str, Number] = field(default_factory=dict)
    evidence: str = ""
    node: str | None = None
    silent: bool = False

    def to_wire(self) -> dict[str, object]:
        """``{"kind", "numbers", "evidence"}`` (+ ``"node"`` when known) as in ``ctxfit diagnose -o json``."""
        wire: dict[str, object] = {"kind": self.kind.value, "numbers": dict(self.numbers), "evidence": self.evidence}
        if self.node is not None:
            wire["node"] = self.node
        return wire
