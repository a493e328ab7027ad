"""vLLM per-GPU memory model (docs/engine-memory.md section A.1, read from the 0.11-0.33 wheels).

    requested = CUDA total x gpu-memory-utilization                 (v1/worker/utils.py::request_memory)
    kv_pool   = requested - weights - non-torch - activation peak   (gpu_worker.determine_available_memory)
                - CUDA-graph estimate (only >= 0.20, VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS default 1)
    fits(L)  <=> request_bytes(L) <= kv_pool - one null block        (kv_cache_planning._check_enough_kv_cache_memory)

Fitted constants (data: tests/fixtures/startups/, the vLLM 0.19.0 H100 sweep):
- ``NON_TORCH_TP1 = 0.25 GiB``: non-torch increase during the profile run at TP 1 (sweep: 0.24-0.27,
  granite 0.46).
- ``NON_TORCH_TP_BASE = 2.0 GiB`` + ``NON_TORCH_PER_RANK = 0.05 GiB`` x TP: TP > 1 adds NCCL/custom
  all-reduce buffers (sweep: TP2 2.06-2.10, TP4 2.13-2.21).
- ``DISTRIBUTED_INIT_BEFORE_SNAPSHOT = 1.5 GiB``: older ``gpu_worker.init_device`` takes the baseline
  ``MemorySnapshot()`` before ``init_worker_distributed_environment``; newer code initializes "the
  distributed environment BEFORE taking memory snapshot. This ensures NCCL buffers are allocated before we
  measure available memory" (both orders seen in public copies of v1/worker/gpu_worker.py; the 0.12
  boundary is [unverified]). With the old order the NCCL communicators land in the non-torch term; size
  from the sweep's ``init_non_torch_memory_gib`` minus TP1's 0.51: TP2 1.00-1.48, TP4 1.02-1.54.
- CUDA-graph estimate ``CUDA_GRAPH_BASE = 0.2 GiB + CUDA_GRAPH_PER_LAYER = 0.02 GiB`` per layer on the
  stage (x1.5 for MoE), scaled by the capture size over 512 (sweep ``cuda_graph_estimated_gib``:
  Llama-8B 0.84, 70B TP2 1.82, Qwen3-30B-A3B 1.24).
- ``CUDA_CONTEXT = 0.5 GiB``: CUDA context + cuBLAS outside the budget (sweep: TP1 init 0.51 GiB).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ctxfit.api import EffectiveConfig, GiB
from ctxfit.engines.base import BudgetTerms
from ctxfit.engines.overhead import activation_peak_bytes

if TYPE_CHECKING:
    from ctxfit.vocab.inputs import PlanInputs

NON_TORCH_TP1 = int(0.25 * GiB)
NON_TORCH_TP_BASE = int(2.0 * GiB)
NON_TORCH_PER_RANK = int(0.05 * GiB)
DISTRIBUTED_INIT_BEFORE_SNAPSHOT = int(1.5 * GiB)
CUDA_GRAPH_BASE = int(0.2 * GiB)
CUDA_GRAPH_PER_LAYER = int(0.02 * GiB)
CUDA_GRAPH_MOE_FACTOR = 1.5
CUDA_GRAPH_DEFAULT_CAPTURE = 512
CUDA_CONTEXT = int(0.5 * GiB)

CUDAGRAPH_DEDUCTED_SINCE = (0, 20, 0)
"""VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS defaults to 1 from 0.20.0 (0 in 0.18/0.19, absent in 0.11)."""

SNAPSHOT_AFTER_DISTRIBUTED_SINCE = (0, 12, 0)


def batch_defaults(cuda_total_bytes: int, version: tuple[int, int, int], product: str | None) -> tuple[int, int]:
    """(max_num_batched_tokens, max_num_seqs) vLLM's OpenAI server picks by device memory.

    Source: 0.33 ``engine/arg_utils.py::get_batch_defaults``: >= 160 GiB -> (16384, 1024) from 0.20;
    >= 70 GiB and not A100 -> (8192, 1024); otherwise (2048, 256). Versions before 0.10 -> (8192, 256).
    """
    if version < (0, 10, 0):
        return 8192, 256
    is_a100 = bool(product and "a100" in product.lower())
    if cuda_total_bytes >= 160 * GiB and version >= (0, 20, 0):
        return 16384, 1024
    if cuda_total_bytes >= 70 * GiB and not is_a100:
        return 8192, 1024
    return 2048, 256


def non_torch_bytes(tensor_parallel: int, version: tuple[int, int, int]) -> int:
    """Non-torch memory vLLM counts inside the budget (see module constants)."""
    if tensor_parallel <= 1:
        return NON_TORCH_TP1
    extra = DISTRIBUTED_INIT_BEFORE_SNAPSHOT if version < SNAPSHOT_AFTER_DISTRIBUTED_SINCE else 0
    return NON_TORCH_TP_BASE + NON_TORCH_PER_RANK * tensor_parallel + extra


def cuda_graph_bytes(inputs: PlanInputs, capture_size: int) -> int:
    """CUDA-graph pool estimate for one GPU (see module constants)."""
    layers = -(-(inputs.architecture.num_layers or 32) // inputs.pp)
    per_layer = CUDA_GRAPH_PER_LAYER * (CUDA_GRAPH_MOE_FACTOR if inputs.moe else 1.0)
    scale = min(capture_size, CUDA_GRAPH_DEFAULT_CAPTURE) / CUDA_GRAPH_DEFAULT_CAPTURE
    return int(CUDA_GRAPH_BASE + per_layer * layers * max(scale, 0.25))


def budget(inputs: PlanInputs, effective: EffectiveConfig, *, max_num_batched_tokens: int) -> BudgetTerms:
    """Per-GPU budget terms for vLLM (bytes); ``kv_cache_bytes`` may be negative (nothing fits).

    Raises:
        ValueError: when ``effective.gpu_memory_utilization`` is unset.
    """
    if effective.gpu_memory_utilization is None:
        raise ValueError("vLLM needs gpu_memory_utilization")
    version = inputs.engine_version
    requested = int(inputs.cuda_total_bytes * effective.gpu_memory_utilization)
    activation = activation_peak_bytes(
        max_num_seqs=effective.max_num_seqs,
        max_num_batched_tokens=max_num_batched_tokens,
        vocab_size=inputs.vocab_size,
        intermediate_size=inputs.intermediate_size,
        moe=inputs.moe,
        tensor_parallel=inputs.tp,
    )
    other = non_torch_bytes(inputs.tp, version)
    graphs = cuda_graph_bytes(inputs, effective.cuda_graph_max_batch_size)
    graphs_deducted = version >= CUDAGRAPH_DEDUCTED_SINCE
    in_budget_graphs = graphs if graphs_deducted else 0
    kv = requested - inputs.weights_per_gpu_bytes - activation.bytes - other - in_budget_graphs
    outside = CUDA_CONTEXT + (0 if graphs_deducted else graphs)
    notes = (
        f"usable: CUDA total {inputs.cuda_total_bytes / GiB:.2f} GiB x gpu-memory-utilization "
        f"{effective.gpu_memory_utilization}",
        f"weights: {inputs.weights_source}",
        f"activation: {activation.note}",
        f"other: non-torch (NCCL/all-reduce buffers) at TP {inputs.tp}",
        "CUDA graphs: estimate deducted from the budget (vLLM >= 0.20)"
        if graphs_deducted
        else f"CUDA graphs: ~{graphs / GiB:.2f} GiB outside the budget (vLLM < 0.20 does not deduct them)",
    )
    return BudgetTerms(
        total_bytes=inputs.gpu_total_bytes,
        cuda_total_bytes=inputs.cuda_total_bytes,
        usable_bytes=requested,
        weights_bytes=inputs.weights_per_gpu_bytes,
        activation_bytes=activation.bytes,
        cuda_graph_bytes=in_budget_graphs,
        other_bytes=other,
        kv_cache_bytes=kv,
        outside_bytes=outside,
        notes=notes,
    )
