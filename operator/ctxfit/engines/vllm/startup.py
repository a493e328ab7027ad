"""vLLM start-up accounting: the memory ledger vLLM prints while it starts, per version family, as data.

Wordings (each read in the vLLM source named in ``source``; multi-rank logs repeat them per worker):
- V0 0.6.4 ``worker/worker.py`` ``determine_num_available_blocks``: one line "Memory profiling results:
  total_gpu_memory=..GiB initial_memory_usage=.. peak_torch_memory=..GiB .. non_torch_memory=..GiB
  kv_cache_size=..GiB gpu_memory_utilization=..".
- V0 0.6.5 the same function, one item per line: "model weights take   7.48GiB", "non_torch_memory
  3.58GiB", "PyTorch activation peak memory       1.26GiB", "available_kv_cache_memory  ..GiB".
- V0 0.6.6 - 0.10 the same function: "model weights take X GiB; non_torch_memory takes X GiB; PyTorch
  activation peak memory takes X GiB; the rest of the memory reserved for KV Cache is X GiB."
- V0 ``executor/executor_base.py`` ``initialize_cache`` (0.6.x ``gpu_executor.py``): "# GPU blocks: N,
  # CPU blocks: M" ("# cuda blocks", "# CUDA blocks" from 0.7) and "Maximum concurrency for L tokens
  per request: Cx"; ``engine/llm_engine.py`` "Initializing a V0 LLM engine ... max_seq_len=N".
- V0 ``worker/model_runner.py`` ``load_model``: "Loading model weights took X GB" (<= 0.7), "Model
  loading took X GiB and S seconds" (0.8 - 0.10).
- V1 ``v1/worker/gpu_model_runner.py`` ``load_model``: "Loading model weights took X GB" (0.7),
  "Model loading took X GB and S seconds" (0.8.0 - 0.8.2), "... X GiB and ..." (0.8.3 - 0.13), "... X GiB memory
  and ..." (0.12 - 0.33; Model Runner V2 ``v1/worker/gpu/model_runner.py`` without "memory" up to 0.27);
  ``capture_model``: "Graph capturing finished in S secs, took X GiB" (0.8 - 0.33).
- V1 ``v1/worker/gpu_worker.py`` ``determine_available_memory``: "Available KV cache memory: X GiB" (0.7, 0.9.2 -
  0.33; 0.8.0 - 0.9.0 print only the tokens); ``MemoryProfilingResult.__repr__`` (``utils/__init__.py`` 0.9.2 -
  0.13, ``utils/mem_utils.py`` 0.14 - 0.33): "Memory profiling takes S seconds. Total non KV cache memory: ..;
  torch peak memory increase: X GiB; non-torch forward increase memory: X GiB; weights memory: X GiB." (0.9.2 -
  0.26), "...; torch peak memory increase: X GiB; total consumed (from mem_get_info): C GiB; weights memory: W GiB."
  (0.27 - 0.33: C is weights + non-torch + other persistent memory, so non-torch is derived as C - W);
  ``compile_or_warm_up_model``: "CUDA graph pool memory: X GiB (actual), ..." (0.18 - 0.33) and the debug line
  "Free memory on device (F/T GiB) on startup. ... Actual usage is X GiB for weight, X GiB for peak activation, X
  GiB for non-torch memory, and X GiB for CUDAGraph memory ... Current kv cache memory in use is X GiB" (0.10.2 -
  0.26; 0.10.2 ends "... in use is N bytes."; 0.27 - 0.33 "Actual usage is C GiB for consumed memory
  (weights + non-torch), X GiB for peak activation, and X GiB for CUDAGraph memory", C not read as weights).
- V1 ``v1/core/kv_cache_utils.py`` ``get_kv_cache_config`` / ``_report_kv_cache_config`` /
  ``update_kv_cache_capacity``: "# GPU blocks: N" (0.7), "GPU KV cache size: N tokens" (0.8 - 0.27, its own line),
  "GPU KV cache size: N tokens, Maximum concurrency for L tokens per request: Cx" (one line, 0.28 - 0.33; from 0.30
  the pool name is the device's, "GPU" on CUDA, and 0.32 - 0.33 print "GPU + host KV cache size" with HiSparse: a
  GPU + host capacity, not read as the GPU pool), "Maximum concurrency for L tokens per request: Cx" (0.7 - 0.27 its
  own line).
- V0 and V1 ``_check_enough_kv_cache_memory`` / ``_verify_args``: "The model's max seq len (L) is
  larger than the maximum number of tokens that can be stored in KV cache (N)".
- ``config.py`` (0.9.2 - 0.10) / ``config/model.py`` ``ModelConfig`` (0.11 - 0.33): "Using max model len N".
- V0 ``executor/executor_base.py`` ``initialize_cache`` in the 0.8 - 0.11 wheels: "# cuda blocks: N, # CPU blocks: M".

Every V1 wording above was read in the wheels 0.8.0 - 0.33.0 (hack/startup_wordings.py lists each message with the
versions that print it: tests/fixtures/startups/wordings.json).
"""

