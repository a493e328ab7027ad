"""vLLM failure texts as data: what the engine prints when a start fails, and its start-up phase lines.

Sources (docs/engine-memory.md A.1, A.3, A.4, E; read in the published wheels unless marked):
- V1 0.8 - 0.33 ``_check_enough_kv_cache_memory`` (``v1/core/kv_cache_utils.py``; 0.33
  ``kv_cache_planning.py``): "To serve at least one request with the models's max seq len (N),
  (X GiB KV cache is needed, which is larger than the available KV cache memory (Y GiB).
  [Based on the available memory, the estimated maximum model length is E.] Try ...". "models's" up to
  0.20, "model's" in 0.30+; the estimate since https://github.com/vllm-project/vllm/pull/16168 (absent in 0.8.x).
- V0 0.4 - 0.6 ``worker/worker.py::raise_if_cache_size_invalid`` [3rd-party copy]: "The model's max
  seq len (N) is larger than the maximum number of tokens that can be stored in KV cache (E)."
- "No available memory for the cache blocks." (V0 and V1, all versions).
- 0.11 / 0.33 ``request_memory``: "Free memory on device [cuda:0 ](F/T GiB) on startup is less than
  desired GPU memory utilization (U, R GiB)."
- ``gpu_model_runner.py``: "CUDA out of memory occurred when warming up sampler with N dummy
  requests." and "Failed to load model - not enough GPU memory."
- 0.33 ``config/model.py::_get_and_verify_max_len`` (same text since V0): "User-specified
  max_model_len (N) is greater than the derived max_model_len (max_position_embeddings=M or
  model_max_length=Z in model's config.json)."
- FP8 KV dtype: 0.11 - 0.17 ``triton_mla.py`` "TritonMLA V1 with FP8 KV cache not yet supported" /
  "FP8 Triton MLA not yet supported"; 0.17 selector "No valid attention backend found ...
  TRITON_MLA: [kv_cache_dtype not supported]"; 0.33 "FP8 KV cache is not supported by the Triton MLA
  backend"; V0 selector "Cannot use FlashAttention-2 backend for FP8 KV cache." (an INFO line in V0,
  followed by a fallback backend: only a hint).
- ``v1/engine/utils.py``: "Engine core initialization failed. See root cause above." (a wrapper).

This module must not import ``ctxfit.engines.vllm`` (the package) or anything heavy: the recovery
classifier imports it lazily.
"""

from __future__ import annotations

from ctxfit.vocab.kinds import FailureKind
from ctxfit.vocab.patterns import (
    NUM,
    RANK_HINT,
    RANK_ROOT,
    RANK_WRAPPER,
    FailurePattern,
    Phase,
    PhaseMarker,
    extractor,
)

_KV_V1 = "vLLM V1 0.8-0.33 v1/core/kv_cache_utils.py (0.33 kv_cache_planning.py) _check_enough_kv_cache_memory"

