"""Failure wordings and the kind (and numbers) each must classify as, shared by ``test_classify_wordings``.

``Wording`` is one text an engine (or a library under it) raises; ``REPORT_WORDINGS`` are the classes of the public
failure reports (tests/fixtures/public-report-logs.yaml) in the wording of other engine versions.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ctxfit.api import EngineKind, GiB
from ctxfit.recovery import FailureKind

K = FailureKind
VLLM = EngineKind.VLLM


@dataclass(frozen=True)
class Wording:
    id: str
    kind: FailureKind
    text: str
    engine: EngineKind | None = VLLM
    numbers: dict[str, Any] = field(default_factory=dict)
    events: tuple[str, ...] = ()
    node: str | None = None


# The same classes in the wording of other engine versions (the text each engine's wheel raises).
_ROWS: list[tuple[str, EngineKind, FailureKind, str, dict[str, float]]] = [
    ("sglang-0.1.13-not-enought-memory", EngineKind.SGLANG, K.STATIC_MEMORY_TOO_SMALL,
     "RuntimeError: Not enought memory. Please try to increase --mem-fraction-static.", {}),
    ("sglang-0.3.6-0.5.10-pool-assert", EngineKind.SGLANG, K.STATIC_MEMORY_TOO_SMALL,
     "    assert self.max_req_len > 0 and self.max_req_input_len > 0, \"Memory pool size is too small\"\n"
     "AssertionError: Memory pool size is too small", {}),
    ("sglang-capture-oom-still-a-capture-oom", EngineKind.SGLANG, K.GRAPH_CAPTURE_OOM,
     "Exception: Capture cuda graph failed: CUDA error: out of memory\nPossible solutions:\n"
     "1. set --mem-fraction-static to a smaller value (e.g., 0.8 or 0.7)", {}),
    ("sglang-0.5.10-piecewise-capture-oom", EngineKind.SGLANG, K.GRAPH_CAPTURE_OOM,
     "[2026-01-01 00:00:00 TP0] Capture piecewise CUDA graph begin. avail mem=3.10 GB\n"
     "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 512.00 MiB. GPU 0 has a total capacity of "
     "79.10 GiB of which 310.00 MiB is free.", {}),
    ("sglang-capture-illegal-access-is-no-oom", EngineKind.SGLANG, K.UNKNOWN,
     "Exception: Capture cuda graph failed: CUDA error: an illegal memory access was encountered\n"
     "Possible solutions:\n1. set --mem-fraction-static to a smaller value (e.g., 0.8 or 0.7)", {}),
    ("sglang-0.5.4-trtllm-mla-kv-dtype", EngineKind.SGLANG, K.KV_CACHE_DTYPE_UNSUPPORTED,
     "ValueError: TensorRT-LLM MLA backend only supports kv-cache-dtype of fp8_e4m3 or auto.", {}),
    ("sglang-0.5.10-dsa-kv-dtype", EngineKind.SGLANG, K.KV_CACHE_DTYPE_UNSUPPORTED,
     "AssertionError: DeepSeek DSA only supports bf16/bfloat16 or fp8_e4m3 kv_cache_dtype", {}),
    ("sglang-0.5.x-unknown-kv-dtype", EngineKind.SGLANG, K.KV_CACHE_DTYPE_UNSUPPORTED,
     "ValueError: Unsupported kv_cache_dtype: fp8_e5m2.", {}),
    ("vllm-0.7-v1-kv-in-gb", EngineKind.VLLM, K.KV_CACHE_TOO_SMALL,
     "ValueError: To serve at least one request with the models's max seq len (131072), (16.00 GB KV cache is "
     "needed, which is larger than the available KV cache memory (9.50 GB). Try increasing "
     "`gpu_memory_utilization` or decreasing `max_model_len` when initializing the engine.",
     {"requestedContextLength": 131072, "neededBytes": 16 * GiB, "availableBytes": 9.5 * GiB}),
    ("vllm-0.5-0.9-pallas-fp8", EngineKind.VLLM, K.KV_CACHE_DTYPE_UNSUPPORTED,
     "NotImplementedError: FP8 KV cache dtype is not supported.", {}),
    ("vllm-0.12-0.20-cpu-attn-fp8", EngineKind.VLLM, K.KV_CACHE_DTYPE_UNSUPPORTED,
     "NotImplementedError: FP8 KV cache is unsupported in CPU_ATTN", {}),
    ("vllm-0.21-0.28-nvfp4-mla", EngineKind.VLLM, K.KV_CACHE_DTYPE_UNSUPPORTED,
     "ValueError: nvfp4 KV cache is not supported with MLA (Multi-head Latent Attention) models.", {}),
    ("vllm-0.24-0.28-bf16-kv-on-old-gpu", EngineKind.VLLM, K.KV_CACHE_DTYPE_UNSUPPORTED,
     "ValueError: bfloat16 KV cache is not supported on Tesla V100-SXM2-32GB (compute capability 7.0)", {}),
    ("vllm-hybrid-kv-is-no-dtype", EngineKind.VLLM, K.UNKNOWN,
     "NotImplementedError: Hybrid KV cache is not supported for eagle + chunked local attention.", {}),
    ("vllm-0.11-linear-weights-raise", EngineKind.VLLM, K.WEIGHTS_DO_NOT_FIT,
     "RuntimeError: Failed to create unquantized linear weights. This may be caused by insufficient memory to "
     "allocate the weight.", {}),
    ("vllm-oom-in-create-weights-frame", EngineKind.VLLM, K.WEIGHTS_DO_NOT_FIT,
     "Traceback (most recent call last):\n"
     '  File "/usr/lib/python3/site-packages/vllm/model_executor/layers/linear.py", line 190, in create_weights\n'
     "    weight = Parameter(torch.empty(sum(output_partition_sizes),\n"
     "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 896.00 MiB. GPU 0 has a total capacity of "
     "23.57 GiB of which 120.00 MiB is free.", {"requestedBytes": 896 * 2**20}),
    ("vllm-invalid-repo-with-network-cause", EngineKind.VLLM, K.DOWNLOAD_INTERRUPTED,
     "requests.exceptions.ConnectionError: HTTPSConnectionPool(host='huggingface.co', port=443): Max retries "
     "exceeded with url: /api/models/org/model\n\nThe above exception was the direct cause of the following "
     "exception:\n\nValueError: Invalid repository ID or local directory specified: 'org/model'.", {}),
    ("hub-validate-repo-id-form", EngineKind.SGLANG, K.MODEL_NOT_FOUND,
     "huggingface_hub.utils._validators.HFValidationError: Repo id must be in the form 'repo_name' or "
     "'namespace/repo_name': '/models/llama/'. Use `repo_type` argument if needed.", {}),
    ("transformers-cant-load-config", EngineKind.SGLANG, K.MODEL_NOT_FOUND,
     "OSError: Can't load the configuration of '/models/llama'. If you were trying to load it from "
     "'https://huggingface.co/models', make sure you don't have a local directory with the same name. Otherwise, "
     "make sure '/models/llama' is the correct path to a directory containing a config.json file", {}),
    ("transformers-cant-load-config-after-network-error", EngineKind.SGLANG, K.DOWNLOAD_INTERRUPTED,
     "requests.exceptions.ReadTimeout: (ReadTimeoutError(\"HTTPSConnectionPool(host='huggingface.co', port=443): "
     "Read timed out. (read timeout=10)\"), '(Request ID: x)')\n\nDuring handling of the above exception, another "
     "exception occurred:\n\nOSError: Can't load the configuration of 'Qwen/Qwen2-7B'. If you were trying to load "
     "it from 'https://huggingface.co/models', make sure you don't have a local directory with the same name.", {}),
    ("hub-1.x-httpx-404", EngineKind.SGLANG, K.MODEL_NOT_FOUND,
     "huggingface_hub.errors.HfHubHTTPError: Client error '404 Not Found' for url "
     "'https://huggingface.co/api/models/acme/missing/revision/main'", {}),
    ("hub-offline-warning-without-the-exception-stays-out", EngineKind.VLLM, K.UNKNOWN,
     "WARNING 01-01 00:00:00 utils.py:10] could not list files: Cannot reach https://huggingface.co/api/models/x/y: "
     "offline mode is enabled.\nRuntimeError: something else broke", {}),
    ("vllm-0.7-retry-log-is-no-failure", EngineKind.VLLM, K.UNKNOWN,
     "ERROR 03-06 11:03:52 config.py:102] Error retrieving file list: Repo id must be in the form 'repo_name' or "
     "'namespace/repo_name': '/home/Models/Qwen2.5-7B-Instruct-GPTQ-Int4/'. Use `repo_type` argument if "
     "needed., retrying 1 of 2", {}),
    ("cpu-allocator-enomem", EngineKind.VLLM, K.HOST_OOM_KILLED,
     "RuntimeError: [enforce fail at alloc_cpu.cpp:114] data. DefaultCPUAllocator: can't allocate memory: you "
     "tried to allocate 4009910272 bytes. Error code 12 (Cannot allocate memory)", {"requestedBytes": 4009910272}),
    ("nccl-ibv-enomem-is-no-host-oom", EngineKind.VLLM, K.UNKNOWN,
     "NCCL WARN Call to ibv_reg_mr failed with error Cannot allocate memory\n"
     "RuntimeError: NCCL error: unhandled system error (run with NCCL_DEBUG=INFO for details)", {}),
    ("ptx-error-code-name", EngineKind.SGLANG, K.CUDA_DRIVER_TOO_OLD,
     "RuntimeError: CUDA error: cudaErrorUnsupportedPtxVersion (222)", {}),
    ("sglang-0.5.23-target-decode-capture-oom", EngineKind.SGLANG, K.GRAPH_CAPTURE_OOM,
     "[2026-01-01 00:00:00 TP0] Capture target decode CUDA graph begin. backend=full, num_tokens_per_req=1, avail "
     "mem=3.10 GB\ntorch.OutOfMemoryError: CUDA out of memory. Tried to allocate 512.00 MiB. GPU 0 has a total "
     "capacity of 79.10 GiB of which 310.00 MiB is free.", {}),
    ("sglang-0.5.10-npu-graph-capture-oom", EngineKind.SGLANG, K.GRAPH_CAPTURE_OOM,
     "[2026-01-01 00:00:00 TP0] Capture npu graph begin. This can take up to several minutes. avail mem=3.10 GB\n"
     "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 512.00 MiB.", {}),
    ("sglang-0.4.9-negative-profile-then-not-enough-memory", EngineKind.SGLANG, K.STATIC_MEMORY_TOO_SMALL,
     "[2025-07-01 00:00:00 TP0] max_total_tokens=131072 is larger than the profiled value -5619. Use the profiled "
     "value instead.\nRuntimeError: Not enough memory. Please try to increase --mem-fraction-static.", {}),
    # sglang3 pass: configs/model_config.py _derive_context_length. With SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN=1 or
    # a speculative draft model (an EAGLE head of 2048 positions) the sentence is a logged warning and the start goes
    # on; only the raised ValueError (0.5.x prefixes it with the warning's "Warning: ") is a context refusal.
    ("sglang-0.5-draft-context-warning-then-not-enough-memory", EngineKind.SGLANG, K.STATIC_MEMORY_TOO_SMALL,
     "[2026-02-08 03:35:35] Warning: Target model's context_length (8192) is greater than the derived context_length "
     "(2048). This may lead to incorrect model outputs or CUDA errors. Note that the derived context_length may differ "
     "from max_position_embeddings in the model's config.\n[2026-02-08 03:35:35] Overriding the draft model's "
     "max_position_embeddings to 8192.\nRuntimeError: Not enough memory. Please try to increase --mem-fraction-static.",
     {}),
    ("sglang-0.4-context-override-warning-is-no-failure", EngineKind.SGLANG, K.UNKNOWN,
     "[2025-02-14 10:00:00] Warning: User-specified context_length (131072) is greater than the derived context_length "
     "(8192). This may lead to incorrect model outputs or CUDA errors.\nRuntimeError: something else broke", {}),
    ("sglang-0.5-context-error-built-from-the-warning", EngineKind.SGLANG, K.CONTEXT_EXCEEDS_MODEL_LIMIT,
     "ValueError: Warning: User-specified context_length (262144) is greater than the derived context_length (40960). "
     "This may lead to incorrect model outputs or CUDA errors. Note that the derived context_length may differ from "
     "max_position_embeddings in the model's config. To allow overriding this maximum, set the env var "
     "SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN=1",
     {"requestedContextLength": 262144, "derivedMaxContextLength": 40960}),
    ("sglang-positive-profile-warning-is-no-failure", EngineKind.SGLANG, K.UNKNOWN,
     "[2025-07-01 00:00:00 TP0] max_total_tokens=131072 is larger than the profiled value 56198. Use the profiled "
     "value instead.\nRuntimeError: something else broke", {}),
    # vllm2 pass: v1/worker/gpu_model_runner.py _dummy_pooler_run (0.19-0.28 wheels): the pooling models' warm-up.
    ("vllm-0.19-0.28-pooler-warmup-oom", EngineKind.VLLM, K.SAMPLER_WARMUP_OOM,
     "RuntimeError: CUDA out of memory occurred when warming up pooler (task='embed') with 1024 dummy requests. "
     "Please try lowering `max_num_seqs` or `gpu_memory_utilization` when initializing the engine.",
     {"dummyRequests": 1024}),
    # V0 0.4-0.10 (model_runner.py, 0.6.3 wheel; vLLM issue 8879's log): the weights loaded, then the profile run
    # ran out of memory. Before the V0 phase lines this was read as a weights OOM (permanent).
    ("vllm-v0-oom-after-weights-loaded-is-no-weights-oom", EngineKind.VLLM, K.UNKNOWN,
     "Loading safetensors checkpoint shards: 100% Completed | 5/5 [00:03<00:00,  1.36it/s]\n\n"
     "INFO 09-27 11:18:22 model_runner.py:1025] Loading model weights took 19.9073 GB\n"
     "INFO 09-27 11:18:35 enc_dec_model_runner.py:297] Starting profile run for multi-modal models.\n"
     "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 3.59 GiB. GPU 0 has a total capacity of "
     "31.73 GiB of which 3.11 GiB is free.", {}),
    # FlashInfer MLA plan(), the per-backend wording (the fa2 backend has no FP8 MLA kernel).
    ("flashinfer-mla-kv-dtype-fa2-backend", EngineKind.VLLM, K.KV_CACHE_DTYPE_UNSUPPORTED,
     "ValueError: MLA kv_data_type torch.float8_e4m3fn is not supported by the fa2 backend. Supported dtypes: "
     "[torch.float16, torch.bfloat16].", {}),
    # 0.8-0.10 engine/arg_utils.py _raise_or_fallback without VLLM_USE_V1=1: a WARNING, V0 goes on; the failure is
    # whatever comes after it.
    ("vllm-0.8-v1-kv-dtype-fallback-warning-is-no-failure", EngineKind.VLLM, K.UNKNOWN,
     "WARNING 06-23 13:44:32 [arg_utils.py:1642] --kv-cache-dtype is not supported by the V1 Engine. Falling back "
     "to V0.\nINFO 06-23 13:44:32 [config.py:1559] Using fp8 data type to store kv cache.\n"
     "RuntimeError: something else broke", {}),
    ("vllm-0.8-v1-kv-dtype-fallback-then-capture-oom", EngineKind.VLLM, K.GRAPH_CAPTURE_OOM,
     "WARNING 06-23 13:44:32 [arg_utils.py:1642] --kv-cache-dtype is not supported by the V1 Engine. Falling back "
     "to V0.\nINFO 06-23 13:45:10 model_runner.py:1442] Capturing cudagraphs for decoding.\n"
     "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 MiB. GPU 0 has a total capacity of "
     "44.53 GiB of which 448.00 KiB is free.", {}),
]
REPORT_WORDINGS = [Wording(wid, kind, text, engine, numbers=numbers) for wid, engine, kind, text, numbers in _ROWS]
