"""The policy chain: one small check per failure kind, in order.

Each check takes a ``PolicyContext`` and returns a ``Decision`` when it applies, else None. Checks list
candidate configurations in order of preference, each changing the fewest knobs in the safe direction;
``ctxfit.recovery.policy.propose`` takes the first that has not failed before. Limits and their sources
are in ``common``.
"""

from __future__ import annotations

from ctxfit.recovery.download import download_check
from ctxfit.recovery.policy import Check
from ctxfit.vocab.kinds import DOWNLOAD_KINDS

from .common import FRACTION_CEILING, UTILIZATION_CEILING
from .container import (
    check_attempts_exhausted,
    check_host_oom_killed,
    check_shared_memory_too_small,
    check_startup_probe_timeout,
    check_unknown,
)
from .context import (
    check_context_ceiling,
    check_context_exceeds_model_limit,
    check_kv_cache_dtype_unsupported,
    check_kv_cache_too_small,
)
from .features import check_draft_model_oom, check_lora_buffers_oom
from .gpu import check_gpu_out_of_memory, check_mamba_cache_too_small
from .memory import (
    check_graph_capture_oom,
    check_insufficient_free_gpu_memory,
    check_no_kv_cache_memory,
    check_sampler_warmup_oom,
    check_static_memory_too_small,
    check_weights_do_not_fit,
)
from .permanent import (
    check_cuda_driver_too_old,
    check_invalid_parallelism,
    check_model_access_denied,
    check_unsupported_gpu,
)

POLICY_CHAIN: tuple[tuple[str, Check], ...] = (
    ("WeightsDoNotFit", check_weights_do_not_fit),
    ("InvalidParallelism", check_invalid_parallelism),
    ("CUDADriverTooOld", check_cuda_driver_too_old),
    ("UnsupportedGPU", check_unsupported_gpu),
    ("ModelAccessDenied", check_model_access_denied),
    ("AttemptsExhausted", check_attempts_exhausted),
    ("ContextCeiling", check_context_ceiling),
    ("LoRABuffersOOM", check_lora_buffers_oom),
    ("DraftModelOOM", check_draft_model_oom),
    ("KVCacheTooSmall", check_kv_cache_too_small),
    ("ContextExceedsModelLimit", check_context_exceeds_model_limit),
    ("NoKVCacheMemory", check_no_kv_cache_memory),
    ("StaticMemoryTooSmall", check_static_memory_too_small),
    ("GraphCaptureOOM", check_graph_capture_oom),
    ("SamplerWarmupOOM", check_sampler_warmup_oom),
    ("MambaCacheTooSmall", check_mamba_cache_too_small),
    ("GPUOutOfMemory", check_gpu_out_of_memory),
    ("InsufficientFreeGPUMemory", check_insufficient_free_gpu_memory),
    ("HostOOMKilled", check_host_oom_killed),
    ("StartupProbeTimeout", check_startup_probe_timeout),
    ("SharedMemoryTooSmall", check_shared_memory_too_small),
    ("KVCacheDtypeUnsupported", check_kv_cache_dtype_unsupported),
    *((kind.value, download_check(kind)) for kind in sorted(DOWNLOAD_KINDS)),
    ("Unknown", check_unknown),
)
"""The chain, in order: the permanent kinds (no knob fixes them, so they come before the attempt bound),
the attempt bound, a model maximum below the minimum, then one
check per kind, Unknown last."""

__all__ = ["FRACTION_CEILING", "POLICY_CHAIN", "UTILIZATION_CEILING"]
