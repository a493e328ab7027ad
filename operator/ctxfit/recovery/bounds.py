"""History bounds the policy: what every earlier failure rules out for later proposals.

A failure of configuration X with kind K says X was wrong on K's knobs, each in one direction: a
KVCacheTooSmall at context C and utilization U says C was too high *for* U (and that KV dtype). So every
later proposal P that is at or beyond X on *all* of K's knobs, each on its failing side, would fail the
same way and is ruled out. For a kind with one knob (HostOOMKilled: memory limit too low) that is a plain
bound on that knob: never propose at or below a limit that was OOM-killed.

| kind | knobs (side that failed) |
|---|---|
| KVCacheTooSmall | context too high, memory fraction too low, KV bytes per token too high |
| ContextExceedsModelLimit | context too high |
| NoKVCacheMemory, StaticMemoryTooSmall | memory fraction too low |
| GraphCaptureOOM, GPUOutOfMemory | memory fraction, CUDA-graph max batch, context and max-num-seqs too high |
| InsufficientFreeGPUMemory | memory fraction too high |
| SamplerWarmupOOM | max-num-seqs too high, memory fraction too high |
| MambaCacheTooSmall | max-num-seqs too high, memory fraction too low |
| HostOOMKilled | memory limit too low |
| SharedMemoryTooSmall | /dev/shm too low |
| StartupProbeTimeout | startup timeout too low |
| KVCacheDtypeUnsupported | that KV dtype |

The memory fraction is the engine's: vLLM ``gpu_memory_utilization``, SGLang ``mem_fraction_static``. KV bytes
per token order the dtypes by element size (``KV_DTYPE_BYTES``: 16-bit 2, FP8 1, FP4 0.5; vLLM
``STR_DTYPE_TO_TORCH_DTYPE`` element sizes). Kinds not listed (Unknown, the permanent kinds) bound nothing.

The table is conservative: a knob that may matter is listed, so a proposal that moved it escapes the
bound (a graph-capture OOM rules out only configurations at least as large on fraction, graph batch *and*
context; the engines size the KV pool by the fraction, but activation peaks can grow with the context).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Literal

from ctxfit.api import EffectiveConfig
from ctxfit.vocab.kinds import FailureKind

Side = Literal["high", "low", "same"]
"""How the failed value was wrong: too high (later values must stay below), too low (must stay above), or
this exact value (a dtype)."""
FRACTION = "memory_fraction"
"""Stands for the engine's memory fraction knob."""
KV_BYTES = "kv_bytes"
"""Stands for the KV dtype ordered by bytes per element."""

_GRAPH_KNOBS: tuple[tuple[str, Side], ...] = (
    (FRACTION, "high"), ("cuda_graph_max_batch_size", "high"), ("context_length", "high"), ("max_num_seqs", "high"),
)

KNOBS: Mapping[FailureKind, tuple[tuple[str, Side], ...]] = MappingProxyType({
    FailureKind.KV_CACHE_TOO_SMALL: (("context_length", "high"), (FRACTION, "low"), (KV_BYTES, "high")),
    FailureKind.CONTEXT_EXCEEDS_MODEL_LIMIT: (("context_length", "high"),),
    FailureKind.NO_KV_CACHE_MEMORY: ((FRACTION, "low"),),
    FailureKind.STATIC_MEMORY_TOO_SMALL: ((FRACTION, "low"),),
    FailureKind.GRAPH_CAPTURE_OOM: _GRAPH_KNOBS,
    FailureKind.GPU_OUT_OF_MEMORY: _GRAPH_KNOBS,
    FailureKind.INSUFFICIENT_FREE_GPU_MEMORY: ((FRACTION, "high"),),
    FailureKind.SAMPLER_WARMUP_OOM: (("max_num_seqs", "high"), (FRACTION, "high")),
    FailureKind.MAMBA_CACHE_TOO_SMALL: (("max_num_seqs", "high"), (FRACTION, "low")),
    FailureKind.HOST_OOM_KILLED: (("memory_limit_bytes", "low"),),
    FailureKind.SHARED_MEMORY_TOO_SMALL: (("shm_bytes", "low"),),
    FailureKind.STARTUP_PROBE_TIMEOUT: (("startup_timeout_seconds", "low"),),
    FailureKind.KV_CACHE_DTYPE_UNSUPPORTED: (("kv_cache_dtype", "same"),),
    FailureKind.LORA_BUFFERS_OOM: (("max_loras", "high"), ("max_lora_rank", "high"), (FRACTION, "high")),
    FailureKind.DRAFT_MODEL_OOM: (("num_speculative_tokens", "high"), (FRACTION, "high")),
})
"""Kind -> the knobs it says were wrong, each with its failing side (the table above)."""

