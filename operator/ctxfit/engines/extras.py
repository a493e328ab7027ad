"""Budget terms of LoRA and speculative decoding shared by the engines (bytes per GPU).

LoRA buffers, preallocated at model load for ``slots`` adapters of rank ``rank`` in every wrapped module of every
layer, in the model dtype (vLLM ``lora/layers/base_linear.py BaseLinearLayerWithLoRA.create_lora_weights``: column
parallel ``lora_a [slots, 1, rank, input]`` per slice and ``lora_b [slots, 1, output / TP, rank]``; row parallel
``lora_a [slots, 1, rank, input / TP]``, ``lora_b [slots, 1, output, rank]``; read in the 0.8.5, 0.19.0 and 0.33.0
wheels. SGLang ``lora/mem_pool.py LoRAMemoryPool.get_lora_A_shape / get_lora_B_shape``: ``[slots, stacked x rank,
input (/ TP for row parallel)]`` and ``[slots, output (/ TP for column parallel), rank]``, 0.5.4): per module and
layer ``slots x rank x (slices x input_local + output_local) x 2`` bytes. Both allocate them before the KV pool is
sized (vLLM ``gpu_model_runner.load_model`` under ``DeviceMemoryProfiler``, so "Model loading took" includes them;
SGLang ``model_runner.initialize``: ``init_lora_manager`` before ``init_memory_pool``), so they come out of the pool.
"""

from __future__ import annotations

from dataclasses import dataclass

from ctxfit.vocab.extras import EMBEDDING_MODULES, ModelDims, ResolvedLoRA, module_dims

BF16_BYTES = 2
PUNICA_BYTES_PER_TOKEN = 32
"""vLLM's punica metadata per batched token: int64 ``_token_lora_indices`` and ``_embeddings_indices [2, tokens]``,
int32 ``token_lora_mapping`` and ``token_indices_sorted_by_lora_ids`` (``lora/punica_wrapper``)."""
VLLM_RANKS = (8, 16, 32, 64, 128, 256, 320, 512)
"""``max_lora_rank`` values vLLM accepts (``config/lora.py``: ``possible_max_ranks`` up to 0.11, ``MaxLoRARanks``
from 0.12, which adds 1)."""
VLLM_RANK_ONE_SINCE = (0, 12, 0)


@dataclass(frozen=True)
class ExtraTerm:
    """One budget term LoRA or speculative decoding adds (bytes per GPU).

    Attributes:
        label: the row name (``ctxfit plan``, ``status.plan.perGPU.extras``).
        bytes: size on one GPU.
        in_budget: it comes out of the engine's budget (the KV pool shrinks); else it must fit outside (the
            SGLang slack, vLLM's share outside gpu-memory-utilization) or, with ``host``, in host memory.
        source: the engine code or spec field it comes from.
    """

    label: str
    bytes: int
    in_budget: bool
    source: str
    host: bool = False
    """Host memory (the container's limit), not GPU memory."""


def vllm_rank(rank: int, version: tuple[int, int, int]) -> int | None:
    """The ``--max-lora-rank`` vLLM accepts for ``rank`` (the next allowed value), None above 512."""
    allowed = ((1,) if version >= VLLM_RANK_ONE_SINCE else ()) + VLLM_RANKS
    return next((r for r in allowed if r >= rank), None)


def lora_buffer_bytes(dims: ModelDims, modules: tuple[str, ...], *, slots: int, rank: int, tp: int, pp: int) -> int:
    """GPU bytes of the LoRA buffers on one GPU (module docstring), layers split by ``pp``."""
    layers = -(-dims.layers // pp)
    total = 0
    for module in modules:
        inp, out, slices, row = module_dims(dims, module)
        if module in EMBEDDING_MODULES:
            total += slots * rank * (dims.vocab + dims.hidden) * BF16_BYTES
            continue
        in_local, out_local = (inp // tp, out) if row else (inp, out // tp)
        total += slots * rank * (slices * in_local + out_local) * BF16_BYTES * layers
    return total


def lora_host_bytes(lora: ResolvedLoRA, gpus: int) -> int:
    """Host memory of the adapters each worker keeps loaded: ``cpu_slots`` x the largest adapter x GPUs."""
    return lora.cpu_slots * lora.adapter_bytes * gpus
