"""SGLang failure texts as data: what the engine prints when a start fails, and its start-up phase lines.

Sources (docs/engine-memory.md B.1, B.2, E; read in the 0.5.4, 0.5.10 and 0.5.23 wheels, and for
the ``covers`` table in the 0.3.6, 0.4.3 and 0.5.4 wheels):
- 0.5.23 ``mem_cache/kv_cache_configurator.py::_profile_available_bytes``: "Loaded weights leave no GPU
  memory for the KV cache under --mem-fraction-static=F. Raise --mem-fraction-static above X (minimum
  viable = 1 - available/pre = M). ..."
- 0.2.7 - 0.5.23 (``model_runner.py`` / ``MemoryPoolConfig.__post_init__``): "Not enough memory. Please
  try to increase --mem-fraction-static. [Current value: mem_fraction_static=F]" (0.5.4 prints
  ``self.server_args.mem_fraction_static=F``); 0.1.13 ``managers/router/model_runner.py`` "Not enought memory.
  Please try to increase --mem-fraction-static." (sic); 0.3.6 - 0.5.23 ``tp_worker.py`` assert "Memory pool size
  is too small" (a pool of at most one token). Matched on "Please try to increase --mem-fraction-static".
- 0.2.7 - 0.5.23 ``cuda_graph_runner.py`` (0.5.23 ``decode_cuda_graph_runner.py``): "Capture cuda graph
  failed: {e}" followed by "Possible solutions: ..." (``--cuda-graph-max-bs`` up to 0.5.10,
  ``--cuda-graph-max-bs-decode`` in 0.5.23). ``{e}`` is any exception: only an out-of-memory one is a capture
  OOM; another (a torch.compile op, a gloo connection, SGLang issues 4205 and 6033) is Unknown.
- ``configs/model_config.py`` ``_derive_context_length``: "User-specified context_length (N) is greater than the
  derived context_length (M). ... To allow overriding this maximum, set the env var
  SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN=1", a ``ValueError`` (0.3.5+; 0.5.x builds it from the warning text, so
  it reads "ValueError: Warning: User-specified ..." or "... Target model's context_length ..." for a draft model).
  With the variable set (or for a speculative draft model whose own limit is shorter, e.g. an EAGLE head of 2048
  positions) the same sentence is only logged as a warning ("Warning: ... is greater than the derived
  context_length (M). This may lead to incorrect model outputs or CUDA errors.") and the start goes on: the
  pattern needs "ValueError" or the "To allow overriding" hint next to it, so a later failure is not read as a
  context refusal.
- 0.5.23 ``arg_groups/attention_hook.py``: "TRTLLM FMHAv2 prefill on SM120 does not support fp8_e4m3
  KV cache or skip-softmax."
- 0.5.4 - 0.5.10 KV dtype refusals: "Unsupported kv_cache_dtype: X." (``model_runner.py``), "TensorRT-LLM MLA
  backend only supports kv-cache-dtype of fp8_e4m3 ... or auto." and "DeepSeek DSA only supports bf16/bfloat16 or
  fp8_e4m3 kv_cache_dtype" (``server_args.py``).
- ``managers/scheduler.py``: "Scheduler hit an exception" (a wrapper; the traceback follows).
- ``managers/utils.py`` ``validate_input_length`` 0.4.3 - 0.5.23: "Input length (N tokens) exceeds the maximum
  allowed length (M tokens). Use a shorter input or enable --allow-auto-truncate." (0.3.6 truncated such
  prompts silently: no message). SGLang does not check the context length
  against the KV pool at start; M is ``max_req_input_len`` = min(context, pool) - 1, so a server that dies
  right after it has a context above its pool: the SGLang form of KVCacheTooSmall (a hint: the line is
  also logged for a single over-long request).
- 0.2.15 - 0.5.23 ``model_runner.py`` (0.5.10 ``model_runner_kv_cache_mixin.py``, 0.5.23 ``pool_configurator.py``)
  warning "max_total_tokens=N is larger than the profiled value M. Use the profiled value instead.": a negative M
  is a pool the weights left no room for (the "Not enough memory" error follows; a reporter's excerpt may stop
  before it, SGLang issue 7691), so ``StaticMemoryTooSmall``; a positive M is only a warning and is not matched.
- Parallel layout: 0.5.4 ``model_runner.py`` "tp_size 8 must be divisible by moe_ep_size 3" and
  "moe_intermediate_size X must be divisible by moe_tp_size (Y) ..."; 0.3.6 - 0.5.4 ``server_args.py``
  "tp_size must be divisible by number of nodes"; 0.4.3 - 0.5.4 ``distributed/utils.py`` ``ensure_divisibility``
  "64 is not divisible by 3" (heads or sizes split over TP; generic pattern in ``ctxfit.recovery.generic``).
- Hybrid models: 0.5.4 sizes the Mamba state pool itself (``--max-mamba-cache-size``,
  ``--mamba-full-memory-ratio``) and prints no "Mamba cache blocks" error: MambaCacheTooSmall is vLLM's.

``WORDING_COVERAGE`` at the end is the table of which SGLang versions each pattern's wording was checked
against (data; ``FailurePattern.covers``).

This module must not import ``ctxfit.engines.sglang`` (the package) or anything heavy: the recovery
classifier imports it lazily.
"""

