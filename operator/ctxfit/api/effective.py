"""The configuration in force: what ctxfit chose, as opposed to what the spec asked for.

``EffectiveConfig`` is shared by the planner (initial choice), the recovery policy (next step), the
renderer (engine flags) and status. Sizes are bytes (int) inside and Kubernetes quantity strings on
the wire (``memoryLimit: 750Gi``). Wire keys are those of ``ctxfit diagnose -o json``'s ``next``.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict

from .quantity import bytes_to_quantity, quantity_to_bytes

WIRE_KEYS = (
    "contextLength",
    "gpuMemoryUtilization",
    "memFractionStatic",
    "kvCacheDtype",
    "maxNumSeqs",
    "cudaGraphMaxBatchSize",
    "memoryLimit",
    "shmSize",
    "startupTimeoutSeconds",
    "maxLoras",
    "maxLoraRank",
    "maxCpuLoras",
    "numSpeculativeTokens",
)


class EffectiveConfig(BaseModel):
    """The knobs ctxfit turns. ``None`` means "not applicable to this engine" (e.g. memFractionStatic on vLLM).

    Attributes:
        context_length: tokens, rendered as ``--max-model-len`` / ``--context-length``.
        gpu_memory_utilization: vLLM fraction of the CUDA-visible total (0-1].
        mem_fraction_static: SGLang fraction for weights + KV pool (0-1).
        kv_cache_dtype: ``auto`` (16-bit) or an fp8 variant.
        max_num_seqs: concurrent sequences (vLLM ``--max-num-seqs``, SGLang ``--max-running-requests``).
        cuda_graph_max_batch_size: largest captured CUDA-graph batch.
        memory_limit_bytes: container memory limit (host RAM), bytes.
        shm_bytes: /dev/shm emptyDir size limit, bytes.
        startup_timeout_seconds: startup probe budget, seconds.
        max_loras: adapters the LoRA GPU buffers hold (None without ``spec.lora``).
        max_lora_rank: the rank the LoRA buffers are sized for, as the engine gets it.
        max_cpu_loras: adapters kept in host memory.
        num_speculative_tokens: draft tokens per step (None without ``spec.speculative``).
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    context_length: int
    gpu_memory_utilization: float | None = None
    mem_fraction_static: float | None = None
    kv_cache_dtype: str = "auto"
    max_num_seqs: int
    cuda_graph_max_batch_size: int
    memory_limit_bytes: int
    shm_bytes: int
    startup_timeout_seconds: int
    max_loras: int | None = None
    max_lora_rank: int | None = None
    max_cpu_loras: int | None = None
    num_speculative_tokens: int | None = None

    def to_wire(self) -> dict[str, Any]:
        """camelCase dict with quantities as strings, every core key present (null when not applicable); the LoRA and
        speculative knobs only when they apply."""
        return {
            "contextLength": self.context_length,
            "gpuMemoryUtilization": self.gpu_memory_utilization,
            "memFractionStatic": self.mem_fraction_static,
            "kvCacheDtype": self.kv_cache_dtype,
            "maxNumSeqs": self.max_num_seqs,
            "cudaGraphMaxBatchSize": self.cuda_graph_max_batch_size,
            "memoryLimit": bytes_to_quantity(self.memory_limit_bytes),
            "shmSize": bytes_to_quantity(self.shm_bytes),
            "startupTimeoutSeconds": self.startup_timeout_seconds,
        } | {key: value for key, value in (("maxLoras", self.max_loras), ("maxLoraRank", self.max_lora_rank),
                                           ("maxCpuLoras", self.max_cpu_loras),
                                           ("numSpeculativeTokens", self.num_speculative_tokens))
             if value is not None}

    @classmethod
    def from_wire(cls, data: dict[str, Any]) -> EffectiveConfig:
        """Inverse of ``to_wire`` (accepts quantities or byte ints for the sizes).

        Raises:
            KeyError: a required key is missing. ValueError: a size is not a quantity.
        """
        return cls(
            context_length=int(data["contextLength"]),
            gpu_memory_utilization=data.get("gpuMemoryUtilization"),
            mem_fraction_static=data.get("memFractionStatic"),
            kv_cache_dtype=str(data.get("kvCacheDtype", "auto")),
            max_num_seqs=int(data["maxNumSeqs"]),
            cuda_graph_max_batch_size=int(data["cudaGraphMaxBatchSize"]),
            memory_limit_bytes=quantity_to_bytes(data["memoryLimit"]),
            shm_bytes=quantity_to_bytes(data["shmSize"]),
            startup_timeout_seconds=int(data["startupTimeoutSeconds"]),
            max_loras=_optional_int(data.get("maxLoras")),
            max_lora_rank=_optional_int(data.get("maxLoraRank")),
            max_cpu_loras=_optional_int(data.get("maxCpuLoras")),
            num_speculative_tokens=_optional_int(data.get("numSpeculativeTokens")),
        )


def _optional_int(value: Any) -> int | None:
    return None if value is None else int(value)
