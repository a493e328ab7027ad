"""What an InferenceServer serves (``spec.model``): the model, the attention geometry its KV cache depends on
(``architecture``), and the KV cache dtypes the planner sizes. Part of the InferenceServer API (``api/spec.py``);
re-exported from ``ctxfit.api``.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Annotated, Literal

from pydantic import Field, field_validator, model_validator

from .base import WireModel
from .model_cache import ModelCache, TokenSecretRef
from .quantity import Quantity, TiB, check_quantity_bounds
from .speculative import DraftModel, SpeculativeSpec


class AttentionKind(StrEnum):
    """How a layer stores keys and values: full heads (mha), grouped heads (gqa), or a latent (mla)."""

    MHA = "mha"
    GQA = "gqa"
    MLA = "mla"


KV_CACHE_DTYPES = (
    "auto",
    "bfloat16",
    "float16",
    "fp8",
    "fp8_e4m3",
    "fp8_e5m2",
    "fp8_ds_mla",
    "nvfp4",
)
"""KV cache dtypes the planner can size (vLLM ``CacheDType`` and SGLang ``--kv-cache-dtype`` subset)."""

KVCacheDtype = Literal["auto", "bfloat16", "float16", "fp8", "fp8_e4m3", "fp8_e5m2", "fp8_ds_mla", "nvfp4"]

LayerType = Literal["full_attention", "sliding_attention"]


class Architecture(WireModel):
    """The attention geometry the KV cache depends on (Hugging Face config.json fields).

    ``kvBytesPerToken`` is a measured override (bytes per token per GPU, all layers) for attention the
    formulas do not cover, e.g. DeepSeek-V4's compressed cache at ~3,800 B/token. ``numAttentionHeads``
    (config.json ``num_attention_heads``) lets the planner check that TP divides the query heads. For
    hybrid (Mamba / linear-attention) models ``numLayers`` counts only the layers that hold a KV cache.
    """

    attention: AttentionKind | None = None
    """How each layer stores keys and values: `mha` (full heads), `gqa` (grouped KV heads) or `mla` (one compressed
    latent per token). Required unless kvBytesPerToken is given. Unset architecture: taken from the built-in model
    catalog.
    """
    num_layers: Annotated[int, Field(ge=1, le=1000)] | None = Field(default=None, alias="numLayers")
    """Hidden layers that hold a KV cache (config.json `num_hidden_layers`). Required unless kvBytesPerToken is given.
    """
    num_kv_heads: Annotated[int, Field(ge=1, le=1024)] | None = Field(default=None, alias="numKVHeads")
    """KV heads per layer (config.json `num_key_value_heads`); split across tensor-parallel ranks. Required for
    mha/gqa.
    """
    num_attention_heads: Annotated[int, Field(ge=1, le=4096)] | None = None
    """Query heads per layer (config.json `num_attention_heads`); must divide by tensor parallel. Optional:
    used to refuse layouts the engine cannot split.
    """
    head_dim: Annotated[int, Field(ge=1, le=4096)] | None = None
    """Elements per key head (config.json `head_dim`, else hidden_size / num_attention_heads). Required for mha/gqa.
    """
    v_head_dim: Annotated[int, Field(ge=0, le=4096)] | None = None
    """Elements per value head when it differs from headDim (config.json `v_head_dim`). Unset: equal to headDim."""
    kv_lora_rank: Annotated[int, Field(ge=1, le=8192)] | None = None
    """MLA latent width in elements (config.json `kv_lora_rank`, e.g. 512). Required for mla."""
    qk_rope_head_dim: Annotated[int, Field(ge=0, le=4096)] | None = None
    """MLA rotary key part in elements (config.json `qk_rope_head_dim`, e.g. 64). Required for mla."""
    index_head_dim: Annotated[int, Field(ge=1, le=4096)] | None = None
    """DeepSeek sparse-attention (DSA) indexer key width in elements (config.json `index_head_dim`); adds an fp8
    indexer cache per layer. Unset: no indexer.
    """
    sliding_window: Annotated[int, Field(ge=1)] | None = None
    """Sliding-window size in tokens (config.json `sliding_window`). Required when some layers use sliding attention.
    """
    layer_types: Annotated[list[LayerType], Field(max_length=1000)] | None = None
    """Attention type of every layer, in order (config.json `layer_types`); must have numLayers entries."""
    num_sliding_layers: Annotated[int, Field(ge=0, le=1000)] | None = None
    """How many layers use sliding attention, when layerTypes is not given; at most numLayers."""
    max_position_embeddings: Annotated[int, Field(ge=1, le=1 << 27)] | None = None
    """The model's maximum context in tokens (config.json `max_position_embeddings`); the context is never planned
    above it.
    """
    kv_bytes_per_token: Annotated[int, Field(ge=1, le=1 << 30)] | None = None
    """Measured KV bytes per token per GPU, all layers, for attention the formulas do not cover (e.g. DeepSeek-V4's
    compressed cache); replaces the computed value.
    """

    @model_validator(mode="after")
    def _complete(self) -> Architecture:
        if self.kv_bytes_per_token is not None:
            return self
        if self.attention is None:
            raise ValueError("architecture.attention: required (mha, gqa or mla) unless kvBytesPerToken is given")
        if self.num_layers is None:
            raise ValueError("architecture.numLayers: required unless kvBytesPerToken is given")
        if self.attention is AttentionKind.MLA:
            if self.kv_lora_rank is None or self.qk_rope_head_dim is None:
                raise ValueError("architecture.kvLoraRank: MLA needs kvLoraRank and qkRopeHeadDim")
        else:
            if self.num_kv_heads is None or self.head_dim is None:
                raise ValueError(
                    f"architecture.numKVHeads: {self.attention.value} attention needs numKVHeads and headDim"
                )
        if self.layer_types is not None and len(self.layer_types) != self.num_layers:
            raise ValueError(
                f"architecture.layerTypes: has {len(self.layer_types)} entries, numLayers is {self.num_layers}"
            )
        if self.num_sliding_layers is not None and self.num_sliding_layers > self.num_layers:
            raise ValueError("architecture.numSlidingLayers: cannot exceed numLayers")
        sliding = self.num_sliding_layers or (self.layer_types or []).count("sliding_attention")
        if sliding and self.sliding_window is None:
            raise ValueError("architecture.slidingWindow: required when some layers use sliding attention")
        return self


DraftModel.model_rebuild(_types_namespace={"Architecture": Architecture})
SpeculativeSpec.model_rebuild()


class ModelSpec(WireModel):
    """Which model to serve and, optionally, its architecture and per-GPU weight bytes.

    ``revision``: branch, tag or commit (default main); ``tokenSecretRef``: the Secret key holding a Hugging Face
    token, rendered as HF_TOKEN (the operator never reads it); ``cache``: where the weights live.
    """

    name: Annotated[str, Field(min_length=1, max_length=253)]
    """Model to serve: a Hugging Face id (`moonshotai/Kimi-K2.5`) or a path the engine can load; passed to the engine
    as is.
    """
    architecture: Architecture | None = None
    """Attention geometry for the KV-cache size. Unset: from the built-in catalog for known models; the plan fails with
    a field error for unknown ones.
    """
    weights_per_gpu: Quantity | None = Field(default=None, alias="weightsPerGPU")
    """Weight bytes loaded on each GPU, as a quantity (`70Gi`); between 1Mi and 2Ti. Unset: from the catalog
    (checkpoint size / tensor x pipeline parallel).
    """
    revision: Annotated[str, Field(min_length=1, max_length=255)] = "main"
    """Branch, tag or commit of the Hugging Face repository to download (default `main`)."""
    token_secret_ref: TokenSecretRef | None = None
    """Secret key holding a Hugging Face token, rendered as `HF_TOKEN` from a secretKeyRef (gated models); the
    operator never reads it.
    """
    cache: ModelCache | None = None
    """Where the weights are kept across attempts: exactly one of volumeClaimTemplate, persistentVolumeClaim,
    hostPath, emptyDir. Unset: a claim of the default StorageClass, else emptyDir (every attempt re-downloads).
    """

    @field_validator("weights_per_gpu")
    @classmethod
    def _weights_bounds(cls, value: str | None) -> str | None:
        return check_quantity_bounds(value, upper_bytes=2 * TiB, lower_bytes=1 << 20)
