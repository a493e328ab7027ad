"""vLLM V1's CUDA-graph memory per GPU: the estimate vLLM deducts from the KV budget from 0.20 on, and the
pool it captures after the KV cache before 0.20 (docs/engine-memory.md A.1).

What vLLM computes (``v1/worker/gpu_model_runner.py::profile_cudagraph_memory``, the same code in the
0.19.0, 0.20.0 and 0.28.0 wheels apart from encoder graphs): per runtime mode (PIECEWISE, FULL) it captures
the two largest batch descriptors into a scratch pool and extrapolates

    estimate = max over modes(first capture) + sum over modes(second capture x (descriptors - 1))

so the deduction is one shared first capture plus a per-graph term times the number of graphs. The
descriptors are the capture sizes (``config/vllm.py::_set_cudagraph_sizes``): ``[1, 2, 4] + range(8, 256, 8) +
range(256, max + 1, 16)`` up to ``max_cudagraph_capture_size`` (``min(2 x max_num_seqs, 512)`` by default,
the value of ``--max-cudagraph-capture-size`` when set, always at most ``max_num_batched_tokens``); PIECEWISE
(mixed batches) uses all of them, FULL (uniform decode, the default ``FULL_AND_PIECEWISE`` mode) only those
``<= max_num_seqs`` (``v1/cudagraph_dispatcher.py``: ``uniform_decode_query_len x max_num_seqs``).

The model: ``CUDA_GRAPH_BASE`` (the first capture) + ``CUDA_GRAPH_PER_LAYER`` x layers on the stage (x1.5 for
MoE) x graphs / ``REFERENCE_GRAPHS``. The per-layer constants come from the vLLM 0.19 H100 sweep's
``cuda_graph_estimated_gib`` (Llama-8B 0.84, 70B TP2 1.82, Qwen3-30B-A3B 1.24), every row of which captured
``PIECEWISE=51 (largest=512)`` and ``FULL=51`` graphs (``REFERENCE_GRAPHS`` = 102; max_num_seqs 1024). A
server with 256 sequences captures 51 + 35 graphs ("Profiling CUDA graph memory: PIECEWISE=51 (largest=512),
FULL=35 (largest=256)" in vllm PR 39559's log), so its per-graph part is 86/102 of the sweep's.

V0 captures decode-only graphs after the KV cache (``worker/model_runner.py::capture_model``), outside the
budget: it keeps the simpler scale by capture size (``v0_cuda_graph_bytes``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ctxfit.api import GiB

if TYPE_CHECKING:
    from ctxfit.vocab.inputs import PlanInputs

CUDA_GRAPH_BASE = int(0.2 * GiB)
CUDA_GRAPH_PER_LAYER = int(0.02 * GiB)
CUDA_GRAPH_MOE_FACTOR = 1.5
CUDA_GRAPH_DEFAULT_CAPTURE = 512
REFERENCE_GRAPHS = 102
"""Graphs the vLLM 0.19 H100 sweep captured per start-up (PIECEWISE 51 + FULL 51), which the per-layer
constant is fitted on (the sweep CSV's ``cudagraph_piecewise_count`` and ``cudagraph_full_count``)."""


def capture_sizes(max_size: int) -> list[int]:
    """vLLM's default capture sizes up to ``max_size`` tokens (``config/vllm.py::_set_cudagraph_sizes``)."""
    sizes = [1, 2, 4, *range(8, 256, 8), *range(256, max_size + 1, 16)]
    return [s for s in sizes if s <= max_size]


def graph_counts(capture_max: int, max_num_seqs: int, max_num_batched_tokens: int) -> tuple[int, int]:
    """(PIECEWISE, FULL) graphs of a V1 server in the default ``FULL_AND_PIECEWISE`` mode.

    Args:
        capture_max: ``--max-cudagraph-capture-size`` (ctxfit always renders it from vLLM 0.11).
        max_num_seqs: FULL decode graphs stop at ``max_num_seqs`` tokens (one token per request).
        max_num_batched_tokens: caps the capture size (``_set_cudagraph_sizes``).
    """
    largest = max(1, min(capture_max, max_num_batched_tokens))
    sizes = capture_sizes(largest)
    return len(sizes), sum(1 for s in sizes if s <= max_num_seqs)


def _stage_layer_bytes(inputs: PlanInputs) -> float:
    layers = -(-(inputs.architecture.num_layers or 32) // inputs.pp)
    return CUDA_GRAPH_PER_LAYER * (CUDA_GRAPH_MOE_FACTOR if inputs.moe else 1.0) * layers


def cuda_graph_bytes(inputs: PlanInputs, capture_max: int, *, max_num_seqs: int, max_num_batched_tokens: int) -> int:
    """V1's CUDA-graph estimate for one GPU, bytes (see the module docstring)."""
    piecewise, full = graph_counts(capture_max, max_num_seqs, max_num_batched_tokens)
    return int(CUDA_GRAPH_BASE + _stage_layer_bytes(inputs) * (piecewise + full) / REFERENCE_GRAPHS)


def v0_cuda_graph_bytes(inputs: PlanInputs, capture_size: int) -> int:
    """V0's decode-graph pool, bytes: the per-layer part scaled by the capture size over 512 (at least 1/4)."""
    scale = min(capture_size, CUDA_GRAPH_DEFAULT_CAPTURE) / CUDA_GRAPH_DEFAULT_CAPTURE
    return int(CUDA_GRAPH_BASE + _stage_layer_bytes(inputs) * max(scale, 0.25))