from __future__ import annotations

import re

from ctxfit.vocab.patterns import NUM
from ctxfit.vocab.startup import MAX_LINE_CHARS, StartupPattern, StartupReport, scan

_UNIT = r" ?(GiB|GB|MiB|MB)"
_SP = r"\s{1,12}"
V0 = "vLLM V0 0.6 - 0.10"
LOAD_MODEL = "worker/model_runner.py, v1/worker/gpu_model_runner.py load_model"
V1 = "vLLM V1 0.7 - 0.33"
_PROFILE = "utils/mem_utils.py MemoryProfilingResult (v1/worker/gpu_worker.py determine_available_memory)"
DEFAULT_BLOCK_SIZE = 16
"""Tokens per KV block when the log prints blocks but no block size: ``CacheConfig.block_size``
default 16 on CUDA (vLLM ``config.py`` / ``config/cache.py`` ``CacheConfig``, 0.6 - 0.10)."""
MAX_VERSION_SCAN_CHARS = 1 << 20
"""Characters from the start of a log searched for the version line (vLLM states it in its first lines)."""

STARTUP_PATTERNS: tuple[StartupPattern, ...] = (
    # weights
    StartupPattern("weights_bytes", "Model loading took", r"Model loading took " + NUM + _UNIT, "bytes", "max",
                   "vLLM 0.8 - 0.33 (V0 and V1)", LOAD_MODEL),
    StartupPattern("load_seconds", "Model loading took", r"Model loading took .{0,40}? and " + NUM + " seconds",
                   "float", "max", "vLLM 0.8 - 0.33", LOAD_MODEL),
    StartupPattern("weights_bytes", "Loading model weights took", r"Loading model weights took " + NUM + _UNIT,
                   "bytes", "max", "vLLM 0.6 - 0.7", LOAD_MODEL),
    StartupPattern("weights_bytes", "model weights take", r"model weights take" + _SP + NUM + _UNIT, "bytes", "max",
                   V0, "worker/worker.py determine_num_available_blocks"),
    StartupPattern("weights_bytes", "weights memory:", r"weights memory: " + NUM + _UNIT, "bytes", "max",
                   "vLLM V1 0.9.2 - 0.33", _PROFILE),
    StartupPattern("weights_bytes", "for weight,", r"Actual usage is " + NUM + _UNIT + " for weight", "bytes", "max",
                   "vLLM V1 0.10.2 - 0.26 (debug)", "v1/worker/gpu_worker.py compile_or_warm_up_model"),
    # activation
    StartupPattern("activation_bytes", "torch peak memory increase:", r"torch peak memory increase: " + NUM + _UNIT,
                   "bytes", "max", "vLLM V1 0.9.2 - 0.33", _PROFILE),
    StartupPattern("activation_bytes", "PyTorch activation peak memory",
                   r"PyTorch activation peak memory(?: takes)?" + _SP + NUM + _UNIT, "bytes", "max", V0,
                   "worker/worker.py determine_num_available_blocks"),
    StartupPattern("activation_bytes", "for peak activation", r", " + NUM + _UNIT + " for peak activation", "bytes",
                   "max", "vLLM V1 0.10 - 0.33 (debug)", "v1/worker/gpu_worker.py compile_or_warm_up_model"),
    StartupPattern("peak_torch_bytes", "peak_torch_memory=", r"peak_torch_memory=" + NUM + _UNIT, "bytes", "max",
                   "vLLM V0 0.6.4", "worker/worker.py determine_num_available_blocks"),
    # non-torch
    StartupPattern("non_torch_bytes", "non_torch_memory", r"non_torch_memory(?: takes|=|" + _SP + r")\s{0,12}"
                   + NUM + _UNIT, "bytes", "max", V0, "worker/worker.py determine_num_available_blocks"),
    StartupPattern("non_torch_bytes", "non-torch forward increase memory:",
                   r"non-torch forward increase memory: " + NUM + _UNIT, "bytes", "max", "vLLM V1 0.9.2 - 0.26",
                   _PROFILE),
    StartupPattern("non_torch_bytes", "for non-torch memory", r" " + NUM + _UNIT + " for non-torch memory", "bytes",
                   "max", "vLLM V1 0.10 - 0.26 (debug)", "v1/worker/gpu_worker.py compile_or_warm_up_model"),
    StartupPattern("consumed_bytes", "total consumed (from mem_get_info):",
                   r"total consumed \(from mem_get_info\): " + NUM + _UNIT, "bytes", "max", "vLLM V1 0.27 - 0.33",
                   _PROFILE),
    StartupPattern("cuda_graph_bytes", "for CUDAGraph memory", r" " + NUM + _UNIT + " for CUDAGraph memory", "bytes",
                   "max", "vLLM V1 0.10 - 0.33 (debug)", "v1/worker/gpu_worker.py compile_or_warm_up_model"),
    # CUDA graphs (captured, not the estimate)
    StartupPattern("cuda_graph_bytes", "Graph capturing finished in",
                   r"Graph capturing finished in [\d.]{1,12} secs?, took " + NUM + _UNIT, "bytes", "max",
                   "vLLM 0.6 - 0.33",
                   "worker/model_runner.py, v1/worker/gpu_model_runner.py capture_model"),
    StartupPattern("cuda_graph_bytes", "CUDA graph pool memory:", r"CUDA graph pool memory: " + NUM + _UNIT
                   + r" \(actual\)", "bytes", "max", "vLLM V1 0.18 - 0.33",
                   "v1/worker/gpu_worker.py compile_or_warm_up_model"),
    # CUDA-visible total of one GPU (with the node's NVML total: the driver's reserve, budget/calibrate.py)
    StartupPattern("cuda_total_bytes", "Free memory on device", r"Free memory on device[^(]{0,24}\([\d.]{1,12}/"
                   + NUM + _UNIT + r"\)", "bytes", "min", "vLLM V1 0.9 - 0.33",
                   "v1/worker/gpu_worker.py init_device / compile_or_warm_up_model (0.33 v1/worker/utils.py)"),
    StartupPattern("cuda_total_bytes", "total_gpu_memory", r"total_gpu_memory(?:=|" + _SP + r"\(|" + r" \()"
                   + NUM + _UNIT, "bytes", "min", "vLLM V0 0.6.4 - 0.10",
                   "worker/worker.py determine_num_available_blocks"),
    # KV pool bytes
    StartupPattern("kv_cache_bytes", "Available KV cache memory:", r"Available KV cache memory: " + NUM + _UNIT,
                   "bytes", "min", V1, "v1/worker/gpu_worker.py determine_available_memory"),
    StartupPattern("kv_cache_bytes", "reserved for KV Cache is",
                   r"reserved for KV Cache is " + NUM + _UNIT, "bytes", "min", "vLLM V0 0.6.6 - 0.10",
                   "worker/worker.py determine_num_available_blocks"),
    StartupPattern("kv_cache_bytes", "available_kv_cache_memory",
                   r"available_kv_cache_memory(?:=|" + _SP + ")" + NUM + _UNIT, "bytes", "min", "vLLM V0 0.6.5",
                   "worker/worker.py determine_num_available_blocks"),
    StartupPattern("kv_cache_bytes", "kv_cache_size=", r"kv_cache_size=" + NUM + _UNIT, "bytes", "min",
                   "vLLM V0 0.6.4", "worker/worker.py determine_num_available_blocks"),
    StartupPattern("kv_cache_bytes", "Current kv cache memory in use is",
                   r"Current kv cache memory in use is " + NUM + _UNIT, "bytes", "min",
                   "vLLM V1 0.11 - 0.33 (debug)", "v1/worker/gpu_worker.py compile_or_warm_up_model"),
    StartupPattern("kv_cache_bytes", "Current kv cache memory in use is",
                   r"Current kv cache memory in use is " + NUM + r" (bytes)\b", "bytes", "min",
                   "vLLM V1 0.10.2 (debug, in bytes)", "v1/worker/gpu_worker.py compile_or_warm_up_model"),
    # KV pool tokens / blocks ("GPU + host KV cache size", 0.32+ HiSparse, holds host blocks: not the GPU pool)
    StartupPattern("kv_cache_tokens", "GPU KV cache size:", r"GPU KV cache size: " + NUM + " tokens", "int", "min",
                   "vLLM V1 0.8 - 0.33", "v1/core/kv_cache_utils.py get_kv_cache_config (0.28 - 0.33 "
                   "update_kv_cache_capacity)"),
    StartupPattern("kv_cache_tokens", "can be stored in KV cache",
                   r"can be stored in KV cache \(" + NUM + r"\)", "int", "min", "vLLM V0 0.6 - 0.10, V1 0.7",
                   "engine/llm_engine.py / v1/core/kv_cache_utils.py _check_enough_kv_cache_memory"),
    StartupPattern("num_gpu_blocks", "blocks:", r"# (?:GPU|cuda|CUDA) blocks: " + NUM, "int", "min",
                   "vLLM V0 0.6 - 0.10, V1 0.7", "executor/executor_base.py initialize_cache, "
                   "v1/core/kv_cache_utils.py"),
    StartupPattern("block_size", "block_size", r"block_size[ =]" + NUM, "int", "first", "vLLM 0.6 - 0.28",
                   "engine/llm_engine.py config line (block_size=N)"),
    # concurrency and served context
    StartupPattern("max_concurrency", "Maximum concurrency for",
                   r"Maximum concurrency for [\d,]{1,16} tokens per request: " + NUM + "x", "float", "min",
                   "vLLM V0 0.6.4 - 0.10, V1 0.7 - 0.33", "executor/executor_base.py, v1/core/kv_cache_utils.py"),
    StartupPattern("concurrency_context_length", "Maximum concurrency for",
                   r"Maximum concurrency for " + NUM + " tokens per request", "int", "min",
                   "vLLM V0 0.6.4 - 0.10, V1 0.7 - 0.33", "executor/executor_base.py, v1/core/kv_cache_utils.py"),
    StartupPattern("served_context_length", "max_seq_len=", r"\bmax_seq_len=" + NUM, "int", "min",
                   "vLLM V0 0.6 - 0.10", "engine/llm_engine.py LLMEngine.__init__ config line"),
    StartupPattern("served_context_length", "Using max model len", r"Using max model len " + NUM, "int", "min",
                   "vLLM 0.8 - 0.33 (0.9.2 - 0.33 in the wheels read)", "config.py / config/model.py ModelConfig"),
    StartupPattern("served_context_length", "Maximum concurrency for",
                   r"Maximum concurrency for " + NUM + " tokens per request", "int", "min",
                   "vLLM V0 0.6.4 - 0.10, V1 0.7 - 0.33 (L is max_model_len)",
                   "executor/executor_base.py, v1/core/kv_cache_utils.py"),
)
"""vLLM's start-up ledger, V0 0.6 - 0.10 and V1 0.7 - 0.33."""


