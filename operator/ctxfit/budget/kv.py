"""KV-cache bytes per token per GPU, from the attention geometry.

Formulas (docs/engine-memory.md sections A.2 and B.1, read from the engines' source):

- GQA/MHA, per layer per TP rank: ``2 * max(1, n_kv_heads // tp) * head_dim * dtype_bytes``
  (vLLM ``ModelConfig.get_num_kv_heads`` + ``AttentionSpec.page_size_bytes``; SGLang
  ``DefaultPoolConfigurator._compute_cell_size`` with ``v_head_dim == head_dim``). When TP exceeds the
  KV heads each rank holds a replica.
- MLA, per layer: ``(kv_lora_rank + qk_rope_head_dim) * dtype_bytes``, replicated on every TP rank
  (vLLM ``MLAAttentionSpec(max_tp_shards=1)``; SGLang cell size without TP division). ``fp8_ds_mla``
  is 656 B (vLLM ``mla_attention.py`` ``state_content_bytes``; SGLang DSA fp8 layout 512 + 16 + 128).
- DSA indexer (DeepSeek-V3.2, GLM-5): ``index_head_dim + index_head_dim // 128 * 4`` = 132 B per layer,
  uint8, replicated (vLLM ``DeepseekV32IndexerCache.get_kv_cache_spec``).
- Pipeline parallelism splits layers (the largest stage counts); data parallelism does not divide KV.
- Sliding-window layers hold at most ``window - 1 + in-flight tokens`` per request (vLLM
  ``SlidingWindowSpec.max_memory_usage_bytes``); they are reported separately.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from fractions import Fraction

from ctxfit.api import Architecture, AttentionKind

FP8_DS_MLA_BYTES_PER_LAYER = 656
"""vLLM ``mla_attention.py`` ``state_content_bytes["fp8_ds_mla"]``: 512 fp8 + 16 scale + 128 rope bytes."""

FP8_KV_DTYPES = frozenset({"fp8", "fp8_e4m3", "fp8_e5m2", "fp8_ds_mla"})

NVFP4_BYTES_PER_ELEMENT = Fraction(9, 16)
"""nvfp4 KV: 4-bit values plus one fp8 scale per 16 elements = 0.5625 B/element (NVFP4 block format)."""


def kv_dtype_bytes(kv_cache_dtype: str) -> Fraction:
    """Bytes per KV element: 2 for auto/bfloat16/float16 (16-bit models), 1 for fp8 variants, 9/16 for nvfp4.

    Raises:
        ValueError: for a dtype the planner cannot size.
    """
    if kv_cache_dtype in FP8_KV_DTYPES:
        return Fraction(1)
    if kv_cache_dtype in ("auto", "bfloat16", "float16", "bf16"):
        return Fraction(2)
    if kv_cache_dtype == "nvfp4":
        return NVFP4_BYTES_PER_ELEMENT
    raise ValueError(f"memory.kvCacheDtype: cannot size KV cache dtype {kv_cache_dtype!r}")


def indexer_bytes_per_layer(index_head_dim: int) -> int:
    """DSA indexer key cache per token per layer: fp8 key + one fp32 scale per 128 elements (132 for 128)."""
    return index_head_dim + index_head_dim // 128 * 4


@dataclass(frozen=True)
class KVLayout:
    """KV cost of one request on the busiest GPU.

    Attributes:
        full_bytes_per_token: bytes per token per GPU over all full-attention layers on the stage.
        sliding_bytes_per_token: bytes per token per GPU over sliding-window layers (0 if none).
        sliding_window: window of those layers in tokens (0 if none).
        measured: True when ``kvBytesPerToken`` overrode the formulas.
    """

    full_bytes_per_token: int
    sliding_bytes_per_token: int = 0
    sliding_window: int = 0
    measured: bool = False

    @property
    def kv_bytes_per_token(self) -> int:
        """The headline bytes/token/GPU: every layer counted as if it held the token."""
        return self.full_bytes_per_token + self.sliding_bytes_per_token

    def request_bytes(self, context_length: int, *, block_size: int = 16, in_flight_tokens: int = 0) -> int:
        """KV bytes one request of ``context_length`` tokens needs on one GPU (block-rounded).

        Sliding layers keep ``min(window - 1 + in_flight_tokens, L)`` tokens plus one block
        (vLLM ``SlidingWindowSpec.max_memory_usage_bytes``).
        """
        blocks = math.ceil(context_length / block_size)
        total = blocks * block_size * self.full_bytes_per_token
        if self.sliding_bytes_per_token:
            kept = min(self.sliding_window - 1 + in_flight_tokens, context_length)
            total += (math.ceil(kept / block_size) + 1) * block_size * self.sliding_bytes_per_token
        return total

    def max_context_for(
        self, pool_bytes: int, *, block_size: int = 16, in_flight_tokens: int = 0, limit: int = 1 << 27
    ) -> int:
        """Largest context L (multiple of ``block_size``, <= ``limit``) with ``request_bytes(L) <= pool_bytes``.

        Mirrors vLLM ``estimate_max_model_len`` (binary search). Returns 0 when one block does not fit.
        """
        if pool_bytes <= 0 or self.kv_bytes_per_token <= 0:
            return 0
        lo, hi = 0, max(0, limit // block_size)
        while lo < hi:
            mid = (lo + hi + 1) // 2
            if (
                self.request_bytes(mid * block_size, block_size=block_size, in_flight_tokens=in_flight_tokens)
                <= pool_bytes
            ):
                lo = mid
            else:
                hi = mid - 1
        return lo * block_size


def kv_layout(
    arch: Architecture,
    *,
    tensor_parallel: int = 1,
    pipeline_parallel: int = 1,
    kv_cache_dtype: str = "auto",
) -> KVLayout:
    """KV bytes per token per GPU for ``arch`` under TP/PP and a KV dtype.

    Args:
        arch: a validated ``Architecture`` (numLayers and the attention fields, or kvBytesPerToken).
        tensor_parallel: TP size; divides GQA/MHA KV heads (replicating below one head), never MLA.
        pipeline_parallel: PP size; each stage holds ``ceil(layers / pp)`` layers.
        kv_cache_dtype: ``auto``/16-bit (2 B), fp8 variants (1 B), nvfp4 (9/16 B), ``fp8_ds_mla`` (656 B per
            MLA layer).

    Raises:
        ValueError: unsized dtype, or fp8_ds_mla on a non-MLA model.
    """
    if arch.kv_bytes_per_token is not None:
        return KVLayout(full_bytes_per_token=arch.kv_bytes_per_token, measured=True)
    assert arch.num_layers is not None and arch.attention is not None  # guaranteed by Architecture
    dtype_bytes = kv_dtype_bytes(kv_cache_dtype)
    if arch.attention is AttentionKind.MLA:
        assert arch.kv_lora_rank is not None and arch.qk_rope_head_dim is not None
        if kv_cache_dtype == "fp8_ds_mla":
            per_layer = FP8_DS_MLA_BYTES_PER_LAYER
        else:
            per_layer = math.ceil((arch.kv_lora_rank + arch.qk_rope_head_dim) * dtype_bytes)
    else:
        if kv_cache_dtype == "fp8_ds_mla":
            raise ValueError("memory.kvCacheDtype: fp8_ds_mla applies only to MLA models")
        assert arch.num_kv_heads is not None and arch.head_dim is not None
        heads_per_rank = max(1, arch.num_kv_heads // tensor_parallel)
        v_dim = arch.v_head_dim if arch.v_head_dim else arch.head_dim
        per_layer = math.ceil(heads_per_rank * (arch.head_dim + v_dim) * dtype_bytes)
    if arch.index_head_dim:
        per_layer += indexer_bytes_per_layer(arch.index_head_dim)

    layers_total = arch.num_layers
    sliding_total = arch.num_sliding_layers
    if sliding_total is None and arch.layer_types is not None:
        sliding_total = arch.layer_types.count("sliding_attention")
    sliding_total = sliding_total or 0
    full_total = layers_total - sliding_total
    # the busiest pipeline stage holds ceil(L / pp) layers, in the same full/sliding proportion
    stage_full = math.ceil(full_total / pipeline_parallel)
    stage_sliding = math.ceil(sliding_total / pipeline_parallel)
    return KVLayout(
        full_bytes_per_token=stage_full * per_layer,
        sliding_bytes_per_token=stage_sliding * per_layer,
        sliding_window=arch.sliding_window or 0 if sliding_total else 0,
    )


def kv_bytes_per_token(
    arch: Architecture, *, tensor_parallel: int = 1, pipeline_parallel: int = 1, kv_cache_dtype: str = "auto"
) -> int:
    """Headline KV bytes per token per GPU (all layers of the busiest stage); see ``kv_layout``."""
    return kv_layout(
        arch, tensor_parallel=tensor_parallel, pipeline_parallel=pipeline_parallel, kv_cache_dtype=kv_cache_dtype
    ).kv_bytes_per_token
