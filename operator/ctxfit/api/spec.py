"""The InferenceServer API (``ctxfit.io/v1alpha1``): the one source of the CRD schema.

Field names are the wire names (camelCase). Cross-field rules (tensor x pipeline x data ==
gpu.count x nodes, minimum <= target, ...) raise ``ValueError`` whose message starts with the field path, so
the CLI and the operator can print one line that names the field and the rule.
"""

from __future__ import annotations

import re
from enum import StrEnum
from typing import Annotated, Literal

from pydantic import Field, field_validator, model_validator

from .autoscaling import REPLICAS_MESSAGE, AutoscalingSpec
from .base import WireModel
from .kubetypes import EnvVarSource, Toleration
from .lora import LoRASpec
from .model import KVCacheDtype, ModelSpec
from .quantity import GiB, Quantity, TiB, check_cpu_bounds, check_quantity_bounds
from .routing import RoutingSpec, pool_port_problem
from .speculative import SpeculativeSpec
from .validation import (
    DNS1035_LABEL,
    DNS1035_MAX,
    ENGINE_VERSION,
    ENGINE_VERSION_MAX,
    ENV_VAR_NAME,
    IMAGE_REFERENCE,
    IMAGE_REFERENCE_MAX,
    LABEL_VALUE,
    LABEL_VALUE_MAX,
    MAX_ANNOTATION_VALUE,
    MAX_ANNOTATIONS,
    MAX_ARG_LENGTH,
    MAX_ARGS,
    MAX_ENV,
    MAX_ENV_BYTES,
    MAX_ENV_VALUE,
    MAX_LABELS,
    MAX_TOLERATIONS,
    QUALIFIED_NAME,
    SERVER_NAME_MESSAGE,
    managed_flag_in,
    managed_flag_message,
)

API_GROUP = "ctxfit.io"
API_VERSION = "v1alpha1"
KIND = "InferenceServer"
PLURAL = "inferenceservers"


class EngineKind(StrEnum):
    """The inference engines ctxfit knows; dispatch over this enum is exhaustive."""

    VLLM = "vllm"
    SGLANG = "sglang"


class EnvVar(WireModel):
    """A container env var passed through (``value`` or a typed ``valueFrom``, e.g. a secretKeyRef)."""

    name: Annotated[str, Field(min_length=1, max_length=253, pattern=ENV_VAR_NAME)]
    """Environment variable name (a C identifier-like name: letters, digits, `_`, `-`, `.`; not starting with a
    digit)."""
    value: Annotated[str, Field(max_length=MAX_ENV_VALUE)] | None = None
    """Literal value (at most 32 KiB; all values of a server at most 64 KiB); give value or valueFrom."""
    value_from: EnvVarSource | None = None
    """A Kubernetes EnvVarSource (secretKeyRef, configMapKeyRef, fieldRef, resourceFieldRef)."""

    @model_validator(mode="after")
    def _one_source(self) -> EnvVar:
        if self.value and self.value_from is not None:
            raise ValueError(f"engine.env: {self.name} has both value and valueFrom")
        return self


class EngineSpec(WireModel):
    """The engine, its version (selects memory-model and flag variants), image and extra args/env."""

    kind: EngineKind
    """The inference engine: `vllm` or `sglang`. Selects the memory model, flags, probes and failure patterns."""
    version: Annotated[str, Field(max_length=ENGINE_VERSION_MAX, pattern=ENGINE_VERSION)] | None = None
    """Engine version (`0.19.0`, `v0.5.4`); selects version-specific memory accounting and flags. Unset: vLLM 0.20.0 /
    SGLang 0.5.23 behaviour.
    """
    image: Annotated[str, Field(max_length=IMAGE_REFERENCE_MAX, pattern=IMAGE_REFERENCE)] | None = None
    """Container image (no whitespace). Unset: the operator's default image, else the engine's official image for
    version.
    """
    args: Annotated[list[Annotated[str, Field(max_length=MAX_ARG_LENGTH)]], Field(max_length=MAX_ARGS)] = Field(
        default_factory=list)
    """Extra engine arguments appended after the ones ctxfit renders; flags ctxfit manages (context, memory,
    parallelism, host/port) are refused: set them through their spec fields.
    """
    env: Annotated[list[EnvVar], Field(max_length=MAX_ENV)] = Field(default_factory=list)
    """Extra environment variables for the engine container."""

    @model_validator(mode="after")
    def _no_managed_flags(self) -> EngineSpec:
        flag = managed_flag_in(self.args, self.kind.value)
        if flag is not None:
            raise ValueError(managed_flag_message(flag))
        total = sum(len((var.value or "").encode()) for var in self.env)
        if total > MAX_ENV_BYTES:
            raise ValueError(f"engine.env: the values total {total} bytes, at most {MAX_ENV_BYTES}")
        return self


