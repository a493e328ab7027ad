"""SGLang failure texts as data: what the engine prints when a start fails, and its start-up phase lines.

Sources (docs/engine-memory.md B.1, B.2, E; read in the 0.5.4, 0.5.10 and 0.5.23 wheels):
- 0.5.23 ``mem_cache/kv_cache_configurator.py::_profile_available_bytes``: "Loaded weights leave no GPU
  memory for the KV cache under --mem-fraction-static=F. Raise --mem-fraction-static above X (minimum
  viable = 1 - available/pre = M). ..."
- 0.4 - 0.5.23 (``model_runner.py`` / ``MemoryPoolConfig.__post_init__``): "Not enough memory. Please
  try to increase --mem-fraction-static. [Current value: mem_fraction_static=F]" (0.5.4 prints
  ``self.server_args.mem_fraction_static=F``).
- 0.4 - 0.5.23 ``cuda_graph_runner.py`` (0.5.23 ``decode_cuda_graph_runner.py``): "Capture cuda graph
  failed: {e}" followed by "Possible solutions: ..." (``--cuda-graph-max-bs`` up to 0.5.10,
  ``--cuda-graph-max-bs-decode`` in 0.5.23).
- ``configs/model_config.py``: "User-specified context_length (N) is greater than the derived
  context_length (M)." (raised unless SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN=1).
- 0.5.23 ``arg_groups/attention_hook.py``: "TRTLLM FMHAv2 prefill on SM120 does not support fp8_e4m3
  KV cache or skip-softmax."
- ``managers/scheduler.py``: "Scheduler hit an exception" (a wrapper; the traceback follows).

This module must not import ``ctxfit.engines.sglang`` (the package) or anything heavy: the recovery
classifier imports it lazily.
"""

from __future__ import annotations

from ctxfit.vocab.kinds import FailureKind
from ctxfit.vocab.patterns import (
    NUM,
    RANK_ROOT,
    RANK_WRAPPER,
    TORCH_OOM_EXTRACTORS,
    FailurePattern,
    Phase,
    PhaseMarker,
    extractor,
)

FAILURE_PATTERNS: tuple[FailurePattern, ...] = (
    FailurePattern(
        kind=FailureKind.STATIC_MEMORY_TOO_SMALL,
        markers=("Loaded weights leave no GPU memory for the KV cache", "(minimum viable = 1 - available/pre = "),
        rank=RANK_ROOT,
        source="SGLang 0.5.23 srt/mem_cache/kv_cache_configurator.py _profile_available_bytes",
        extractors=(
            extractor("memFractionStatic", r"under --mem-fraction-static=" + NUM, "float"),
            extractor("minimumMemFractionStatic", r"minimum viable = 1 - available/pre = " + NUM, "float"),
            extractor("minimumMemFractionStatic", r"Raise --mem-fraction-static above " + NUM, "float"),
        ),
    ),
    FailurePattern(
        kind=FailureKind.STATIC_MEMORY_TOO_SMALL,
        markers=("Not enough memory. Please try to increase --mem-fraction-static",),
        rank=RANK_ROOT,
        source="SGLang 0.4-0.5.4 model_runner.py profile_max_num_token; 0.5.10 model_runner_kv_cache_mixin.py; "
        "0.5.23 MemoryPoolConfig.__post_init__",
        extractors=(extractor("memFractionStatic", r"mem_fraction_static=" + NUM, "float"),),
    ),
    FailurePattern(
        kind=FailureKind.GRAPH_CAPTURE_OOM,
        markers=("Capture cuda graph failed",),
        rank=RANK_ROOT,
        source="SGLang 0.4-0.5.10 model_executor/cuda_graph_runner.py; 0.5.23 decode_cuda_graph_runner.py",
        extractors=TORCH_OOM_EXTRACTORS,
    ),
    FailurePattern(
        kind=FailureKind.CONTEXT_EXCEEDS_MODEL_LIMIT,
        markers=("is greater than the derived context_length",),
        rank=RANK_ROOT,
        source="SGLang 0.4-0.5.23 srt/configs/model_config.py",
        extractors=(
            extractor("requestedContextLength", r"context_length \(" + NUM + r"\) is greater"),
            extractor("derivedMaxContextLength", r"derived context_length \(" + NUM + r"\)"),
        ),
    ),
    FailurePattern(
        kind=FailureKind.KV_CACHE_DTYPE_UNSUPPORTED,
        markers=("does not support fp8_e4m3 KV cache",),
        rank=RANK_ROOT,
        source="SGLang 0.5.23 srt/arg_groups/attention_hook.py (TRTLLM FMHAv2 prefill on SM120)",
    ),
    FailurePattern(
        kind=FailureKind.UNKNOWN,
        markers=("Scheduler hit an exception",),
        rank=RANK_WRAPPER,
        source="SGLang 0.4-0.5.23 srt/managers/scheduler.py run_scheduler_process (wrapper)",
    ),
)
"""SGLang's failure texts, 0.4 - 0.5.23."""

PHASE_MARKERS: tuple[PhaseMarker, ...] = (
    PhaseMarker(Phase.LOADING, "Load weight begin", "SGLang model_runner.py load_model log"),
    PhaseMarker(Phase.PROFILING, "Load weight end", "SGLang model_runner.py load_model log"),
    PhaseMarker(Phase.KV_READY, "KV Cache is allocated", "SGLang mem_cache/memory_pool.py log"),
    PhaseMarker(Phase.KV_READY, "Memory pool end", "SGLang model_runner.py log"),
    PhaseMarker(Phase.CAPTURE, "Capture cuda graph begin", "SGLang cuda_graph_runner.py log"),
    PhaseMarker(Phase.CAPTURE, "Capture cuda graph bs", "SGLang cuda_graph_runner.py tqdm bar"),
    PhaseMarker(Phase.CAPTURE, "prefill CUDA graph begin", "SGLang 0.5.23 prefill graph capture log"),
    PhaseMarker(Phase.CAPTURE, "init_cuda_graphs", "traceback frame (model_runner.init_cuda_graphs)"),
    PhaseMarker(Phase.CAPTURE, "CudaGraphRunner", "traceback frame (cuda_graph_runner)"),
    PhaseMarker(Phase.SERVING, "The server is fired up and ready to roll!", "SGLang entrypoints/http_server.py"),
)
"""Where SGLang is in its start-up, for CUDA OOMs without their own message."""
