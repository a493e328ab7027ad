"""vLLM failure texts as data: what the engine prints when a start fails, and its start-up phase lines.

Sources (docs/engine-memory.md A.1, A.3, A.4, E; read in the published wheels unless marked):
- V1 0.8 - 0.33 ``_check_enough_kv_cache_memory`` (``v1/core/kv_cache_utils.py``; 0.33
  ``kv_cache_planning.py``): "To serve at least one request with the models's max seq len (N),
  (X GiB KV cache is needed, which is larger than the available KV cache memory (Y GiB).
  [Based on the available memory, the estimated maximum model length is E.] Try ...". "models's" up to
  0.21, "model's" in 0.22+ (read in the 0.19-0.28 wheels); the estimate since
  https://github.com/vllm-project/vllm/pull/16168 (absent in 0.8.x);
  0.7.x prints the sizes as "GB" (``/1024/1024/1024``, the 0.7.2 wheel).
- V0 0.2 - 0.10 ``worker/worker.py::raise_if_cache_size_invalid`` (0.5.5, 0.6.5, 0.9.2 wheels): "The model's max
  seq len (N) is larger than the maximum number of tokens that can be stored in KV cache (E)." (E may be
  wrapped onto the next line in a pasted log: the pattern reads one line further.)
- "No available memory for the cache blocks." (V0 and V1, all versions).
- 0.11 / 0.33 ``request_memory``: "Free memory on device [cuda:0 ](F/T GiB) on startup is less than
  desired GPU memory utilization (U, R GiB)."
- ``gpu_model_runner.py``: "CUDA out of memory occurred when warming up sampler with N dummy
  requests." (and "... warming up pooler (task=...) with N dummy requests" for pooling models) and "Failed to load
  model - not enough GPU memory." (0.19+).
- 0.33 ``config/model.py::_get_and_verify_max_len`` (same text since V0): "User-specified
  max_model_len (N) is greater than the derived max_model_len (max_position_embeddings=M or
  model_max_length=Z in model's config.json)."
- FP8 KV dtype: 0.11 - 0.17 ``triton_mla.py`` "TritonMLA V1 with FP8 KV cache not yet supported" /
  "FP8 Triton MLA not yet supported"; 0.17 selector "No valid attention backend found ...
  TRITON_MLA: [kv_cache_dtype not supported]"; 0.33 "FP8 KV cache is not supported by the Triton MLA
  backend"; V0 selector "Cannot use FlashAttention-2 backend for FP8 KV cache." (an INFO line in V0,
  followed by a fallback backend: only a hint).
- ``v1/engine/utils.py``: "Engine core initialization failed. See root cause above." (a wrapper).
- Hybrid (Mamba / Gated-DeltaNet) models, 0.21 - 0.33 (read in the 0.21-0.28 wheels; ``config/compilation.py``, later
  ``v1/worker/gpu_model_runner.py``): "max_num_seqs (N) exceeds available Mamba cache blocks (M). Each
  decode sequence requires one Mamba cache block, so CUDA graph capture cannot proceed. Please lower
  max_num_seqs to at most M or increase gpu_memory_utilization." Earlier releases shrank the CUDA-graph
  sizes silently (``adjust_cudagraph_sizes_for_mamba_cache``) and printed nothing.
- /dev/shm, 0.27 - main: "Insufficient space in /dev/shm: N MiB required, M MiB free" (0.27/0.28
  ``shm_broadcast.py`` check of the message-queue ring buffer, and the KV offload region; one number)
  and, after vLLM PR 50358, "Insufficient space in /dev/shm:\nA/B MiB required, C MiB free" (B: the whole
  region, A: what is still missing). Before that check, the KV-offload shared
  region (``kv_offload/cpu/shared_offload_region.py``) failed with ``OSError: [Errno 14] Bad address``
  when /dev/shm could not back its pre-faulted pages.
- Per-backend KV dtype checks, 0.18+ (``v1/attention/backends/*``): "FP8 KV cache is not supported by the
  Triton MLA backend on {dev} (compute capability {cc}); native FP8 (fp8e4nv) requires SM89+"; the same
  sentence with "... by the {name} attention backend"; ``flash_attn.py`` (V0: "FP8 kv-cache", V1: "fp8
  kv-cache") "FlashAttention does not support fp8 kv-cache on this device" where FlashAttention has no FP8
  (anything but SM90).
- KV dtype refused outside the attention backends (wheels 0.5.5 - 0.28): "fp8_e5m2 kv-cache is not supported
  with fp8 checkpoints." (0.5 - 0.28), "FP8 KV cache dtype is not supported." (pallas, 0.5 - 0.9), "FP8 KV cache
  is unsupported in CPU_ATTN" (0.12 - 0.20), "nvfp4 KV cache is not supported with MLA" (0.21 - 0.28), "bfloat16
  KV cache is not supported on {dev}" (0.24 - 0.28): "KV cache ... not supported" next to a dtype word.
- Weights: 0.11 ``layers/linear.py`` "Failed to create unquantized linear weights. This may be caused by
  insufficient memory to allocate the weight." (and its log line with the CUDA OOM); a CUDA OOM under a
  ``create_weights`` frame (every version) is an OOM while the model is built, i.e. loading.
- KV dtype refused by the V1 engine oracle, 0.8 - 0.10 ``engine/arg_utils.py``: "VLLM_USE_V1=1 is not supported
  with --kv-cache-dtype." (only with VLLM_USE_V1=1 set; otherwise V0 runs).
- V0 (0.4 - 0.10) start-up phases for a CUDA OOM: "Loading model weights took N GB" (weights are in),
  ``determine_num_available_blocks`` (the profile run), "Starting profile run" (encoder-decoder models): an OOM
  after them is a profile-run OOM, not a weights OOM.
- Model name: 0.8 - 0.28 ``transformers_utils/config.py`` "Invalid repository ID or local directory specified:
  'X'." when no config.json / params.json is found (a wrong name, a missing path, a private repo, no network;
  the Hub error it was raised from, printed above it, names which).
- Parallel layout, 0.1 - 0.33 ``config.py`` (0.10+ ``config/model.py``) ``verify_with_parallel_config``:
  "Total number of attention heads (H) must be divisible by tensor parallel size (T)." (0.10+ wrapped by
  pydantic as "Value error, ..."); 0.1 - 0.5 "Total number of hidden layers (L) must be divisible by
  pipeline parallel size (P)." (uneven PP partitions replaced it in 0.6).

``WORDING_COVERAGE`` at the end is the table of which vLLM versions each pattern's wording was checked
against (data; ``FailurePattern.covers``).

This module must not import ``ctxfit.engines.vllm`` (the package) or anything heavy: the recovery
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

_KV_DTYPE_WORDS = ("fp8", "FP8", "nvfp4", "NVFP4", "bfloat16", "float16", "Quantized", "quantized", "e5m2", "e4m3")
"""Words that make a "KV cache is not supported" line about the KV cache *dtype* (not its layout or hybrid groups)."""

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
        source=_KV_V1 + "; 0.7.x prints the sizes as 'GB' (divided by 1024**3, read in the 0.7.2 wheel)",
        covers=(("0.7.0", "0.33.x"),),
        extractors=(
            extractor("requestedContextLength", r"max seq len \(" + NUM + r"\)"),
            extractor("neededBytes", r"\(" + NUM + r" ?(?:GiB|GB) KV cache is needed", "gib"),
            extractor("availableBytes", r"available KV cache memory \(" + NUM + r" ?(?:GiB|GB)\)", "gib"),
            extractor("estimatedMaxContextLength", r"estimated maximum model length is " + NUM),
        ),
    ),
    FailurePattern(
        kind=FailureKind.KV_CACHE_TOO_SMALL,
        markers=("is larger than the maximum number of tokens that can be stored in KV cache",),
        rank=RANK_ROOT,
        source="vLLM V0 0.2-0.10 worker/worker.py raise_if_cache_size_invalid (read in the 0.5.5, 0.6.5 and 0.9.2 "
        "wheels; 0.2.7 in vLLM issue 2418); the estimate may be wrapped onto the next line ('KV cache (\\n3984)', "
        "vLLM issue 7526)",
        covers=(("0.2.7", "0.9.x"),),
        context_lines=1,
        extractors=(
            extractor("requestedContextLength", r"max seq len \(" + NUM + r"\) is larger"),
            extractor("estimatedMaxContextLength", r"stored in KV cache \(\s{0,4}" + NUM + r"\)"),
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
        covers=(("0.4.0", "0.33.x"),),
    ),
    FailurePattern(
        kind=FailureKind.INSUFFICIENT_FREE_GPU_MEMORY,
        markers=(
            "on startup is less than desired GPU memory utilization",
            "is less than the engine's budget after excluding",
        ),
        rank=RANK_ROOT,
        source="vLLM 0.9-0.33 v1/worker/gpu_worker.py init_device (0.33 v1/worker/utils.py request_memory)",
        covers=(("0.9.0", "0.33.x"),),
        extractors=(
            extractor("freeBytes", r"\(" + NUM + r"/" + NUM + r" ?GiB\)", "gib"),
            extractor("totalBytes", r"\(\d[\d,.]{0,24}/" + NUM + r" ?GiB\)", "gib"),
            extractor("gpuMemoryUtilization", r"memory utilization \(" + NUM + r", ", "float"),
            extractor("requestedBytes", r"memory utilization \(\d[\d.]{0,12}, " + NUM + r" ?GiB\)", "gib"),
        ),
    ),
    FailurePattern(
        kind=FailureKind.SAMPLER_WARMUP_OOM,
        markers=("occurred when warming up sampler with", "occurred when warming up pooler"),
        rank=RANK_ROOT,
        source="vLLM V1 0.8-0.33 v1/worker/gpu_model_runner.py _dummy_sampler_run; pooling models: "
        "_dummy_pooler_run (0.28 also v1/worker/gpu/pool/pooling_runner.py) 'CUDA out of memory occurred when warming "
        "up pooler (task=...) with N dummy requests. Please try lowering `max_num_seqs` or `gpu_memory_utilization`' "
        "(read in the 0.19-0.28 wheels): the same warm-up of max_num_seqs dummy requests after the KV pool",
        covers=(("0.8.0", "0.33.x"),),
        extractors=(
            extractor("dummyRequests", r"warming up sampler with " + NUM + r" dummy requests"),
            extractor("dummyRequests", r"warming up pooler \([^)]{0,60}\) with " + NUM + r" dummy requests"),
        ),
    ),
    FailurePattern(
        kind=FailureKind.WEIGHTS_DO_NOT_FIT,
        markers=("Failed to load model - not enough GPU memory",),
        rank=RANK_ROOT,
        source="vLLM 0.19-0.33 v1/worker/gpu_model_runner.py load_model (read in the 0.19-0.28 wheels)",
        covers=(("0.19.0", "0.33.x"),),
    ),
    FailurePattern(
        kind=FailureKind.CONTEXT_EXCEEDS_MODEL_LIMIT,
        markers=("is greater than the derived max_model_len",),
        rank=RANK_ROOT,
        source="vLLM 0.4-0.33 config (0.33 config/model.py _get_and_verify_max_len)",
        covers=(("0.4.0", "0.33.x"),),
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
            "[kv_cache_dtype not supported]",
            "['kv_cache_dtype not supported']",
            "FP8 KV cache is not supported by the Triton MLA backend",
        ),
        rank=RANK_ROOT,
        source="vLLM 0.11-0.17 v1/attention/backends/mla/triton_mla.py; 0.14-0.33 attention selector "
        "(platforms/cuda.py get_attn_backend_cls, read in the 0.17.1 and 0.19.0 wheels) when a backend's only reason "
        "is the KV dtype ('TRITON_MLA: [kv_cache_dtype not supported]': another KV dtype runs there; a backend that "
        "also lacks the compute capability is UnsupportedGPU); 0.33 triton_mla.py capability check",
        covers=(("0.11.0", "0.17.x"), ("0.33.0", "0.33.x")),
    ),
    FailurePattern(
        kind=FailureKind.KV_CACHE_DTYPE_UNSUPPORTED,
        markers=(
            "KV cache is not supported by the", "does not support fp8", "does not support FP8", "requires SM89",
        ),
        rank=RANK_ROOT,
        requires_any=("KV cache", "kv cache", "kv-cache", "kv_cache_dtype", "KV dtype", "fp8e4nv"),
        source="vLLM 0.18+ per-backend KV dtype checks ('FP8 KV cache is not supported by the X [attention] backend "
        "... requires SM89+'); FlashAttention backends without FP8 (flash_attn_supports_fp8() false, i.e. not SM90): "
        "V0 attention/backends/flash_attn.py 'does not support FP8 kv-cache', V1 v1/attention/backends/flash_attn.py "
        "'does not support fp8 kv-cache on this device' (seen in 0.11 and 0.18 reports); the per-backend sentence "
        "read in the 0.24-0.28 wheels (triton_attn.py, mla/triton_mla.py; absent in 0.19-0.22). Not the 0.8-0.10 "
        "fallback WARNING '--kv-cache-dtype is not supported by the V1 Engine. Falling back to V0.' (V0 goes on)",
        covers=(("0.6.0", "0.18.x"), ("0.24.0", "0.28.0"), ("0.33.0", "0.33.x")),
    ),
    FailurePattern(
        kind=FailureKind.KV_CACHE_DTYPE_UNSUPPORTED,
        markers=("kv-cache is not supported", "KV cache is not supported", "KV cache dtype is not supported",
                 "KV cache is unsupported", "KV cache not supported"),
        rank=RANK_ROOT,
        requires_any=_KV_DTYPE_WORDS,
        source="vLLM 0.5-0.28 attention/layer.py 'fp8_e5m2 kv-cache is not supported with fp8 checkpoints.' "
        "(vLLM issue 8409); 0.5-0.9 pallas 'FP8 KV cache dtype is not supported.'; 0.12-0.20 cpu_attn 'FP8 KV cache "
        "is unsupported in CPU_ATTN'; 0.19-0.28 'Quantized KV cache not supported'; 0.20-0.28 'quantized KV cache is "
        "not supported for encoder attention'; 0.21-0.28 config/vllm.py 'nvfp4 KV cache is not supported with MLA'; "
        "0.24-0.28 triton_attn 'bfloat16 KV cache is not supported on {dev}' (all read in the wheels)",
        covers=(("0.5.5", "0.28.0"),),
    ),
    FailurePattern(
        kind=FailureKind.KV_CACHE_DTYPE_UNSUPPORTED,
        markers=("is not supported with --kv-cache-dtype",),
        rank=RANK_ROOT,
        source="vLLM 0.8-0.10 engine/arg_utils.py _is_v1_supported_oracle -> _raise_or_fallback(feature_name="
        "'--kv-cache-dtype'): with VLLM_USE_V1=1 set, 'NotImplementedError: VLLM_USE_V1=1 is not supported with "
        "--kv-cache-dtype.' when the V1 attention backend has no kernel for that KV dtype (without the variable the "
        "engine falls back to V0 and logs '--kv-cache-dtype is not supported by the V1 Engine', no failure; "
        "vLLM issues 16165 (0.8.3), 17355)",
        covers=(("0.8.0", "0.10.x"),),
    ),
    FailurePattern(
        kind=FailureKind.WEIGHTS_DO_NOT_FIT,
        markers=("Failed to create unquantized linear weights",),
        rank=RANK_ROOT,
        requires_any=("insufficient memory", "out of memory"),
        source="vLLM 0.11 model_executor/layers/linear.py UnquantizedLinearMethod.create_weights: logs 'Failed to "
        "create unquantized linear weights: <CUDA OOM>' and raises 'Failed to create unquantized linear weights. This "
        "may be caused by insufficient memory to allocate the weight.' (vLLM issue 28143; absent in 0.10.1 and 0.12.0)",
        covers=(("0.11.0", "0.11.x"),),
        extractors=TORCH_OOM_EXTRACTORS,
    ),
    FailurePattern(
        kind=FailureKind.MODEL_NOT_FOUND,
        markers=("Invalid repository ID or local directory specified",),
        rank=RANK_VAGUE,
        source="vLLM 0.8-0.28 transformers_utils/config.py get_config: raised when neither config.json nor params.json "
        "is found at the name (a wrong repo id, a missing local path, a private repo without a token or no network, "
        "chained from the Hub error; 0.10+ wrapped by pydantic as 'Value error, ...'; vLLM issues 13510, 22043)",
        covers=(("0.8.5", "0.28.0"),),
    ),
    FailurePattern(
        kind=FailureKind.MAMBA_CACHE_TOO_SMALL,
        markers=("Mamba cache blocks",),
        rank=RANK_ROOT,
        source="vLLM 0.2x-0.33 config/compilation.py / v1/worker/gpu_model_runner.py (hybrid models)",
        requires_any=("max_num_seqs", "max-num-seqs", "decode sequence"),
        extractors=(
            extractor("maxNumSeqs", r"max_num_seqs \(" + NUM + r"\)"),
            extractor("availableMambaBlocks", r"Mamba cache blocks \(" + NUM + r"\)"),
            extractor("availableMambaBlocks", r"max_num_seqs to at most " + NUM),
        ),
        covers=(("0.21.0", "0.28.0"), ("main@2026-08", "main@2026-08")),
    ),
    FailurePattern(
        kind=FailureKind.SHARED_MEMORY_TOO_SMALL,
        markers=("Insufficient space in ",),
        rank=RANK_SPECIFIC,
        requires_any=("/dev/shm",),
        source="vLLM 0.27-0.31 distributed/device_communicators/shm_broadcast.py check_shm_free_space (the "
        "MessageQueue ring buffer, PR 48879; read in the 0.27.0 and 0.28.0 wheels, absent in 0.26.0: 'Insufficient "
        "space in /dev/shm: N MiB required, M MiB free.') and the KV offload region; main after PR 50358: 'A/B MiB "
        "required, C MiB free' on the next line",
        context_lines=1,
        extractors=(
            extractor("requestedBytes", r"/" + NUM + r" ?(MiB|GiB|KiB|B) required", "size"),
            extractor("requestedBytes", NUM + r" ?(MiB|GiB|KiB|B) required", "size"),
            extractor("freeBytes", NUM + r" ?(MiB|GiB|KiB|B) free", "size"),
        ),
        covers=(("0.27.0", "0.31.x"), ("main@2026-08", "main@2026-08")),
    ),
    FailurePattern(
        kind=FailureKind.SHARED_MEMORY_TOO_SMALL,
        markers=("[Errno 14] Bad address",),
        rank=RANK_SPECIFIC,
        source="vLLM v1/kv_offload/cpu/shared_offload_region.py (EFAULT pre-faulting the /dev/shm region) before "
        "the PR 50358 capacity check [3rd-party reports; exact release range unverified]",
        requires_any=("offload", "/dev/shm", "shared_offload_region", "mmap", "MADV_POPULATE"),
        context_lines=16,
        covers=(("unverified", "before PR 50358"),),
    ),
    FailurePattern(
        kind=FailureKind.SHARED_MEMORY_TOO_SMALL,
        markers=("[Errno 14] Bad address",),
        rank=RANK_HINT,
        source="vLLM KV offload region on /dev/shm (the bare EFAULT line, the traceback cut away)",
        covers=(("unverified", "before PR 50358"),),
    ),
    FailurePattern(
        kind=FailureKind.INVALID_PARALLELISM,
        markers=("must be divisible by tensor parallel size",),
        rank=RANK_ROOT,
        source="vLLM config.py verify_with_parallel_config (0.2-0.6 ValueError, read in copies of config.py); "
        "0.10+ config/model.py pydantic 'Value error, ...' (vLLM issue 52435, a 2026 release); model files (experts)",
        extractors=PARALLELISM_EXTRACTORS,
        covers=(("0.2.0", "0.6.x"), ("0.10.0", "vLLM issue 52435 (2026)")),
    ),
    FailurePattern(
        kind=FailureKind.UNSUPPORTED_GPU,
        markers=("No valid attention backend found",),
        rank=RANK_SPECIFIC,
        source="vLLM 0.14-0.33 platforms/cuda.py get_attn_backend_cls (read in the 0.17.1 and 0.19.0 wheels; absent in "
        "0.10.2): 'No valid attention backend found for cuda with AttentionSelectorConfig(...). Reasons: {BACKEND: "
        "[compute capability not supported, ...], ...}' (vLLM issues 32732, 30214): no attention kernel of this "
        "release runs the model on this GPU; one backend failing only on the KV dtype is KVCacheDtypeUnsupported",
        covers=(("0.14.0", "0.19.x"), ("0.26.0", "0.26.0")),
    ),
    FailurePattern(
        kind=FailureKind.UNSUPPORTED_GPU,
        markers=("is not valid for this configuration. Reason", "Failed to find a kernel that can implement",
                 "current device capability is not supported"),
        rank=RANK_SPECIFIC,
        requires_any=("compute capability", "capability not supported", "device capability"),
        context_lines=8,
        source="vLLM 0.11-0.19 platforms/cuda.py 'Selected backend X is not valid for this configuration. Reason: "
        "[...]' (a forced backend); model_executor/kernels/linear/__init__.py 'Failed to find a kernel that can "
        "implement the WNA16|ScaledMM linear layer. Reasons: ... requires compute capability of 90 (Hopper)' (read in "
        "the 0.19.0 wheel); fused_moe/oracle/mxfp4.py '... the current device capability is not supported'",
        covers=(("0.11.0", "0.19.x"),),
    ),
    FailurePattern(
        kind=FailureKind.UNSUPPORTED_GPU,
        markers=("Bfloat16 is only supported on GPUs with compute capability",),
        rank=RANK_ROOT,
        source="vLLM 0.4-0.33 platforms/cuda.py check_if_supports_dtype (0.10.2 also worker/worker.py _check_if_gpu_"
        "supports_dtype; read in the 0.10.2, 0.17.1 and 0.19.0 wheels): 'Bfloat16 is only supported on GPUs with "
        "compute capability of at least 8.0. Your Tesla T4 GPU has compute capability 7.5. You can use float16 "
        "instead by explicitly setting the `dtype` flag in CLI, for example: --dtype=half.'",
        extractors=(
            extractor("computeCapability", r"has compute capability " + NUM, "cc"),
            extractor("minimumComputeCapability", r"compute capability of at least " + NUM, "cc"),
        ),
        covers=(("0.4.0", "0.19.x"),),
    ),
    FailurePattern(
        kind=FailureKind.UNSUPPORTED_GPU,
        markers=("FlashMLA is only supported on Hopper", "FlashMLA Dense is only supported on Hopper",
                 "FlashMLA Sparse is only supported on Hopper", "FA2 is only supported on devices with compute "
                 "capability", "FA3 is only supported on devices with compute capability"),
        rank=RANK_SPECIFIC,
        source="vLLM 0.11 attention/ops/flashmla.py 'FlashMLA is only supported on Hopper devices.'; 0.19 "
        "v1/attention/ops/flashmla.py 'FlashMLA Dense|Sparse is only supported on Hopper [and Blackwell] devices.', "
        "vllm_flash_attn/flash_attn_interface.py 'FA2 is only supported on devices with compute capability >= 8' / "
        "'FA3 ... 9.x' (a backend or FlashAttention version forced by the environment)",
        covers=(("0.11.0", "0.19.x"),),
    ),
    FailurePattern(
        kind=FailureKind.KV_CACHE_DTYPE_UNSUPPORTED,
        markers=("Cannot use FlashAttention-2 backend for FP8 KV cache",),
        rank=RANK_HINT,
        source="vLLM V0 0.4-0.6 attention/selector.py (INFO line before falling back to XFormers)",
        covers=(("0.4.0", "0.6.x"),),
    ),
    FailurePattern(
        kind=FailureKind.UNKNOWN,
        markers=("Engine core initialization failed", "EngineCore failed to start"),
        rank=RANK_WRAPPER,
        source="vLLM V1 0.8-0.33 v1/engine/utils.py / v1/engine/core.py (wrapper; the cause is logged above)",
        covers=(("0.8.0", "0.33.x"),),
    ),
)
"""vLLM's failure texts, V0 (0.4-0.6) and V1 (0.8-0.33)."""