class GPUSpec(WireModel):
    """GPUs per node of a replica (``gpu.count`` on each of ``spec.nodes``).

    ``product`` is the GFD ``nvidia.com/gpu.product`` label; ``memory`` overrides it.
    """

    count: Annotated[int, Field(ge=1, le=64)]
    """GPUs per replica (1-64); must equal tensor x pipeline x data parallelism. Requested as `nvidia.com/gpu`."""
    product: Annotated[str, Field(max_length=LABEL_VALUE_MAX, pattern=LABEL_VALUE)] | None = None
    """GPU product as GPU Feature Discovery labels nodes (`nvidia.com/gpu.product`, e.g. `NVIDIA-H100-80GB-HBM3`); pods
    are pinned to it. Unset: the planner uses the eligible node's label.
    """
    memory: Quantity | None = None
    """GPU memory per device as a quantity (`80Gi`), between 1Gi and 2Ti; overrides the catalog and the node's
    `nvidia.com/gpu.memory` label (MiB).
    """

    @field_validator("memory")
    @classmethod
    def _memory_bounds(cls, value: str | None) -> str | None:
        return check_quantity_bounds(value, upper_bytes=2 * TiB, lower_bytes=1 * GiB)


class Parallelism(WireModel):
    """Tensor (TP), pipeline (PP) and data (DP) parallel sizes; ``expert`` enables expert parallelism."""

    tensor: Annotated[int, Field(ge=1, le=64)] = 1
    """Tensor-parallel size (1-64): splits weights and GQA/MHA KV heads across GPUs; MLA latents are replicated on
    every rank.
    """
    pipeline: Annotated[int, Field(ge=1, le=64)] = 1
    """Pipeline-parallel size (1-64): splits layers across GPUs."""
    data: Annotated[int, Field(ge=1, le=64)] = 1
    """Data-parallel size (1-64): independent engine replicas inside one pod."""
    expert: bool = False
    """Enable expert parallelism for MoE models (vLLM `--enable-expert-parallel`, SGLang `--ep-size` = tensor)."""


class ContextSpec(WireModel):
    """Context length intent: the target, the floor below which the server is useless, and headroom.

    ``headroom`` is the fraction of the predicted KV pool kept free for concurrency and fragmentation
    when the target does not fit (docs/field-reports.md deployment 1: 25%).
    """

    target: Annotated[int, Field(ge=16, le=1 << 27)] | None = None
    """Context length (tokens) wanted, 16 to 2^27. When it does not fit, the largest round size that fits with headroom
    is chosen (down to minimum). Unset: the model's max_position_embeddings.
    """
    minimum: Annotated[int, Field(ge=16, le=1 << 27)] | None = None
    """Smallest useful context (tokens), at most target: below it the server does not start (phase Failed, BudgetFits
    False). Unset: 4096 or the target if smaller.
    """
    headroom: Annotated[float, Field(ge=0.0, lt=1.0)] | None = None
    """Fraction of the predicted KV pool kept free for concurrency and fragmentation when the target does not fit, in
    [0, 1). Unset: 0.25.
    """

    @model_validator(mode="after")
    def _order(self) -> ContextSpec:
        if self.target is not None and self.minimum is not None and self.minimum > self.target:
            raise ValueError(f"context.minimum: {self.minimum} is above context.target {self.target}")
        return self


class MemorySpec(WireModel):
    """Engine memory knobs: vLLM ``--gpu-memory-utilization``, SGLang ``--mem-fraction-static``, KV dtype."""

    gpu_memory_utilization: Annotated[float, Field(gt=0.0, le=1.0)] | None = None
    """vLLM only: fraction (0, 1] of the GPU's CUDA-visible memory the engine may use for weights, activations and KV
    cache (`--gpu-memory-utilization`). Unset: vLLM's default (0.90 up to 0.19, then 0.92). Forbidden with sglang.
    """
    mem_fraction_static: Annotated[float, Field(gt=0.0, lt=1.0)] | None = None
    """SGLang only: fraction (0, 1) of free GPU memory for weights and the KV pool (`--mem-fraction-static`). Unset:
    SGLang's heuristic by GPU size and TP. Forbidden with vllm.
    """
    kv_cache_dtype: KVCacheDtype = "auto"
    """KV cache element type (`--kv-cache-dtype`): `auto` is the model dtype (16-bit); fp8 variants halve KV bytes
    where the GPU and engine support them, otherwise the operator falls back to auto.
    """