from __future__ import annotations

from ctxfit.vocab.kinds import FailureKind
from ctxfit.vocab.patterns import (
    NUM,
    PARALLELISM_EXTRACTORS,
    RANK_HINT,
    RANK_ROOT,
    RANK_SPECIFIC,
    RANK_VAGUE,
    RANK_WRAPPER,
    TORCH_OOM_EXTRACTORS,
    FailurePattern,
    PhaseMarker,
    StartupPhase,
    WordingCoverage,
    coverage_table,
    extractor,
)

_OOM_WORDS = ("out of memory", "OutOfMemoryError", "CUBLAS_STATUS_ALLOC_FAILED", "cudaErrorMemoryAllocation")
"""Fragments of a CUDA / cuBLAS out-of-memory error (``ctxfit.recovery.generic`` GPU OOM markers)."""

FAILURE_PATTERNS: tuple[FailurePattern, ...] = (
    FailurePattern(
        kind=FailureKind.STATIC_MEMORY_TOO_SMALL,
        markers=("Loaded weights leave no GPU memory for the KV cache", "(minimum viable = 1 - available/pre = "),
        rank=RANK_ROOT,
        source="SGLang 0.5.23 srt/mem_cache/kv_cache_configurator.py _profile_available_bytes",
        covers=(("0.5.23", "0.5.23"),),
        extractors=(
            extractor("memFractionStatic", r"under --mem-fraction-static=" + NUM, "float"),
            extractor("minimumMemFractionStatic", r"minimum viable = 1 - available/pre = " + NUM, "float"),
            extractor("minimumMemFractionStatic", r"Raise --mem-fraction-static above " + NUM, "float"),
        ),
    ),
    FailurePattern(
        kind=FailureKind.STATIC_MEMORY_TOO_SMALL,
        markers=("Please try to increase --mem-fraction-static", "Memory pool size is too small"),
        rank=RANK_ROOT,
        source="SGLang 0.1.13 managers/router/model_runner.py 'Not enought memory. Please try to increase "
        "--mem-fraction-static.' (sic); 0.2.7-0.5.4 model_runner.py profile_max_num_token 'Not enough memory. ...'; "
        "0.5.10 model_runner_kv_cache_mixin.py; 0.5.23 MemoryPoolConfig.__post_init__; 0.3.6-0.5.23 "
        "managers/tp_worker.py assert 'Memory pool size is too small' (a pool of at most one token)",
        covers=(("0.1.13", "0.5.23"),),
        extractors=(extractor("memFractionStatic", r"mem_fraction_static=" + NUM, "float"),),
    ),
    FailurePattern(
        kind=FailureKind.STATIC_MEMORY_TOO_SMALL,
        # the warning with a negative profiled pool; "-" right after "value " keeps positive values out
        markers=("is larger than the profiled value -",),
        rank=RANK_SPECIFIC,
        source="SGLang 0.2.15-0.5.4 model_executor/model_runner.py init_memory_pool, 0.5.10 "
        "model_runner_kv_cache_mixin.py, 0.5.23 pool_configurator.py: 'max_total_tokens=N is larger than the profiled "
        "value M. Use the profiled value instead.' with M < 0 (the weights leave no room; 'Not enough memory' follows)",
        covers=(("0.2.15", "0.5.23"),),
    ),
    FailurePattern(
        kind=FailureKind.GRAPH_CAPTURE_OOM,
        markers=("Capture cuda graph failed",),
        rank=RANK_ROOT,
        # "Capture cuda graph failed: {e}" carries any exception: only an out-of-memory one is a capture OOM
        requires_any=_OOM_WORDS,
        source="SGLang 0.2.7 model_runner.py; 0.3-0.5.10 model_executor/cuda_graph_runner.py; 0.5.23 "
        "decode_cuda_graph_runner.py ('Capture cuda graph failed: {e}' with the exception on the same line)",
        covers=(("0.2.7", "0.5.23"),),
        extractors=TORCH_OOM_EXTRACTORS,
    ),
    FailurePattern(
        kind=FailureKind.UNKNOWN,
        markers=("Capture cuda graph failed",),
        rank=RANK_VAGUE,
        source="SGLang 0.2.7-0.5.23 cuda_graph_runner.py: a capture that failed for another reason (torch.compile, "
        "a gloo/NCCL connection, CUDAGeneratorImpl during capture; SGLang issues 4205, 6033): the knobs of a capture "
        "OOM do not help",
        covers=(("0.2.7", "0.5.23"),),
    ),
    FailurePattern(
        kind=FailureKind.CONTEXT_EXCEEDS_MODEL_LIMIT,
        markers=("is greater than the derived context_length",),
        rank=RANK_ROOT,
        # the raised error only: the same sentence is logged as a warning when the override is allowed (env var,
        # a speculative draft model) and the server starts anyway
        requires_any=("ValueError", "To allow overriding", "SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN"),
        source="SGLang 0.3.5-0.5.23 srt/configs/model_config.py _derive_context_length: raise ValueError('[Warning: ]"
        "{User-specified|Target model's} context_length (N) is greater than the derived context_length (M). ... To "
        "allow overriding this maximum, set the env var SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN=1'); the "
        "logger.warning form without that hint is no failure",
        covers=(("0.3.6", "0.5.23"),),
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
        covers=(("0.5.23", "0.5.23"),),
    ),
    FailurePattern(
        kind=FailureKind.KV_CACHE_DTYPE_UNSUPPORTED,
        markers=("Unsupported kv_cache_dtype", "only supports kv-cache-dtype", "fp8_e4m3 kv_cache_dtype"),
        rank=RANK_ROOT,
        source="SGLang 0.5.4-0.5.10 model_executor/model_runner.py 'Unsupported kv_cache_dtype: X.'; server_args.py "
        "'TensorRT-LLM MLA backend only supports kv-cache-dtype of fp8_e4m3[, fp4_e2m1, bf16] or auto.'; 0.5.10 "
        "server_args.py assert 'DeepSeek DSA only supports bf16/bfloat16 or fp8_e4m3 kv_cache_dtype' (all read in "
        "the wheels): the requested KV dtype is refused, auto or bf16 is accepted",
        covers=(("0.5.4", "0.5.10"),),
    ),
    FailurePattern(
        kind=FailureKind.KV_CACHE_TOO_SMALL,
        # SGLang's "Input length (N[ tokens]) exceeds ..." only: other programs' messages with the same words
        # ("Username exceeds the maximum allowed length (24)") stay out
        markers=("exceeds the maximum allowed length (",),
        rank=RANK_HINT,
        requires_any=("Input length", "tokens)"),  # "Input length (N tokens) exceeds ... (M tokens)"
        source="SGLang 0.4.3-0.5.23 managers/utils.py validate_input_length (max_req_input_len; the same f-string "
        "in the 0.4.3, 0.5.4, 0.5.10 and 0.5.23 wheels)",
        extractors=(extractor("estimatedMaxContextLength", r"maximum allowed length \(" + NUM),),
        covers=(("0.4.3", "0.5.23"),),
    ),
    FailurePattern(
        kind=FailureKind.INVALID_PARALLELISM,
        markers=("must be divisible by moe_",),
        rank=RANK_ROOT,
        source="SGLang 0.5.4 model_executor/model_runner.py (MoE EP/TP split), 0.5.10 model_runner.py and "
        "server_args.py, 0.5.23 model_runner_components/moe_ep_setup.py and arg_groups/parallel_hook.py "
        "('tp_size must be divisible by moe_dp_size')",
        extractors=PARALLELISM_EXTRACTORS,
        covers=(("0.5.4", "0.5.23"),),
    ),
    FailurePattern(
        kind=FailureKind.UNSUPPORTED_GPU,
        markers=("SGLang only supports sm75 and above",),
        rank=RANK_ROOT,
        source="SGLang 0.4.3-0.5.10 model_executor/model_runner.py (read in the 0.4.3, 0.5.4 and 0.5.10 wheels): "
        "'RuntimeError: SGLang only supports sm75 and above.' (a GPU below compute capability 7.5, e.g. V100)",
        extractors=(extractor("minimumComputeCapability", r"supports sm" + NUM, "cc"),),
        covers=(("0.4.3", "0.5.10"),),
    ),
    FailurePattern(
        kind=FailureKind.UNSUPPORTED_GPU,
        markers=("backend is not supported on Blackwell GPUs", "requires SM100", "requires Blackwell GPUs",
                 "requires SM80 or newer GPUs"),
        rank=RANK_SPECIFIC,
        source="SGLang 0.5.x server_args.py \"The 'fa3' backend is not supported on Blackwell GPUs\"; quantization "
        "'MXFP8 MoE quantization requires SM100.', 'MXFP8 dense linear requires Blackwell GPUs (SM100/SM120).'; "
        "'Shared experts fusion requires SM80 or newer GPUs.' (read in the 0.5.4 and 0.5.10 wheels)",
        covers=(("0.5.4", "0.5.10"),),
    ),
    FailurePattern(
        kind=FailureKind.UNKNOWN,
        markers=("Scheduler hit an exception",),
        rank=RANK_WRAPPER,
        source="SGLang 0.4.0-0.5.23 srt/managers/scheduler.py run_scheduler_process (wrapper)",
        covers=(("0.4.0", "0.5.23"),),
    ),
)
"""SGLang's failure texts, 0.4 - 0.5.23."""

