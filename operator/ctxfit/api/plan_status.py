"""The planner's answer and the configuration that runs, as ``status`` carries them (``status.plan``: the per-GPU
budget in bytes, ``status.effective`` and each attempt's ``effective``: ``EffectiveConfig`` on the wire, sizes as
Kubernetes quantities). Part of ``api/status.py`` (re-exported there and used by ``InferenceServerStatus``).
"""

from __future__ import annotations

from typing import Annotated

from pydantic import Field

from .base import WireModel
from .effective import EffectiveConfig


class BudgetExtra(WireModel):
    """A budget term LoRA or speculative decoding adds (``ctxfit plan`` shows one row per term)."""

    term: Annotated[str, Field(max_length=64)]
    """What it is: `LoRA buffers`, `LoRA host`, `draft weights`, `MTP layers`, `draft KV pool`."""
    bytes: int
    """Its size on one GPU (host memory for `LoRA host`), bytes."""
    in_budget: bool
    """It comes out of the engine's budget (the KV pool shrinks by it); false: it must fit outside the budget or in
    host memory."""
    host_memory: bool = False
    """Host memory (the container's limit), not GPU memory."""
    source: Annotated[str, Field(max_length=512)] = ""
    """The engine code or spec field it comes from."""


class BudgetBytes(WireModel):
    """Per-GPU budget terms, bytes: ``usable = weights + activation + cudaGraph + other + kvCache``."""

    total_bytes: int
    """GPU memory as NVML/GFD report it, bytes."""
    usable_bytes: int
    """What the engine may use: vLLM CUDA-visible total x gpuMemoryUtilization, SGLang memFractionStatic x free memory
    at load, bytes.
    """
    weights_bytes: int
    """Model weights on this GPU, bytes."""
    activation_bytes: int
    """Peak activation memory of the profiling forward pass and sampler warm-up, bytes."""
    cuda_graph_bytes: int
    """CUDA-graph memory deducted from the budget, bytes (0 where the engine keeps it outside)."""
    other_bytes: int
    """Non-torch memory (NCCL and all-reduce buffers), bytes."""
    kv_cache_bytes: int
    """KV cache pool left for requests, bytes."""
    extras: Annotated[list[BudgetExtra], Field(max_length=16)] = Field(default_factory=list)
    """Terms LoRA and speculative decoding add (draft weights, MTP layers, LoRA buffers, a second draft KV pool);
    empty without them."""


class PlanStatus(WireModel):
    """The planner's answer for the spec and the chosen node's GPU (``ctxfit plan -o json`` subset).

    Attributes:
        fits: some context >= the minimum fits.
        target_fits: the target context itself fits (``ctxfit plan`` JSON ``targetFits``).
        context_length: tokens the planner chose (0 when nothing fits).
        max_context_length: predicted largest context, tokens.
        kv_bytes_per_token: KV bytes per token per GPU.
        kv_pool_bytes: KV pool per GPU available to requests, bytes.
        headroom: fraction of the pool kept free when the target did not fit.
        per_gpu: budget terms, bytes.
        gpu_product: the GFD product the plan was made for (from the spec or the chosen node).
        gpu_memory_bytes: GPU total the plan used, bytes.
        reasons: the planner's sentences (choice, warnings, what would make it fit).
        calibration_key: engine/minor/GPU/TP/PP key of the calibration table (``ctxfit.budget.calibrate``).
        calibration_bytes: KV offset the calibration applied to this plan, bytes.
    """

    fits: bool
    target_fits: bool = False
    context_length: int
    max_context_length: int
    kv_bytes_per_token: int
    kv_pool_bytes: int
    headroom: float
    per_gpu: BudgetBytes = Field(alias="perGPU")
    gpu_product: str | None = None
    gpu_memory_bytes: int | None = None
    reasons: list[str] = Field(default_factory=list)
    calibration_key: str | None = None
    calibration_bytes: int | None = None


class EffectiveStatus(WireModel):
    """``EffectiveConfig.to_wire()`` as a typed model (sizes are quantities, e.g. ``500Gi``)."""

    context_length: int
    """Context length in force, tokens (vLLM `--max-model-len`, SGLang `--context-length`)."""
    gpu_memory_utilization: float | None = None
    """vLLM only: `--gpu-memory-utilization` in force (fraction of the CUDA-visible total). Omitted for SGLang."""
    mem_fraction_static: float | None = None
    """SGLang only: `--mem-fraction-static` in force (fraction of free memory for weights + KV pool). Omitted for vLLM.
    """
    kv_cache_dtype: str
    """KV cache dtype in force (`auto` = the model dtype, or an fp8 variant)."""
    max_num_seqs: int
    """Concurrent sequences in force (vLLM `--max-num-seqs`, SGLang `--max-running-requests`)."""
    cuda_graph_max_batch_size: int
    """Largest CUDA-graph batch in force."""
    memory_limit: str
    """Container memory limit in force, a quantity (`500Gi`)."""
    shm_size: str
    """/dev/shm emptyDir size in force, a quantity (`64Gi`)."""
    startup_timeout_seconds: int
    """Startup-probe budget in force, seconds."""
    max_loras: int | None = None
    """LoRA adapters the GPU buffers hold (vLLM `--max-loras`, SGLang `--max-loras-per-batch`). Omitted without
    spec.lora."""
    max_lora_rank: int | None = None
    """Rank the LoRA buffers are sized for (`--max-lora-rank`). Omitted without spec.lora."""
    max_cpu_loras: int | None = None
    """LoRA adapters kept in host memory (vLLM `--max-cpu-loras`, SGLang `--max-loaded-loras`). Omitted without
    spec.lora."""
    num_speculative_tokens: int | None = None
    """Draft tokens per step in force. Omitted without spec.speculative."""

    @classmethod
    def of(cls, effective: EffectiveConfig) -> EffectiveStatus:
        """From the core's ``EffectiveConfig``."""
        return cls.model_validate(effective.to_wire())

    def to_config(self) -> EffectiveConfig:
        """Back to ``EffectiveConfig`` (raises ``ValueError`` on a malformed quantity)."""
        return EffectiveConfig.from_wire(self.model_dump(by_alias=True))

    def to_wire(self) -> dict[str, object]:
        """As ``EffectiveConfig.to_wire``: every core key present (null where not applicable), the LoRA and
        speculative knobs only when set."""
        optional = ("maxLoras", "maxLoraRank", "maxCpuLoras", "numSpeculativeTokens")
        dumped: dict[str, object] = self.model_dump(by_alias=True, mode="json")
        return {k: v for k, v in dumped.items() if k not in optional or v is not None}
