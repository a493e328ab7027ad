"""The InferenceServer API (``ctxfit.io/v1alpha1``): the one source of the CRD schema.

Field names are the wire names of issue 2 (camelCase). Cross-field rules (tensor x pipeline x data ==
gpu.count x nodes, minimum <= target, ...) raise ``ValueError`` whose message starts with the field path, so
the CLI and the operator can print one line that names the field and the rule.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Annotated, Any, Literal

from pydantic import Field, field_validator, model_validator

from .base import WireModel
from .quantity import GiB, Quantity, TiB, check_quantity_bounds

API_GROUP = "ctxfit.io"
API_VERSION = "v1alpha1"
KIND = "InferenceServer"
PLURAL = "inferenceservers"


class AttentionKind(StrEnum):
    """How a layer stores keys and values: full heads (mha), grouped heads (gqa), or a latent (mla)."""

    MHA = "mha"
    GQA = "gqa"
    MLA = "mla"


class EngineKind(StrEnum):
    """The inference engines ctxfit knows; dispatch over this enum is exhaustive."""

    VLLM = "vllm"
    SGLANG = "sglang"


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
    formulas do not cover, e.g. DeepSeek-V4's compressed cache at ~3,800 B/token.
    """

    attention: AttentionKind | None = None
    num_layers: Annotated[int, Field(ge=1, le=1000)] | None = Field(default=None, alias="numLayers")
    num_kv_heads: Annotated[int, Field(ge=1, le=1024)] | None = Field(default=None, alias="numKVHeads")
    head_dim: Annotated[int, Field(ge=1, le=4096)] | None = None
    v_head_dim: Annotated[int, Field(ge=0, le=4096)] | None = None
    kv_lora_rank: Annotated[int, Field(ge=1, le=8192)] | None = None
    qk_rope_head_dim: Annotated[int, Field(ge=0, le=4096)] | None = None
    index_head_dim: Annotated[int, Field(ge=1, le=4096)] | None = None
    sliding_window: Annotated[int, Field(ge=1)] | None = None
    layer_types: list[LayerType] | None = None
    num_sliding_layers: Annotated[int, Field(ge=0, le=1000)] | None = None
    max_position_embeddings: Annotated[int, Field(ge=1, le=1 << 27)] | None = None
    kv_bytes_per_token: Annotated[int, Field(ge=1, le=1 << 30)] | None = None

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


class ModelSpec(WireModel):
    """Which model to serve and, optionally, its architecture and per-GPU weight bytes."""

    name: Annotated[str, Field(min_length=1, max_length=253)]
    architecture: Architecture | None = None
    weights_per_gpu: Quantity | None = Field(default=None, alias="weightsPerGPU")

    @field_validator("weights_per_gpu")
    @classmethod
    def _weights_bounds(cls, value: str | None) -> str | None:
        return check_quantity_bounds(value, upper_bytes=2 * TiB, lower_bytes=1 << 20)


class EnvVar(WireModel):
    """A container env var passed through as is (``value`` or ``valueFrom``, e.g. a secretKeyRef)."""

    name: Annotated[str, Field(min_length=1)]
    value: str | None = None
    value_from: dict[str, Any] | None = None


class EngineSpec(WireModel):
    """The engine, its version (selects memory-model and flag variants), image and extra args/env."""

    kind: EngineKind
    version: Annotated[str, Field(pattern=r"^v?\d+\.\d+(\.\d+)?([.+\-].*)?$")] | None = None
    image: str | None = None
    args: list[str] = Field(default_factory=list)
    env: list[EnvVar] = Field(default_factory=list)


class GPUSpec(WireModel):
    """GPUs per node of a replica (``gpu.count`` on each of ``spec.nodes``).

    ``product`` is the GFD ``nvidia.com/gpu.product`` label; ``memory`` overrides it.
    """

    count: Annotated[int, Field(ge=1, le=64)]
    product: str | None = None
    memory: Quantity | None = None

    @field_validator("memory")
    @classmethod
    def _memory_bounds(cls, value: str | None) -> str | None:
        return check_quantity_bounds(value, upper_bytes=2 * TiB, lower_bytes=1 * GiB)


class Parallelism(WireModel):
    """Tensor (TP), pipeline (PP) and data (DP) parallel sizes; ``expert`` enables expert parallelism."""

    tensor: Annotated[int, Field(ge=1, le=64)] = 1
    pipeline: Annotated[int, Field(ge=1, le=64)] = 1
    data: Annotated[int, Field(ge=1, le=64)] = 1
    expert: bool = False


class ContextSpec(WireModel):
    """Context length intent: the target, the floor below which the server is useless, and headroom.

    ``headroom`` is the fraction of the predicted KV pool kept free for concurrency and fragmentation
    when the target does not fit (field-notes.md deployment 1: 25%).
    """

    target: Annotated[int, Field(ge=16, le=1 << 27)] | None = None
    minimum: Annotated[int, Field(ge=16, le=1 << 27)] | None = None
    headroom: Annotated[float, Field(ge=0.0, lt=1.0)] | None = None

    @model_validator(mode="after")
    def _order(self) -> ContextSpec:
        if self.target is not None and self.minimum is not None and self.minimum > self.target:
            raise ValueError(f"context.minimum: {self.minimum} is above context.target {self.target}")
        return self