FAILURE_PATTERNS: tuple[FailurePattern, ...] = (
    FailurePattern(
        kind=FailureKind.KV_CACHE_TOO_SMALL,
        markers=(
            "To serve at least one request with the model",
            "KV cache is needed, which is larger than the available KV cache memory",
            "estimated maximum model length is ",
        ),
        rank=RANK_ROOT,
        source=_KV_V1,
        extractors=(
            extractor("requestedContextLength", r"max seq len \(" + NUM + r"\)"),
            extractor("neededBytes", r"\(" + NUM + r" ?GiB KV cache is needed", "gib"),
            extractor("availableBytes", r"available KV cache memory \(" + NUM + r" ?GiB\)", "gib"),
            extractor("estimatedMaxContextLength", r"estimated maximum model length is " + NUM),
        ),
    ),
    FailurePattern(
        kind=FailureKind.KV_CACHE_TOO_SMALL,
        markers=("is larger than the maximum number of tokens that can be stored in KV cache",),
        rank=RANK_ROOT,
        source="vLLM V0 0.4-0.6 worker/worker.py raise_if_cache_size_invalid [3rd-party copy]",
        extractors=(
            extractor("requestedContextLength", r"max seq len \(" + NUM + r"\) is larger"),
            extractor("estimatedMaxContextLength", r"stored in KV cache \(" + NUM + r"\)"),
        ),
    ),
    FailurePattern(
        kind=FailureKind.NO_KV_CACHE_MEMORY,
        markers=(
            "No available memory for the cache blocks",
            "Cannot auto-fit max_model_len: not enough GPU memory",
        ),
        rank=RANK_ROOT,
        source="vLLM V0 worker.py / V1 0.11-0.33 kv_cache_utils.py; 0.17+ _auto_fit_max_model_len",
    ),
    FailurePattern(
        kind=FailureKind.INSUFFICIENT_FREE_GPU_MEMORY,
        markers=(
            "on startup is less than desired GPU memory utilization",
            "is less than the engine's budget after excluding",
        ),
        rank=RANK_ROOT,
        source="vLLM 0.9-0.33 v1/worker/gpu_worker.py init_device (0.33 v1/worker/utils.py request_memory)",
        extractors=(
            extractor("freeBytes", r"\(" + NUM + r"/" + NUM + r" ?GiB\)", "gib"),
            extractor("totalBytes", r"\(\d[\d,.]{0,24}/" + NUM + r" ?GiB\)", "gib"),
            extractor("gpuMemoryUtilization", r"memory utilization \(" + NUM + r", ", "float"),
            extractor("requestedBytes", r"memory utilization \(\d[\d.]{0,12}, " + NUM + r" ?GiB\)", "gib"),
        ),
    ),
    FailurePattern(
        kind=FailureKind.SAMPLER_WARMUP_OOM,
        markers=("occurred when warming up sampler with",),
        rank=RANK_ROOT,
        source="vLLM V1 0.8-0.33 v1/worker/gpu_model_runner.py _dummy_sampler_run",
        extractors=(extractor("dummyRequests", r"warming up sampler with " + NUM + r" dummy requests"),),
    ),
    FailurePattern(
        kind=FailureKind.WEIGHTS_DO_NOT_FIT,
        markers=("Failed to load model - not enough GPU memory",),
        rank=RANK_ROOT,
        source="vLLM 0.30-0.33 v1/worker/gpu_model_runner.py load_model",
    ),
    FailurePattern(
        kind=FailureKind.CONTEXT_EXCEEDS_MODEL_LIMIT,
        markers=("is greater than the derived max_model_len",),
        rank=RANK_ROOT,
        source="vLLM 0.4-0.33 config (0.33 config/model.py _get_and_verify_max_len)",
        extractors=(
            extractor("requestedContextLength", r"max_model_len \(" + NUM + r"\) is greater"),
            extractor("derivedMaxContextLength", r"derived max_model_len \([A-Za-z_]{1,40}=" + NUM),
            extractor("modelMaxLength", r"model_max_length=" + NUM),
        ),
    ),
    FailurePattern(
        kind=FailureKind.KV_CACHE_DTYPE_UNSUPPORTED,
        markers=(
            "with FP8 KV cache not yet supported",
            "FP8 Triton MLA not yet supported",
            "kv_cache_dtype not supported",
            "FP8 KV cache is not supported by the Triton MLA backend",
        ),
        rank=RANK_ROOT,
        source="vLLM 0.11-0.17 v1/attention/backends/mla/triton_mla.py; 0.17 attention selector; "
        "0.33 triton_mla.py capability check",
    ),
    FailurePattern(
        kind=FailureKind.KV_CACHE_DTYPE_UNSUPPORTED,
        markers=("Cannot use FlashAttention-2 backend for FP8 KV cache",),
        rank=RANK_HINT,
        source="vLLM V0 0.4-0.6 attention/selector.py (INFO line before falling back to XFormers)",
    ),
    FailurePattern(
        kind=FailureKind.UNKNOWN,
        markers=("Engine core initialization failed", "EngineCore failed to start"),
        rank=RANK_WRAPPER,
        source="vLLM V1 0.8-0.33 v1/engine/utils.py / v1/engine/core.py (wrapper; the cause is logged above)",
    ),
)
"""vLLM's failure texts, V0 (0.4-0.6) and V1 (0.8-0.33)."""

