"""SGLang per-GPU memory model (docs/engine-memory.md section B.1, read from the 0.5.4/0.5.10/0.5.23 wheels).

    pre_free  = free memory before weights load (CUDA total - context - distributed init)
    pool      = mem_fraction_static x pre_free - weights          (kv_cache_configurator._profile_available_bytes)
    tokens    = pool // cell_size                                 (pool_configurator.calculate_pool_sizes)
    slack     = (1 - mem_fraction_static) x pre_free  must hold activations, CUDA graphs, req_to_token, buffers

Version families: 0.4.x (``model_runner.py::profile_max_num_token``), 0.5.4/0.5.10
(``model_runner_kv_cache_mixin.profile_max_num_token``) and 0.5.23 (``kv_cache_configurator.
_profile_available_bytes``) all size the pool as ``post_load_free - pre_load_free x (1 - mem_fraction_static)``
with both frees measured by ``get_available_gpu_memory`` (min over ranks); the CUDA graphs, the
``req_to_token`` pool and activations are allocated after the KV pool, inside the slack, so none of them
enters the pool size. The model has no fitted parameter (the rule is exact given the free memory at load;
only ``pre_free_bytes`` is estimated); ``bench/overhead_fit.py`` reports its error on the start-ups that
print their weights: three of the 0.5 family and four of 0.4 (0.4.1-0.4.6: 4 x L4 TP4, three 80 GB TP1),
median 0.11 GiB (0.4) and 0.17 GiB (0.5), none over-predicted.

Constants:
- free memory before weights load = CUDA total - ``overhead.pre_load_used_bytes`` (CUDA context 0.51 GiB,
  + 1.5 GiB distributed init on NVSwitch systems at TP > 1; measured on vLLM's H100 start-ups, checked
  against SGLang's own "Load weight begin. avail mem": 77.43 GiB on 8x H100 with 79.19 GiB total = 1.76 GiB
  used, and 0.44 GiB on 4x RTX 4090).
- Verified in the wheels: 0.4.9 ``model_runner.py::profile_max_num_token`` (``rest_memory =
  available_gpu_memory - total_gpu_memory * (1 - mem_fraction_static)``, ``total_gpu_memory`` from
  ``init_torch_distributed``'s ``min_per_gpu_memory``) and 0.5.10 ``model_runner_kv_cache_mixin.py::
  profile_max_num_token`` (``post_model_load_memory - pre_model_load_memory * (1 - mem_fraction_static)``,
  minus the mamba cache for hybrid models). 0.5.10 ``model_runner.py`` profiles the pool size first
  (``model_runner_kv_cache_mixin._resolve_memory_pool_config``), then allocates ``ReqToTokenPool`` and the
  KV pool, then ``init_device_graphs``: req_to_token and the graphs come out of the slack, not the pool.
- Slack needs use SGLang's own reservation heuristic (0.5.4 ``server_args.py`` / 0.5.23
  ``memory_hook.handle_gpu_memory_settings``), MiB: activations ``512 + max(chunked_prefill, 2048) x 1.5``;
  CUDA graphs ``cuda_graph_max_bs x 2``; communication ``tp x pp / 8 x 1024``.
- ``req_to_token`` pool: int32 ``(max_running_requests + 1) x (context_length + 4)`` (B.1).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ctxfit.api import EffectiveConfig, GiB, MiB
from ctxfit.engines.base import BudgetTerms
from ctxfit.engines.extras import ExtraTerm
from ctxfit.engines.overhead import pre_load_used_bytes

if TYPE_CHECKING:
    from ctxfit.vocab.inputs import PlanInputs

ACTIVATION_BASE_MIB = 512
ACTIVATION_PER_CHUNK_TOKEN_MIB = 1.5
GRAPH_PER_BS_MIB = 2
COMM_PER_8_RANKS_MIB = 1024
BIG_GPU_MIN_RESERVE_MIB = 10240
MIN_ACTIVATION_RESERVE_MIB = 1536
"""Activation floor for the blocking check: SGLang's base 512 MiB + a 2048-token chunk at 0.5 MiB/token
(a third of the heuristic's 1.5 MiB/token, which is an upper bound) [heuristic]."""
BIG_GPU_MIB = 60 * 1024


def capacity_defaults(gpu_mem_mib: int, tp: int) -> tuple[int, int]:
    """(chunked_prefill_size, cuda_graph_max_bs) by GPU memory (0.5.23 ``memory_hook.py`` table)."""
    if gpu_mem_mib < 20 * 1024:
        return 2048, 8
    if gpu_mem_mib < 35 * 1024:
        return 4096, 48 if tp < 4 else 160
    if gpu_mem_mib < 60 * 1024:
        return 4096, 32 if tp < 4 else 160
    if gpu_mem_mib < 160 * 1024:
        return 8192, 256 if tp < 4 else 512
    return 16384, 512


def pre_free_bytes(inputs: PlanInputs) -> int:
    """Free memory at weight-load begin on the busiest GPU, bytes (``post_load_free`` is this minus weights)."""
    product = inputs.gpu.product if inputs.gpu else inputs.spec.gpu.product
    return inputs.cuda_total_bytes - pre_load_used_bytes(product, inputs.tp * inputs.pp)


def activation_reserve_bytes(chunked_prefill: int) -> int:
    """Activation reservation for a prefill chunk (SGLang heuristic, MiB -> bytes)."""
    return int((ACTIVATION_BASE_MIB + max(chunked_prefill, 2048) * ACTIVATION_PER_CHUNK_TOKEN_MIB) * MiB)


def graph_reserve_bytes(cuda_graph_max_bs: int) -> int:
    """CUDA-graph reservation (SGLang heuristic ``max_bs x 2`` MiB)."""
    return cuda_graph_max_bs * GRAPH_PER_BS_MIB * MiB


def comm_reserve_bytes(tp: int, pp: int) -> int:
    """Communication buffers (SGLang heuristic ``tp x pp / 8 x 1024`` MiB)."""
    return int(tp * pp / 8 * COMM_PER_8_RANKS_MIB * MiB)


def req_to_token_bytes(max_running_requests: int, context_length: int) -> int:
    """int32 ``(max_running_requests + 1) x (context_length + 4)`` (B.1 "Memory outside the KV budget")."""
    return (max_running_requests + 1) * (context_length + 4) * 4


def default_mem_fraction_static(gpu_mem_mib: int, tp: int, pp: int, chunked: int, max_bs: int, *,
                                extra_mib: int = 0) -> float:
    """SGLang's default fraction: ``round((gpu_mem - reserved) / gpu_mem, 3)`` (0.5.23 memory_hook).

    reserved (MiB) = 512 + max(chunked, 2048) x 1.5 + tp x pp / 8 x 1024 + max_bs x 2, at least 10240 on
    GPUs above 60 GiB, plus ``extra_mib`` (a draft's reserve, ``features.reserve_mib``).
    """
    reserved = (
        ACTIVATION_BASE_MIB
        + max(chunked, 2048) * ACTIVATION_PER_CHUNK_TOKEN_MIB
        + tp * pp / 8 * COMM_PER_8_RANKS_MIB
        + max_bs * GRAPH_PER_BS_MIB
    )
    if gpu_mem_mib > BIG_GPU_MIB:
        reserved = max(reserved, BIG_GPU_MIN_RESERVE_MIB)
    return round((gpu_mem_mib - reserved - extra_mib) / gpu_mem_mib, 3)


def default_max_running_requests(pool_tokens: int, context_length: int) -> int:
    """``min(max(min(tokens / context x 512, 4096), 2048), tokens // 2)`` (0.5.23 ``resolve_max_num_reqs``)."""
    if context_length <= 0:
        return 2048
    return max(1, min(max(min(int(pool_tokens / context_length * 512), 4096), 2048), pool_tokens // 2))


def budget(inputs: PlanInputs, effective: EffectiveConfig, *, chunked_prefill: int, graphs_off: bool = False,
           extras: tuple[ExtraTerm, ...] = ()) -> BudgetTerms:
    """Per-GPU budget for SGLang. ``usable = fraction x pre_free = weights + kv``; the activation, CUDA-graph
    and other (communication + req_to_token) terms are what the ``1 - fraction`` slack must hold
    (``outside_bytes``); ``graphs_off``: no decode CUDA graph is captured (``flags.graphs_off``); ``extras``: LoRA and
    draft terms (``features.extra_terms``), in the budget (the pool shrinks) or in the slack.

    Raises:
        ValueError: when ``effective.mem_fraction_static`` is unset.
    """
    if effective.mem_fraction_static is None:
        raise ValueError("SGLang needs mem_fraction_static")
    pre_free = pre_free_bytes(inputs)
    usable = int(effective.mem_fraction_static * pre_free)
    activation = activation_reserve_bytes(chunked_prefill)
    graphs = 0 if graphs_off else graph_reserve_bytes(effective.cuda_graph_max_batch_size)
    other = comm_reserve_bytes(inputs.tp, inputs.pp) + req_to_token_bytes(
        effective.max_num_seqs, max(effective.context_length, 0)
    )
    notes = (
        f"usable: mem-fraction-static {effective.mem_fraction_static} x {pre_free / GiB:.2f} GiB free at load",
        f"weights: {inputs.weights_source}",
        f"activation: SGLang reserve for a {chunked_prefill}-token prefill chunk (in the 1 - fraction slack)",
        "CUDA graphs: none (disabled in engine.args)" if graphs_off
        else f"CUDA graphs: {effective.cuda_graph_max_batch_size} x 2 MiB (in the slack)",
        "other: communication buffers + req_to_token pool (in the slack)",
    )
    return BudgetTerms(
        total_bytes=inputs.gpu_total_bytes,
        cuda_total_bytes=inputs.cuda_total_bytes,
        usable_bytes=usable,
        weights_bytes=inputs.weights_per_gpu_bytes,
        activation_bytes=activation,
        cuda_graph_bytes=graphs,
        other_bytes=other,
        kv_cache_bytes=usable - inputs.weights_per_gpu_bytes - sum(e.bytes for e in extras if e.in_budget),
        outside_bytes=activation + graphs + other + sum(e.bytes for e in extras if not e.in_budget and not e.host),
        notes=notes,
        extras=extras,
    )