class MemorySpec(WireModel):
    """Engine memory knobs: vLLM ``--gpu-memory-utilization``, SGLang ``--mem-fraction-static``, KV dtype."""

    gpu_memory_utilization: Annotated[float, Field(gt=0.0, le=1.0)] | None = None
    mem_fraction_static: Annotated[float, Field(gt=0.0, lt=1.0)] | None = None
    kv_cache_dtype: KVCacheDtype = "auto"


class BatchingSpec(WireModel):
    """Scheduler sizes: ``--max-num-seqs``, CUDA-graph max batch, ``--max-num-batched-tokens``."""

    max_num_seqs: Annotated[int, Field(ge=1, le=65536)] | None = None
    cuda_graph_max_batch_size: Annotated[int, Field(ge=1, le=4096)] | None = None
    max_num_batched_tokens: Annotated[int, Field(ge=16, le=1 << 24)] | None = None


class ResourcesSpec(WireModel):
    """Container host resources: memory limit, cpu, and the /dev/shm emptyDir size."""

    memory: Quantity | None = None
    cpu: Quantity | None = None
    shm: Quantity | None = None

    @field_validator("memory", "shm")
    @classmethod
    def _size_bounds(cls, value: str | None) -> str | None:
        return check_quantity_bounds(value, upper_bytes=64 * TiB, lower_bytes=1 << 20)


class StartupSpec(WireModel):
    """How long the engine may take to load and become healthy before Kubernetes restarts it."""

    timeout_seconds: Annotated[int, Field(ge=30, le=7 * 24 * 3600)] | None = None


class ServingSpec(WireModel):
    """The engine's HTTP port (OpenAI-compatible API, health and metrics)."""

    port: Annotated[int, Field(ge=1, le=65535)] = 8000


class PodSpecOverrides(WireModel):
    """Labels and annotations added to the engine pod (e.g. for scraping or simulation), tolerations."""

    labels: dict[str, str] = Field(default_factory=dict)
    annotations: dict[str, str] = Field(default_factory=dict)
    tolerations: list[dict[str, Any]] = Field(default_factory=list)


class InferenceServerSpec(WireModel):
    """``spec`` of an InferenceServer: what to serve, on which GPUs, with which intent."""

    model: ModelSpec
    engine: EngineSpec
    gpu: GPUSpec
    parallelism: Parallelism = Field(default_factory=Parallelism)
    context: ContextSpec = Field(default_factory=ContextSpec)
    memory: MemorySpec = Field(default_factory=MemorySpec)
    batching: BatchingSpec = Field(default_factory=BatchingSpec)
    resources: ResourcesSpec = Field(default_factory=ResourcesSpec)
    startup: StartupSpec = Field(default_factory=StartupSpec)
    serving: ServingSpec = Field(default_factory=ServingSpec)
    pod: PodSpecOverrides = Field(default_factory=PodSpecOverrides)
    replicas: Annotated[int, Field(ge=0, le=100)] = 1
    nodes: Annotated[int, Field(ge=1, le=64)] = 1
    """Nodes one replica spans (a LeaderWorkerSet group of this size when > 1), each with ``gpu.count`` GPUs."""
    attempts: Annotated[int, Field(ge=1, le=20)] = 5

    @model_validator(mode="after")
    def _parallel_matches_gpus(self) -> InferenceServerSpec:
        p = self.parallelism
        product = p.tensor * p.pipeline * p.data
        gpus = self.gpu.count * self.nodes
        if product != gpus and self.nodes == 1:
            raise ValueError(
                "parallelism: tensor x pipeline x data must equal gpu.count "
                f"({p.tensor} x {p.pipeline} x {p.data} = {product}, gpu.count is {self.gpu.count})"
            )
        if product != gpus:
            raise ValueError(
                "parallelism: tensor x pipeline x data must equal gpu.count x nodes "
                f"({p.tensor} x {p.pipeline} x {p.data} = {product}, gpu.count x nodes is "
                f"{self.gpu.count} x {self.nodes} = {gpus})"
            )
        if self.engine.kind is EngineKind.VLLM and self.memory.mem_fraction_static is not None:
            raise ValueError("memory.memFractionStatic: is an SGLang setting; vLLM uses gpuMemoryUtilization")
        if self.engine.kind is EngineKind.SGLANG and self.memory.gpu_memory_utilization is not None:
            raise ValueError("memory.gpuMemoryUtilization: is a vLLM setting; SGLang uses memFractionStatic")
        return self


class ObjectMeta(WireModel):
    """The subset of metadata the planner and CLI read; the operator keeps the full object."""

    model_config = WireModel.model_config | {"extra": "ignore"}

    name: str = "inferenceserver"
    namespace: str | None = None
    labels: dict[str, str] = Field(default_factory=dict)
    annotations: dict[str, str] = Field(default_factory=dict)


class InferenceServer(WireModel):
    """A whole InferenceServer manifest (apiVersion, kind, metadata, spec); status is ignored here."""

    model_config = WireModel.model_config | {"extra": "ignore"}

    api_version: Literal["ctxfit.io/v1alpha1"] = "ctxfit.io/v1alpha1"
    kind: Literal["InferenceServer"] = "InferenceServer"
    metadata: ObjectMeta = Field(default_factory=ObjectMeta)
    spec: InferenceServerSpec
