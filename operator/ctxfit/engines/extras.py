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

from ctxfit.vocab.extras import ResolvedLoRA
from ctxfit.vocab.lorageometry import EMBEDDING_MODULES, LoRAGeometry

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


def lora_buffer_bytes(geometry: LoRAGeometry, modules: tuple[str, ...], *, slots: int, rank: int, tp: int,
                      pp: int, experts: bool = False, ep: int = 1) -> int:
    """GPU bytes of the LoRA buffers on one GPU (module docstring), layers split by ``pp``: per linear module
    ``slots x rank x (slices x input_local + output_local)`` per layer; embeddings ``slots x rank x (vocab +
    hidden)``; with ``experts`` the routed experts (vLLM 0.12+ ``FusedMoEWithLoRA._create_lora_a/b_weights``:
    w1 / w3 A ``[slots, local experts, rank, hidden]`` and B ``[slots, local experts, intermediate / TP, rank]``,
    w2 A ``[slots, local experts, rank, intermediate / TP]`` and B ``[slots, local experts, hidden, rank]``; with
    expert parallelism ``ep`` each rank keeps ``experts / ep`` whole experts)."""
    total = 0
    for name in modules:
        module = geometry.module(name)
        if module is None:
            if name in EMBEDDING_MODULES and geometry.vocab:
                total += slots * rank * (geometry.vocab + geometry.hidden) * BF16_BYTES
            continue
        inp, out = module.local(tp)
        total += slots * rank * (module.slices * inp + out) * BF16_BYTES * -(-module.layers // pp)
    block = geometry.experts
    if experts and block is not None and block.layers:
        local_experts, inter = (-(-block.experts // ep), block.intermediate) if ep > 1 else \
            (block.experts, block.intermediate // tp)
        per_layer = slots * local_experts * rank * (2 * block.hidden + 2 * inter + inter + block.hidden)
        total += per_layer * BF16_BYTES * -(-block.layers // pp)
    return total


def lora_host_bytes(lora: ResolvedLoRA, gpus: int) -> int:
    """Host memory of the adapters each worker keeps loaded: ``cpu_slots`` x the largest adapter x GPUs."""
    return lora.cpu_slots * lora.adapter_bytes * gpus