class BatchingSpec(WireModel):
    """Scheduler sizes: ``--max-num-seqs``, CUDA-graph max batch, ``--max-num-batched-tokens``."""

    max_num_seqs: Annotated[int, Field(ge=1, le=65536)] | None = None
    """Concurrent sequences (vLLM `--max-num-seqs`, SGLang `--max-running-requests`), 1-65536. Unset: the engine's
    default for the GPU.
    """
    cuda_graph_max_batch_size: Annotated[int, Field(ge=1, le=4096)] | None = None
    """Largest batch captured as a CUDA graph (vLLM `--max-cudagraph-capture-size`, SGLang `--cuda-graph-max-bs`),
    1-4096; lowered first when graph capture runs out of memory. Unset: the engine's default.
    """
    max_num_batched_tokens: Annotated[int, Field(ge=16, le=1 << 24)] | None = None
    """Tokens per scheduler step, 16 to 2^24 (vLLM `--max-num-batched-tokens`; for SGLang the chunked-prefill size the
    budget assumes); sizes activation memory. Unset: the engine's default by GPU memory.
    """


class ResourcesSpec(WireModel):
    """Container host resources: memory limit, cpu, and the /dev/shm emptyDir size."""

    memory: Quantity | None = None
    """Container memory limit (host RAM) as a quantity, 1Mi to 64Ti; raised by the operator after an OOMKill. Unset:
    32Gi + 16Gi per GPU.
    """
    cpu: Quantity | None = None
    """Container CPU request and limit as a quantity (`16`, `8000m`). Unset: no CPU limit."""
    shm: Quantity | None = None
    """Size of the memory-backed /dev/shm emptyDir (NCCL and multiprocessing segments), 1Mi to 64Ti. Unset: 2Gi for one
    GPU, 16Gi for more.
    """

    @field_validator("memory", "shm")
    @classmethod
    def _size_bounds(cls, value: str | None) -> str | None:
        return check_quantity_bounds(value, upper_bytes=64 * TiB, lower_bytes=1 << 20)

    @field_validator("cpu")
    @classmethod
    def _cpu_bounds(cls, value: str | None) -> str | None:
        return check_cpu_bounds(value)


class StartupSpec(WireModel):
    """How long the engine may take to load and become healthy before Kubernetes restarts it."""

    timeout_seconds: Annotated[int, Field(ge=30, le=7 * 24 * 3600)] | None = None
    """Seconds (30 to 7 days) the engine may take to load weights, capture graphs and answer /health before the startup
    probe fails. Unset: 600 + weights per replica at 0.5 GB/s (1200 when the weight size is unknown).
    """


class ServingSpec(WireModel):
    """The engine's HTTP port (OpenAI-compatible API, health and metrics)."""

    port: Annotated[int, Field(ge=1, le=65535)] = 8000
    """Container and Service port of the engine's OpenAI-compatible HTTP API, /health and /metrics."""


class PodSpecOverrides(WireModel):
    """Labels and annotations added to the engine pod (e.g. for scraping or simulation), tolerations."""

    labels: Annotated[dict[str, Annotated[str, Field(max_length=LABEL_VALUE_MAX, pattern=LABEL_VALUE)]],
                      Field(max_length=MAX_LABELS)] = Field(default_factory=dict)
    """Labels added to the engine pod template (ctxfit's own labels win on conflict); keys are qualified names,
    values Kubernetes label values (<= 63 characters).
    """
    annotations: Annotated[dict[str, Annotated[str, Field(max_length=MAX_ANNOTATION_VALUE)]],
                           Field(max_length=MAX_ANNOTATIONS)] = Field(default_factory=dict)
    """Annotations added to the engine pod template."""
    tolerations: Annotated[list[Toleration], Field(max_length=MAX_TOLERATIONS)] = Field(default_factory=list)
    """Tolerations added to the engine pod (e.g. for tainted GPU nodes), Kubernetes Toleration objects."""

    @field_validator("labels", "annotations")
    @classmethod
    def _qualified_keys(cls, value: dict[str, str]) -> dict[str, str]:
        bad = next((k for k in value if not re.match(QUALIFIED_NAME, k)), None)
        if bad is not None:
            raise ValueError(f"{bad!r} is not a qualified name ([prefix/]name, name <= 63 characters)")
        return value


