"""vLLM V1's CUDA-graph memory per GPU: the estimate vLLM deducts from the KV budget from 0.20 on (V1 model
runner only, ``runner.py``), and the pool it captures after the KV cache (before 0.20, and under Model Runner V2)
(docs/engine-memory.md A.1).

What vLLM computes (``v1/worker/gpu_model_runner.py::profile_cudagraph_memory``, the same code in the
0.19.0, 0.20.0 and 0.28.0 wheels apart from encoder graphs): per runtime mode (PIECEWISE, FULL) it captures
the two largest batch descriptors into a scratch pool and extrapolates

    estimate = max over modes(first capture) + sum over modes(second capture x (descriptors - 1))

so the deduction is one shared first capture plus a per-graph term times the number of graphs. The
descriptors are the capture sizes (``config/vllm.py::_set_cudagraph_sizes``): ``[1, 2, 4] + range(8, 256, 8) +
range(256, max + 1, 16)`` up to ``max_cudagraph_capture_size`` (``default_capture_size`` when
``--max-cudagraph-capture-size`` is not passed, always at most ``max_num_batched_tokens``); PIECEWISE (mixed
batches) uses all of them, FULL (uniform decode, the default ``FULL_AND_PIECEWISE`` mode) only those
``<= max_num_seqs`` (``v1/cudagraph_dispatcher.py``: ``uniform_decode_query_len x max_num_seqs``).

Two models of one shape, ``base + per_layer x layers on the stage x architecture factor x graphs /
REFERENCE_GRAPHS``, each fitted on its own column of the vLLM 0.19 H100 sweep (59 start-ups, 36 models, every
row's PIECEWISE/FULL counts from the CSV):

- ``estimate_bytes``, what 0.20+ deducts: the printed "Estimated CUDA graph memory" (``cuda_graph_estimated_gib``;
  ``bench/graph_fit.py``, asymmetric loss, an under-estimate weighing twice). Median |error| 0.10 GiB against
  0.15 for the pool constants below. MLA attention (DeepSeek-V2-Lite, Kimi-VL: 0.031-0.044 GiB per layer at 102
  graphs) doubles the per-layer term; other MoE models (Mixtral, Qwen1.5-MoE, Qwen3-30B-A3B, gpt-oss-20b,
  Llama-4-Scout: 0.018-0.026) add a fifth.
- ``cuda_graph_bytes``, the pool the capture keeps (outside the budget before 0.20 and under Model Runner V2 up to
  0.28; what Model Runner V2 deducts from 0.29, which measures it): the sweep's ``cuda_graph_actual_gib``, same
  loss. Median |error| 0.06 GiB, 4 of 59 start-ups more than 0.1 GiB above the model, against 0.11 and 18 for the
  earlier constants (0.2 GiB + 0.02 GiB per layer, x1.5 for MoE), which V0's decode pool keeps.

V0 captures decode-only graphs after the KV cache (``worker/model_runner.py::capture_model``), outside the
budget: it keeps the simpler scale by capture size (``v0_cuda_graph_bytes``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ctxfit.api import AttentionKind, GiB

if TYPE_CHECKING:
    from ctxfit.vocab.inputs import PlanInputs

CUDA_GRAPH_BASE = int(0.2 * GiB)
CUDA_GRAPH_PER_LAYER = int(0.02 * GiB)
CUDA_GRAPH_MOE_FACTOR = 1.5
CUDA_GRAPH_DEFAULT_CAPTURE = 512
REFERENCE_GRAPHS = 102
"""Graphs most rows of the vLLM 0.19 H100 sweep captured (PIECEWISE 51 + FULL 51; the sweep CSV's
``cudagraph_piecewise_count`` and ``cudagraph_full_count``), the unit the per-layer constants are fitted in."""

ESTIMATE_BASE = int(0.28 * GiB)
ESTIMATE_PER_LAYER = int(0.0175 * GiB)
ESTIMATE_MOE_FACTOR = 1.2
ESTIMATE_MLA_FACTOR = 2.0
"""``estimate_bytes`` constants, printed by ``python bench/graph_fit.py`` (the fit on the sweep's printed estimates)."""

POOL_BASE = int(0.42 * GiB)
POOL_PER_LAYER = int(0.016 * GiB)
POOL_MOE_FACTOR = 1.3
POOL_MLA_FACTOR = 2.5
"""``cuda_graph_bytes`` constants, printed by ``python bench/graph_fit.py`` (the fit on the captured pools)."""

DEFAULT_MAX_CAPTURE = 512
SM100_MAX_CAPTURE = 1024
SM100_MAX_CAPTURE_SINCE = (0, 28, 0)
GPT_OSS_MAX_CAPTURE = 1024
GPT_OSS_ARCHITECTURE = "GptOssForCausalLM"
GPT_OSS_OVERRIDE_SINCE = (0, 19, 0)
"""vLLM's ``max_cudagraph_capture_size`` when neither it nor ``cudagraph_capture_sizes`` is set:
``config/vllm.py::_set_cudagraph_sizes`` takes ``min(max_num_seqs x decode_query_len x 2, 512)`` (1024 on
compute capability 10.x from 0.28.0; 512 on every GPU in 0.19.0-0.27.0), and
``model_executor/models/config.py::GptOssForCausalLMConfig`` raises it to 1024 for gpt-oss ("Increase the max
capture size from 512 to 1024 for performance"; read in the 0.19.0-0.28.0 wheels, earlier releases not read).
ctxfit always passes ``--max-cudagraph-capture-size`` (vLLM >= 0.11), so these apply to start-ups that did not."""


def default_capture_size(
    version: tuple[int, int, int],
    max_num_seqs: int,
    *,
    compute_capability: tuple[int, int] | None,
    architectures: tuple[str, ...] = (),
    speculative_tokens: int = 0,
) -> int:
    """vLLM's largest capture size when ``--max-cudagraph-capture-size`` is not passed (see the constants above).

    Args:
        version: vLLM (major, minor, patch).
        max_num_seqs: ``--max-num-seqs``.
        compute_capability: (major, minor) of the GPU, None when unknown (then not SM100).
        architectures: config.json ``architectures``.
        speculative_tokens: draft tokens per step (``decode_query_len = 1 + speculative_tokens``).
    """
    if GPT_OSS_ARCHITECTURE in architectures and version >= GPT_OSS_OVERRIDE_SINCE:
        return GPT_OSS_MAX_CAPTURE
    sm100 = compute_capability is not None and compute_capability[0] == 10
    ceiling = SM100_MAX_CAPTURE if sm100 and version >= SM100_MAX_CAPTURE_SINCE else DEFAULT_MAX_CAPTURE
    return min(max_num_seqs * (1 + speculative_tokens) * 2, ceiling)


def capture_sizes(max_size: int) -> list[int]:
    """vLLM's default capture sizes up to ``max_size`` tokens (``config/vllm.py::_set_cudagraph_sizes``)."""
    sizes = [1, 2, 4, *range(8, 256, 8), *range(256, max_size + 1, 16)]
    return [s for s in sizes if s <= max_size]


def graph_counts(capture_max: int, max_num_seqs: int, max_num_batched_tokens: int, *, decode_query_len: int = 1,
                 cases: int = 1) -> tuple[int, int]:
    """(PIECEWISE, FULL) graphs of a V1 server in the default ``FULL_AND_PIECEWISE`` mode.

    Args:
        capture_max: ``--max-cudagraph-capture-size`` (ctxfit always renders it from vLLM 0.11).
        max_num_seqs: FULL decode graphs stop at ``max_num_seqs x decode_query_len`` tokens.
        max_num_batched_tokens: caps the capture size (``_set_cudagraph_sizes``).
        decode_query_len: tokens per request in a decode step (1 + speculative tokens).
        cases: LoRA captures every graph with and without LoRA (``features.graph_shape``).
    """
    largest = max(1, min(capture_max, max_num_batched_tokens))
    sizes = capture_sizes(largest)
    full = sum(1 for s in sizes if s <= max_num_seqs * decode_query_len)
    return len(sizes) * cases, full * cases


def _stage_layer_bytes(inputs: PlanInputs) -> float:
    layers = -(-(inputs.architecture.num_layers or 32) // inputs.pp)
    return CUDA_GRAPH_PER_LAYER * (CUDA_GRAPH_MOE_FACTOR if inputs.moe else 1.0) * layers


def _graph_model_bytes(
    inputs: PlanInputs, graphs: int, base: int, per_layer: int, moe_factor: float, mla_factor: float,
    extra_layers: int = 0,
) -> int:
    layers = -(-(inputs.architecture.num_layers or 32) // inputs.pp) + extra_layers
    factor = mla_factor if inputs.architecture.attention is AttentionKind.MLA else moe_factor if inputs.moe else 1.0
    return int(base + per_layer * layers * factor * graphs / REFERENCE_GRAPHS)


def estimate_bytes(inputs: PlanInputs, capture_max: int, *, max_num_seqs: int, max_num_batched_tokens: int,
                   shape: tuple[int, int, int] = (1, 1, 0)) -> int:
    """The CUDA-graph estimate vLLM >= 0.20 deducts from one GPU's KV budget (V1 model runner), bytes.

    ``ESTIMATE_BASE + ESTIMATE_PER_LAYER x layers on the stage x factor x graphs / REFERENCE_GRAPHS``, the
    factor ``ESTIMATE_MLA_FACTOR`` for MLA attention, ``ESTIMATE_MOE_FACTOR`` for other MoE models, else 1
    (module docstring). ``shape``: (decode query length, LoRA graph cases, draft layers; ``features.graph_shape``).
    """
    query, cases, extra = shape
    graphs = sum(graph_counts(capture_max, max_num_seqs, max_num_batched_tokens, decode_query_len=query,
                              cases=cases))
    return _graph_model_bytes(
        inputs, graphs, ESTIMATE_BASE, ESTIMATE_PER_LAYER, ESTIMATE_MOE_FACTOR, ESTIMATE_MLA_FACTOR, extra
    )


def cuda_graph_bytes(inputs: PlanInputs, capture_max: int, *, max_num_seqs: int, max_num_batched_tokens: int,
                     shape: tuple[int, int, int] = (1, 1, 0)) -> int:
    """V1's captured CUDA-graph pool for one GPU, bytes: ``estimate_bytes``'s shape with the ``POOL_*`` constants."""
    query, cases, extra = shape
    graphs = sum(graph_counts(capture_max, max_num_seqs, max_num_batched_tokens, decode_query_len=query,
                              cases=cases))
    return _graph_model_bytes(inputs, graphs, POOL_BASE, POOL_PER_LAYER, POOL_MOE_FACTOR, POOL_MLA_FACTOR, extra)


def v0_cuda_graph_bytes(inputs: PlanInputs, capture_size: int) -> int:
    """V0's decode-graph pool, bytes: the per-layer part scaled by the capture size over 512 (at least 1/4)."""
    scale = min(capture_size, CUDA_GRAPH_DEFAULT_CAPTURE) / CUDA_GRAPH_DEFAULT_CAPTURE
    return int(CUDA_GRAPH_BASE + _stage_layer_bytes(inputs) * max(scale, 0.25))