PHASE_MARKERS: tuple[PhaseMarker, ...] = (
    PhaseMarker(Phase.LOADING, "Starting to load model", "vLLM V1 gpu_model_runner.py load_model"),
    PhaseMarker(Phase.LOADING, "Loading safetensors checkpoint shards", "vLLM model_loader (tqdm bar)"),
    PhaseMarker(Phase.LOADING, "Loading pt checkpoint shards", "vLLM model_loader (tqdm bar)"),
    PhaseMarker(Phase.LOADING, "Loading safetensors using Runai Model Streamer", "vLLM runai_streamer loader"),
    PhaseMarker(Phase.LOADING, "load_weights", "traceback frame (model load_weights)"),
    PhaseMarker(Phase.LOADING, "load_model", "traceback frame (worker/runner load_model)"),
    PhaseMarker(Phase.LOADING, "weight_loader", "traceback frame (parameter weight_loader)"),
    PhaseMarker(Phase.PROFILING, "Model loading took", "vLLM gpu_model_runner.py (0.11 '%.4f GiB', 0.20+ '%s GiB')"),
    PhaseMarker(Phase.PROFILING, "Loading weights took", "vLLM model_loader"),
    PhaseMarker(Phase.PROFILING, "profile_run", "traceback frame (gpu_model_runner.profile_run)"),
    PhaseMarker(Phase.PROFILING, "determine_available_memory", "traceback frame (gpu_worker)"),
    PhaseMarker(Phase.PROFILING, "Memory profiling takes", "vLLM V1 gpu_worker.py log"),
    PhaseMarker(Phase.KV_READY, "Available KV cache memory", "vLLM gpu_worker.py log"),
    PhaseMarker(Phase.KV_READY, "GPU KV cache size", "vLLM kv_cache_utils.py log"),
    PhaseMarker(Phase.KV_READY, "# GPU blocks", "vLLM V0 executor log"),
    PhaseMarker(Phase.KV_READY, "# cuda blocks", "vLLM V0.6 executor log"),
    PhaseMarker(Phase.CAPTURE, "Capturing CUDA graph", "vLLM V1 capture log / tqdm bar"),
    PhaseMarker(Phase.CAPTURE, "Capturing cudagraphs", "vLLM V0 model_runner.py log"),
    PhaseMarker(Phase.CAPTURE, "Capturing the model for CUDA graphs", "vLLM V0 model_runner.py log"),
    PhaseMarker(Phase.CAPTURE, "capture_model", "traceback frame (gpu_model_runner.capture_model)"),
    PhaseMarker(Phase.CAPTURE, "_capture_cudagraphs", "traceback frame (V1 gpu_model_runner)"),
    PhaseMarker(Phase.CAPTURE, "compile_or_warm_up_model", "traceback frame (V1 gpu_worker)"),
    PhaseMarker(Phase.CAPTURE, "graph_capture", "traceback frame (distributed/parallel_state.graph_capture)"),
    PhaseMarker(Phase.CAPTURE, "Graph capturing finished", "vLLM capture log (after capture: warm-up)"),
    PhaseMarker(Phase.SAMPLER, "_dummy_sampler_run", "traceback frame (V1 gpu_model_runner)"),
    PhaseMarker(Phase.SERVING, "Application startup complete", "uvicorn (vLLM API server ready)"),
    PhaseMarker(Phase.SERVING, "Starting vLLM API server", "vLLM entrypoints/openai/api_server.py"),
)
"""Where vLLM is in its start-up, for CUDA OOMs without their own message."""