def parse_startup(text: str) -> StartupReport:
    """Read a vLLM start-up log (any version 0.6 - 0.33) into a ``StartupReport``; never raises.

    Derived values (named in ``report.derived``): KV tokens = GPU blocks x block size (printed, else
    ``DEFAULT_BLOCK_SIZE``) when no tokens line is printed; activation = peak_torch_memory - weights
    (0.6.4, whose ledger prints the peak including weights); non-torch = total consumed - weights memory (0.27 -
    0.33, whose ledger prints no non-torch term).
    """
    report = scan(text, STARTUP_PATTERNS)
    if report.kv_cache_tokens is None and report.num_gpu_blocks is not None:
        block = report.block_size or DEFAULT_BLOCK_SIZE
        report = report.with_values(["kv_cache_tokens"], kv_cache_tokens=report.num_gpu_blocks * block)
    if report.activation_bytes is None and report.peak_torch_bytes is not None and report.weights_bytes is not None:
        activation = max(0, report.peak_torch_bytes - report.weights_bytes)
        report = report.with_values(["activation_bytes"], activation_bytes=activation)
    if report.non_torch_bytes is None and report.consumed_bytes is not None and report.weights_bytes is not None:
        non_torch = max(0, report.consumed_bytes - report.weights_bytes)
        report = report.with_values(["non_torch_bytes"], non_torch_bytes=non_torch)
    return report