class InferenceServerSpec(WireModel):
    """``spec`` of an InferenceServer: what to serve, on which GPUs, with which intent."""

    model: ModelSpec
    """What to serve: the model name and, optionally, its architecture and per-GPU weight bytes."""
    engine: EngineSpec
    """Which engine runs the model (vllm or sglang), its version, image, extra args and env."""
    gpu: GPUSpec
    """GPUs per replica: count, product (GFD label) and optional memory override."""
    parallelism: Parallelism = Field(default_factory=Parallelism)
    """How the GPUs are used: tensor x pipeline x data must equal gpu.count."""
    context: ContextSpec = Field(default_factory=ContextSpec)
    """Context-length intent: target, minimum and headroom."""
    memory: MemorySpec = Field(default_factory=MemorySpec)
    """Engine memory knobs: vLLM gpuMemoryUtilization or SGLang memFractionStatic, and the KV cache dtype."""
    batching: BatchingSpec = Field(default_factory=BatchingSpec)
    """Scheduler sizes: concurrent sequences, CUDA-graph batch size, tokens per step."""
    resources: ResourcesSpec = Field(default_factory=ResourcesSpec)
    """Host resources of the engine container: memory limit, CPU, /dev/shm size."""
    startup: StartupSpec = Field(default_factory=StartupSpec)
    """How long the engine may take to start before the startup probe fails."""
    serving: ServingSpec = Field(default_factory=ServingSpec)
    """The engine's HTTP port."""
    pod: PodSpecOverrides = Field(default_factory=PodSpecOverrides)
    """Labels, annotations and tolerations added to the engine pod."""
    replicas: Annotated[int, Field(ge=0, le=100)] = 1
    """Engine pods (0-100); 0 keeps the plan but runs nothing. With autoscaling: only the initial count, within
    autoscaling.minReplicas..maxReplicas; the autoscaler owns the count afterwards.
    """
    nodes: Annotated[int, Field(ge=1, le=64)] = 1
    """Nodes one replica spans (a LeaderWorkerSet group of this size when > 1), each with ``gpu.count`` GPUs."""
    attempts: Annotated[int, Field(ge=1, le=20)] = 5
    """How many starts (1-20) the operator tries under one spec, stepping to a safer configuration after each
    classified failure, before phase Failed.
    """
    lora: LoRASpec | None = None
    """LoRA adapters served with the model and the engine's LoRA capacity (GPU buffers for maxLoras adapters of rank
    maxLoraRank in every target module; maxCpuLoras in host memory). Unset: no LoRA."""
    speculative: SpeculativeSpec | None = None
    """Speculative decoding: a draft model, an EAGLE / EAGLE-3 head, the model's MTP layers, or n-gram lookup; the
    budget adds the draft's weights, KV cache and larger CUDA graphs. Unset: none."""
    autoscaling: AutoscalingSpec | None = None
    """Scale replicas with KEDA on the engine's KV-cache usage and waiting requests, thresholds from the server's own
    capacity (needs KEDA and the chart's autoscaling.keda.enabled). Unset: no autoscaling; replicas is the count.
    """
    routing: RoutingSpec = Field(default_factory=RoutingSpec)
    """The inference gateway: the InferencePool the engine pods join (create one or join one by name) and the model
    name clients ask for (needs the Gateway API Inference Extension CRDs and the chart's gateway.enabled).
    """

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
        scaling = self.autoscaling
        if scaling is not None and "replicas" in self.model_fields_set and not (
            scaling.min_replicas <= self.replicas <= scaling.max_replicas
        ):
            raise ValueError(
                f"{REPLICAS_MESSAGE} ({scaling.min_replicas}..{scaling.max_replicas}), not {self.replicas}"
            )
        problem = pool_port_problem(self.engine.kind.value, self.nodes, p.data, self.serving.port,
                                    self.routing.inference_pool is not None, self.engine.args)
        if problem is not None:
            raise ValueError(problem)
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

    @field_validator("name")
    @classmethod
    def _name(cls, value: str) -> str:
        """The API server's own rule for an InferenceServer (``admission.ROOT_CEL_RULES``), so ``ctxfit plan`` refuses
        what ``kubectl apply`` would."""
        if len(value) > DNS1035_MAX or not re.match(DNS1035_LABEL, value):
            raise ValueError(f"{SERVER_NAME_MESSAGE} (got {value[:80]!r})")
        return value


class InferenceServer(WireModel):
    """A whole InferenceServer manifest (apiVersion, kind, metadata, spec); status is ignored here."""

    model_config = WireModel.model_config | {"extra": "ignore"}

    api_version: Literal["ctxfit.io/v1alpha1"] = "ctxfit.io/v1alpha1"
    kind: Literal["InferenceServer"] = "InferenceServer"
    metadata: ObjectMeta = Field(default_factory=ObjectMeta)
    spec: InferenceServerSpec