PHASE_MARKERS: tuple[PhaseMarker, ...] = (
    PhaseMarker(StartupPhase.LOADING, "Load weight begin", "SGLang model_runner.py load_model log"),
    PhaseMarker(StartupPhase.PROFILING, "Load weight end", "SGLang model_runner.py load_model log"),
    PhaseMarker(StartupPhase.KV_READY, "KV Cache is allocated", "SGLang mem_cache/memory_pool.py log"),
    PhaseMarker(StartupPhase.KV_READY, "Memory pool end", "SGLang model_runner.py log"),
    PhaseMarker(StartupPhase.CAPTURE, "Capture cuda graph begin", "SGLang cuda_graph_runner.py log"),
    PhaseMarker(StartupPhase.CAPTURE, "Capture cuda graph bs", "SGLang cuda_graph_runner.py tqdm bar"),
    PhaseMarker(StartupPhase.CAPTURE, "prefill CUDA graph begin", "SGLang 0.5.23 prefill graph capture log"),
    PhaseMarker(StartupPhase.CAPTURE, "Capture piecewise CUDA graph begin",
                "SGLang 0.5.10 model_runner.py (piecewise)"),
    PhaseMarker(StartupPhase.CAPTURE, " graph begin",
                "SGLang 0.5.10 model_runner.py 'Capture {cuda|npu|cpu} graph begin.'; "
                "0.5.23 model_runner_components/cuda_graph_setup.py 'Capture target {decode|verify|prefill} {CUDA|NPU|"
                "XPU|CPU} graph begin.' and the draft model's 'Capture draft ... graph begin'"),
    PhaseMarker(StartupPhase.CAPTURE, "init_cuda_graphs", "traceback frame (model_runner.init_cuda_graphs)"),
    PhaseMarker(StartupPhase.CAPTURE, "CudaGraphRunner", "traceback frame (cuda_graph_runner)"),
    PhaseMarker(StartupPhase.SERVING, "The server is fired up and ready to roll!", "SGLang entrypoints/http_server.py"),
)
"""Where SGLang is in its start-up, for CUDA OOMs without their own message."""

WORDING_COVERAGE: tuple[WordingCoverage, ...] = coverage_table(FAILURE_PATTERNS)
"""Which SGLang versions each pattern's wording was checked against: (kind, first marker, version ranges)."""