_LOGGED_VERSION = (
    # V0 0.4 - 0.10 / V1 engine/llm_engine.py, v1/engine/core.py: "Initializing a V1 LLM engine (v0.9.1) with config"
    # (older: "Initializing an LLM engine (v0.6.4) with config")
    re.compile(r"Initializing an? (?:V[01] )?LLM engine \(v(\d{1,3})\.(\d{1,4})"),
    # entrypoints/openai/api_server.py 0.4 - 0.11: "vLLM API server version 0.8.5.post1"
    re.compile(r"vLLM API server version v?(\d{1,3})\.(\d{1,4})"),
    # entrypoints/utils.py 0.12+ ASCII-art banner, last row: "... █ ▀▄▀ █  version 0.19.0"
    re.compile(r"\u2580\u2584\u2580 \u2588 {1,8}version v?(\d{1,3})\.(\d{1,4})"),
)


def logged_version(text: str) -> tuple[int, int] | None:
    """(major, minor) of the vLLM that wrote ``text``, from the first line that states it (see
    ``_LOGGED_VERSION`` for the wordings and their sources); None when no line states it. Never raises."""
    for line in text[:MAX_VERSION_SCAN_CHARS].splitlines():
        if "version" not in line and "LLM engine (v" not in line:
            continue
        for regex in _LOGGED_VERSION:
            found = regex.search(line[:MAX_LINE_CHARS])
            if found:
                return int(found.group(1)), int(found.group(2))
    return None