PHASE_MARKERS: tuple[PhaseMarker, ...] = (
    PhaseMarker(StartupPhase.LOADING, "Starting to load model", "vLLM V1 gpu_model_runner.py load_model"),
    PhaseMarker(StartupPhase.LOADING, "Loading safetensors checkpoint shards", "vLLM model_loader (tqdm bar)"),
    PhaseMarker(StartupPhase.LOADING, "Loading pt checkpoint shards", "vLLM model_loader (tqdm bar)"),
    PhaseMarker(StartupPhase.LOADING, "Loading safetensors using Runai Model Streamer", "vLLM runai_streamer loader"),
    PhaseMarker(StartupPhase.LOADING, "load_weights", "traceback frame (model load_weights)"),
    PhaseMarker(StartupPhase.LOADING, "load_model", "traceback frame (worker/runner load_model)"),
    PhaseMarker(StartupPhase.LOADING, "weight_loader", "traceback frame (parameter weight_loader)"),
    PhaseMarker(StartupPhase.LOADING, "create_weights",
                "traceback frame (quantization method create_weights: the weight "
                "tensors are allocated while the model is built, 0.2-0.28)"),
    PhaseMarker(StartupPhase.LOADING, "Failed to create unquantized linear weights", "vLLM 0.11 linear.py log line"),
    PhaseMarker(StartupPhase.PROFILING, "Model loading took",
                "vLLM gpu_model_runner.py (0.11 '%.4f GiB', 0.20+ '%s GiB')"),
    PhaseMarker(StartupPhase.PROFILING, "Loading weights took", "vLLM model_loader"),
    PhaseMarker(StartupPhase.PROFILING, "profile_run", "traceback frame (gpu_model_runner.profile_run)"),
    PhaseMarker(StartupPhase.PROFILING, "Loading model weights took",
                "vLLM V0 0.4-0.10 worker/model_runner.py load_model "
                "log (read in the 0.6.3 wheel; 0.5.4 and 0.6.2 reports): weights are loaded, the profile run is next"),
    PhaseMarker(StartupPhase.PROFILING, "determine_num_available_blocks",
                "V0 worker.py / executor frame and the multiproc "
                "'while processing method determine_num_available_blocks' line (0.4-0.10; profile_run inside)"),
    PhaseMarker(StartupPhase.PROFILING, "Starting profile run",
                "vLLM V0 0.6 worker/enc_dec_model_runner.py profile_run log"),
    PhaseMarker(StartupPhase.PROFILING, "determine_available_memory", "traceback frame (gpu_worker)"),
    PhaseMarker(StartupPhase.KV_READY, "Memory profiling takes",
                "vLLM V0 worker.py determine_num_available_blocks / V1 "
                "gpu_worker.py determine_available_memory: logged after profile_run returned, the KV pool is sized"),
    PhaseMarker(StartupPhase.KV_READY, "Memory profiling results",
                "vLLM 0.6.4-0.6.6 worker.py (the same ledger, one line, "
                "after profile_run)"),
    PhaseMarker(StartupPhase.KV_READY, "Available KV cache memory", "vLLM gpu_worker.py log"),
    PhaseMarker(StartupPhase.KV_READY, "GPU KV cache size", "vLLM kv_cache_utils.py log"),
    PhaseMarker(StartupPhase.KV_READY, "# GPU blocks", "vLLM V0 executor log"),
    PhaseMarker(StartupPhase.KV_READY, "# cuda blocks", "vLLM V0.6 executor log"),
    PhaseMarker(StartupPhase.CAPTURE, "Capturing CUDA graph", "vLLM V1 capture log / tqdm bar"),
    PhaseMarker(StartupPhase.CAPTURE, "Capturing cudagraphs", "vLLM V0 model_runner.py log"),
    PhaseMarker(StartupPhase.CAPTURE, "Capturing the model for CUDA graphs", "vLLM V0 model_runner.py log"),
    PhaseMarker(StartupPhase.CAPTURE, "capture_model", "traceback frame (gpu_model_runner.capture_model)"),
    PhaseMarker(StartupPhase.CAPTURE, "_capture_cudagraphs", "traceback frame (V1 gpu_model_runner)"),
    PhaseMarker(StartupPhase.CAPTURE, "compile_or_warm_up_model", "traceback frame (V1 gpu_worker)"),
    PhaseMarker(StartupPhase.CAPTURE, "graph_capture", "traceback frame (distributed/parallel_state.graph_capture)"),
    PhaseMarker(StartupPhase.CAPTURE, "Graph capturing finished", "vLLM capture log (after capture: warm-up)"),
    PhaseMarker(StartupPhase.SAMPLER, "_dummy_sampler_run", "traceback frame (V1 gpu_model_runner)"),
    PhaseMarker(StartupPhase.SERVING, "Application startup complete", "uvicorn (vLLM API server ready)"),
    PhaseMarker(StartupPhase.SERVING, "Starting vLLM API server", "vLLM entrypoints/openai/api_server.py"),
)
"""Where vLLM is in its start-up, for CUDA OOMs without their own message."""

WORDING_COVERAGE: tuple[WordingCoverage, ...] = coverage_table(FAILURE_PATTERNS)
"""Which vLLM versions each pattern's wording was checked against: (kind, first marker, version ranges)."""