KV_DTYPE_BYTES: Mapping[str, float] = MappingProxyType({
    "auto": 2.0, "bfloat16": 2.0, "float16": 2.0, "bf16": 2.0, "half": 2.0,
    "fp8": 1.0, "fp8_e4m3": 1.0, "fp8_e5m2": 1.0, "fp8_inc": 1.0, "fp8_ds_mla": 1.0,
    "nvfp4": 0.5, "int4": 0.5,
})
"""Bytes per KV element by dtype name (unknown names count as 1 byte)."""


def kv_element_bytes(kv_cache_dtype: str) -> float:
    """Bytes per KV element of ``kv_cache_dtype`` (``KV_DTYPE_BYTES``; unknown: 1.0)."""
    return KV_DTYPE_BYTES.get(kv_cache_dtype, 1.0)


def knob_value(config: EffectiveConfig, knob: str) -> float | str | None:
    """The value of a knob name from ``KNOBS`` in ``config`` (the memory fraction: whichever engine's is set)."""
    if knob == FRACTION:
        if config.gpu_memory_utilization is not None:
            return config.gpu_memory_utilization
        return config.mem_fraction_static
    if knob == KV_BYTES:
        return kv_element_bytes(config.kv_cache_dtype)
    value = getattr(config, knob)
    return value if isinstance(value, int | float | str) else None


def _at_or_beyond(proposed: float | str | None, failed: float | str | None, side: Side) -> bool:
    if proposed is None or failed is None:
        return False
    if side == "same" or isinstance(proposed, str) or isinstance(failed, str):
        return proposed == failed
    if side == "high":
        return proposed >= failed - 1e-9
    return proposed <= failed + 1e-9


@dataclass(frozen=True)
class Failed:
    """One failed start as a bound: the configuration that ran and its kind."""

    config: EffectiveConfig
    kind: FailureKind


def ruled_out_by(proposed: EffectiveConfig, failed: Failed) -> bool:
    """Whether ``proposed`` is at or beyond ``failed`` on every knob of its kind (so it would fail alike)."""
    knobs = KNOBS.get(failed.kind)
    if not knobs:
        return False
    return all(_at_or_beyond(knob_value(proposed, k), knob_value(failed.config, k), side) for k, side in knobs)


def first_ruling(proposed: EffectiveConfig, failures: Iterable[Failed]) -> Failed | None:
    """The first earlier failure that rules ``proposed`` out, else None."""
    for failed in failures:
        if ruled_out_by(proposed, failed):
            return failed
    return None


def bracket(failures: Iterable[Failed], knob: str) -> tuple[Failed | None, Failed | None]:
    """(the highest value that failed as too low, the lowest that failed as too high) for one knob."""
    low: Failed | None = None
    high: Failed | None = None
    for failed in failures:
        for name, side in KNOBS.get(failed.kind, ()):
            if name != knob:
                continue
            value = knob_value(failed.config, knob)
            if not isinstance(value, int | float):
                continue
            if side == "low" and (low is None or value > _number(knob_value(low.config, knob))):
                low = failed
            if side == "high" and (high is None or value < _number(knob_value(high.config, knob))):
                high = failed
    return low, high


def _number(value: float | str | None) -> float:
    return float(value) if isinstance(value, int | float) else 0.0


def describe(failed: Failed, knob: str, flag: str) -> str:
    """"gpu-memory-utilization 0.9 failed with NoKVCacheMemory" for explanations."""
    value = knob_value(failed.config, knob)
    shown = f"{value:g}" if isinstance(value, float) else str(value)
    return f"{flag} {shown} failed with {failed.kind.value}"
