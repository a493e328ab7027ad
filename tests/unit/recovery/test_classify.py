"""Classifier table tests: each failure kind in other engine versions' wording (docs/engine-memory.md A.3,
B.2, C), messages cut at 2048 bytes, thousands separators, GiB with fewer decimals, precedence."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import pytest
from ctxfit.api import EngineKind, GiB, MiB
from ctxfit.recovery import FailureKind, Observation, classify
from ctxfit.recovery.classify import engine_patterns
from ctxfit.recovery.generic import GENERIC_PATTERNS

K = FailureKind
VLLM, SGLANG = EngineKind.VLLM, EngineKind.SGLANG

KV_033 = (
    "(EngineCore_DP0 pid=97) ValueError: To serve at least one request with the model's max seq len (262144), "
    "(17.16 GiB KV cache is needed, which is larger than the available KV cache memory (11.7 GiB). Based on the "
    "available memory, the estimated maximum model length is 178752. Try increasing `gpu_memory_utilization` "
    "(which also controls CPU memory on the CPU backend) or decreasing `max_model_len` when initializing the "
    "engine. See https://docs.vllm.ai/en/latest/configuration/conserving_memory/ for more details."
)
KV_011 = (
    "ValueError: To serve at least one request with the models's max seq len (131072), (16.00 GiB KV cache is "
    "needed, which is larger than the available KV cache memory (9.70 GiB). Based on the available memory, the "
    "estimated maximum model length is 79456. Try increasing `gpu_memory_utilization` or decreasing "
    "`max_model_len` when initializing the engine."
)
TORCH_OOM = (
    "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 1.02 GiB. GPU 3 has a total capacity of "
    "79.19 GiB of which 612.00 MiB is free. Including non-PyTorch memory, this process has 78.58 GiB memory in "
    "use. Of the allocated memory 76.10 GiB is allocated by PyTorch, and 1.20 GiB is reserved by PyTorch but "
    "unallocated. If reserved but unallocated memory is large try setting "
    "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True to avoid fragmentation."
)
TORCH1_OOM = (
    "RuntimeError: CUDA out of memory. Tried to allocate 20.00 MiB (GPU 0; 15.78 GiB total capacity; "
    "14.56 GiB already allocated; 3.12 MiB free; 14.74 GiB reserved in total by PyTorch)"
)
WRAPPER = "RuntimeError: Engine core initialization failed. See root cause above. Failed core proc(s): {}"


def cut_2048(text: str) -> str:
    """What Kubernetes keeps: the last 2048 bytes, starting mid-line."""
    return text.encode()[-2048:].decode(errors="ignore")


def padded(line: str, before: int = 3000) -> str:
    """``line`` after ``before`` characters of unrelated INFO lines, so a 2048-byte cut starts mid-line."""
    filler = "INFO 05-02 10:11:12 [core.py:58] some unrelated progress line with numbers 1234 5678\n"
    return filler * (before // len(filler) + 1) + line + "\n"


@dataclass(frozen=True)
class Case:
    id: str
    kind: FailureKind
    message: str = ""
    engine: EngineKind | None = VLLM
    numbers: dict[str, Any] = field(default_factory=dict)
    reason: str | None = "Error"
    exit_code: int | None = 1
    events: tuple[str, ...] = ()
    log_tail: str = ""
    evidence: str = ""


CASES = [
    # --- KVCacheTooSmall
    Case("kv-033-model's-fewer-decimals", K.KV_CACHE_TOO_SMALL, KV_033,
         numbers={"requestedContextLength": 262144, "estimatedMaxContextLength": 178752,
                  "neededBytes": int(17.16 * GiB), "availableBytes": int(11.7 * GiB)}),
    Case("kv-011-models's", K.KV_CACHE_TOO_SMALL, KV_011,
         numbers={"requestedContextLength": 131072, "estimatedMaxContextLength": 79456}),
    Case("kv-cut-2048-mid-line", K.KV_CACHE_TOO_SMALL,
         cut_2048(padded("x" * 1900 + KV_033[:120] + "\n" + KV_033)),
         numbers={"estimatedMaxContextLength": 178752}),
    Case("kv-cut-before-max-seq-len", K.KV_CACHE_TOO_SMALL, KV_033[KV_033.index("en (262144)"):],
         numbers={"estimatedMaxContextLength": 178752, "availableBytes": int(11.7 * GiB)}),
    Case("kv-cut-only-estimate-left", K.KV_CACHE_TOO_SMALL, KV_033[KV_033.index("ble memory, the est"):],
         numbers={"estimatedMaxContextLength": 178752}),
    Case("kv-cut-at-end", K.KV_CACHE_TOO_SMALL, KV_033[:200], numbers={"requestedContextLength": 262144}),
    Case("kv-cut-before-the-numbers", K.KV_CACHE_TOO_SMALL, KV_033[:KV_033.index("GiB KV cache")],
         numbers={"requestedContextLength": 262144}),
    Case("kv-thousands-separators", K.KV_CACHE_TOO_SMALL,
         KV_033.replace("(262144)", "(262,144)").replace("is 178752", "is 178,752"),
         numbers={"requestedContextLength": 262144, "estimatedMaxContextLength": 178752}),
    Case("kv-v0-separators", K.KV_CACHE_TOO_SMALL,
         "ValueError: The model's max seq len (131,072) is larger than the maximum number of tokens that can be "
         "stored in KV cache (60,416). Try increasing `gpu_memory_utilization` or decreasing `max_model_len` "
         "when initializing the engine.",
         numbers={"requestedContextLength": 131072, "estimatedMaxContextLength": 60416}),
    Case("kv-wrapped-by-engine-core", K.KV_CACHE_TOO_SMALL, KV_011 + "\n" + WRAPPER),
    Case("kv-crlf", K.KV_CACHE_TOO_SMALL, KV_011.replace(". Based", ".\r\nBased"),
         numbers={"requestedContextLength": 131072}),
    # --- NoKVCacheMemory
    Case("no-kv-033", K.NO_KV_CACHE_MEMORY,
         "ValueError: No available memory for the cache blocks. Try increasing `gpu_memory_utilization` when "
         "initializing the engine (this flag also controls CPU memory reservation on the CPU backend, despite its "
         "name). See https://docs.vllm.ai/en/latest/configuration/conserving_memory/ for more details."),
    Case("no-kv-v0", K.NO_KV_CACHE_MEMORY,
         "ValueError: No available memory for the cache blocks. Try increasing `gpu_memory_utilization` when "
         "initializing the engine."),
    Case("no-kv-auto-fit", K.NO_KV_CACHE_MEMORY,
         "ValueError: Cannot auto-fit max_model_len: not enough GPU memory available to serve even a single "
         "token. Try increasing `gpu_memory_utilization`."),
    Case("no-kv-cut-2048", K.NO_KV_CACHE_MEMORY,
         cut_2048(padded("ValueError: No available memory for the cache blocks. Try increasing "
                         "`gpu_memory_utilization` when initializing the engine.\n" + WRAPPER))),
    # --- StaticMemoryTooSmall
    Case("sglang-054-self-server-args", K.STATIC_MEMORY_TOO_SMALL,
         "RuntimeError: Not enough memory. Please try to increase --mem-fraction-static. Current value: "
         "self.server_args.mem_fraction_static=0.8", SGLANG, numbers={"memFractionStatic": 0.8}),
    Case("sglang-0510-current-value", K.STATIC_MEMORY_TOO_SMALL,
         "[2026-01-01 TP0] Scheduler hit an exception: Traceback (most recent call last):\n"
         "RuntimeError: Not enough memory. Please try to increase --mem-fraction-static. Current value: "
         "mem_fraction_static=0.85", SGLANG, numbers={"memFractionStatic": 0.85}),
    Case("sglang-05-no-current-value", K.STATIC_MEMORY_TOO_SMALL,
         "RuntimeError: Not enough memory. Please try to increase --mem-fraction-static.", SGLANG),
    Case("sglang-0523-minimum-viable-3-decimals-only", K.STATIC_MEMORY_TOO_SMALL,
         "ValueError: Loaded weights leave no GPU memory for the KV cache under --mem-fraction-static=0.7. Raise "
         "--mem-fraction-static above 0.741", SGLANG,
         numbers={"memFractionStatic": 0.7, "minimumMemFractionStatic": 0.741}),
    Case("sglang-fraction-cut-2048", K.STATIC_MEMORY_TOO_SMALL,
         cut_2048(padded("ValueError: Loaded weights leave no GPU memory for the KV cache under "
                         "--mem-fraction-static=0.88. Raise --mem-fraction-static above 0.911 (minimum viable = "
                         "1 - available/pre = 0.9113). If using speculative decoding, draft weights are now "
                         "counted.")), SGLANG, numbers={"minimumMemFractionStatic": 0.9113}),
    Case("sglang-fraction-cut-before-marker", K.STATIC_MEMORY_TOO_SMALL,
         "-static above 0.911 (minimum viable = 1 - available/pre = 0.9113). If using speculative decoding, draft "
         "weights are now counted.", SGLANG, numbers={"minimumMemFractionStatic": 0.9113}),
    # --- GraphCaptureOOM
    Case("sglang-0523-capture-failed", K.GRAPH_CAPTURE_OOM,
         "Exception: Capture cuda graph failed: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total "
         "capacity of 139.72 GiB of which 1.1 GiB is free.\nPossible solutions:\n1. set --mem-fraction-static to "
         "a smaller value (e.g., 0.8 or 0.7)\n2. set --cuda-graph-max-bs-decode to a smaller value (e.g., 16)",
         SGLANG, numbers={"requestedBytes": 2 * GiB, "freeBytes": int(1.1 * GiB), "totalBytes": int(139.72 * GiB)}),
    Case("vllm-capture-end-cuda-error", K.GRAPH_CAPTURE_OOM,
         "Traceback (most recent call last):\n  File \"gpu_model_runner.py\", line 2400, in capture_model\n"
         "  File \"torch/cuda/graphs.py\", line 88, in capture_end\n    super().capture_end()\n"
         "RuntimeError: CUDA error: out of memory\nCUDA kernel errors might be asynchronously reported"),
    Case("vllm-v0-capturing-torch1", K.GRAPH_CAPTURE_OOM,
         "INFO model_runner.py:1399] Capturing cudagraphs for decoding. This may lead to unexpected consequences "
         "if the model is not static.\n" + TORCH1_OOM,
         numbers={"requestedBytes": 20 * MiB, "freeBytes": int(3.12 * MiB), "totalBytes": int(15.78 * GiB),
                  "gpuIndex": 0}),
    Case("vllm-capture-frames-outrank-dummy-run", K.GRAPH_CAPTURE_OOM,
         "INFO Model loading took 70.80 GiB\nTraceback (most recent call last):\n  in compile_or_warm_up_model\n"
         "  in capture_model\n  in _dummy_run\n" + TORCH_OOM,
         numbers={"requestedBytes": int(1.02 * GiB), "gpuIndex": 3}),
    Case("vllm-oom-after-kv-allocated", K.GRAPH_CAPTURE_OOM,
         "INFO [gpu_worker.py:298] Available KV cache memory: 2.97 GiB\n"
         "INFO GPU KV cache size: 1,234,560 tokens, Maximum concurrency for 131,072 tokens per request: 9.42x\n"
         + TORCH_OOM),
    Case("sglang-oom-after-capture-begin", K.GRAPH_CAPTURE_OOM,
         "Capture cuda graph begin. This can take up to several minutes. avail mem=3.20 GB\n" + TORCH_OOM, SGLANG),
    Case("capture-tqdm-carriage-returns", K.GRAPH_CAPTURE_OOM,
         "Capturing CUDA graphs (decode, FULL):  12%|#2   | 8/67\rCapturing CUDA graphs:  13%|#3 | 9/67\r"
         + TORCH_OOM),
    # --- SamplerWarmupOOM
    Case("sampler-warmup", K.SAMPLER_WARMUP_OOM,
         TORCH_OOM + "\n\nThe above exception was the direct cause of the following exception:\n\n"
         "RuntimeError: CUDA out of memory occurred when warming up sampler with 1,024 dummy requests. Please "
         "try lowering `max_num_seqs` or `gpu_memory_utilization` when initializing the engine.",
         numbers={"dummyRequests": 1024}),
    Case("sampler-frame-only", K.SAMPLER_WARMUP_OOM,
         "Traceback (most recent call last):\n  in _dummy_sampler_run\n" + TORCH_OOM),
    # --- WeightsDoNotFit
    Case("weights-033-message", K.WEIGHTS_DO_NOT_FIT,
         TORCH_OOM + "\nRuntimeError: Failed to load model - not enough GPU memory. Try lowering "
         "--gpu-memory-utilization to free memory for weights, increasing --tensor-parallel-size, or using "
         "--quantization."),
    Case("weights-oom-in-load-frames", K.WEIGHTS_DO_NOT_FIT,
         "Loading safetensors checkpoint shards:  40% Completed | 24/60\nTraceback (most recent call last):\n"
         "  in load_model\n  in load_weights\n  in weight_loader\n" + TORCH_OOM,
         numbers={"requestedBytes": int(1.02 * GiB), "freeBytes": 612 * MiB}),
    Case("weights-sglang-load-begin", K.WEIGHTS_DO_NOT_FIT,
         "[TP0] Load weight begin. avail mem=78.50 GB\n" + TORCH_OOM, SGLANG),
    # --- InsufficientFreeGPUMemory
    Case("free-033-device-name-fewer-decimals", K.INSUFFICIENT_FREE_GPU_MEMORY,
         "ValueError: Free memory on device cuda:0 (31.4/47.38 GiB) on startup is less than desired GPU memory "
         "utilization (0.95, 45.01 GiB). Decrease GPU memory utilization or reduce GPU memory used by other "
         "processes.",
         numbers={"freeBytes": int(31.4 * GiB), "totalBytes": int(47.38 * GiB), "gpuMemoryUtilization": 0.95,
                  "requestedBytes": int(45.01 * GiB)}),
    Case("free-external-weights-variant", K.INSUFFICIENT_FREE_GPU_MEMORY,
         "ValueError: Free memory on device cuda:1 (20.00/79.19 GiB) on startup is less than the engine's budget "
         "after excluding external process's weights (0.9, 71.27 GiB).",
         numbers={"freeBytes": 20 * GiB}),
    # --- HostOOMKilled
    Case("exit-137-alone", K.HOST_OOM_KILLED, "Loading safetensors checkpoint shards: 10%", reason=None,
         exit_code=137, numbers={"exitCode": 137}),
    Case("oomkilled-beats-cuda-text", K.HOST_OOM_KILLED, TORCH_OOM, reason="OOMKilled", exit_code=137),
    # --- StartupProbeTimeout
    Case("exit-143-alone", K.STARTUP_PROBE_TIMEOUT, "INFO Loading weights took 95.2 seconds", exit_code=143,
         numbers={"exitCode": 143}),
    Case("probe-event-beats-exit-137", K.STARTUP_PROBE_TIMEOUT, "", exit_code=137,
         events=("Container sglang failed startup probe, will be restarted",),
         evidence="Container sglang failed startup probe, will be restarted"),
    Case("probe-events-sglang", K.STARTUP_PROBE_TIMEOUT, "[TP0] Load weight begin. avail mem=78.50 GB", SGLANG,
         exit_code=None, events=("Startup probe failed: HTTP probe failed with statuscode: 503",)),
    # --- SharedMemoryTooSmall
    Case("shm-request-separators", K.SHARED_MEMORY_TOO_SMALL,
         "RuntimeError: The size of the shared memory buffer exceeds memory available in /dev/shm. The request is "
         "for 1,073,741,824 bytes", numbers={"requestedBytes": 1 << 30}),
    Case("shm-nccl-cut-2048", K.SHARED_MEMORY_TOO_SMALL,
         cut_2048(padded("NCCL WARN Error while creating shared memory segment /dev/shm/nccl-aBcD (size 33030144)")
                  + "torch.distributed.DistBackendError: NCCL error in: ProcessGroupNCCL.cpp:1970, unhandled "
                  "system error"), numbers={"requestedBytes": 33030144}),
    Case("shm-dataloader", K.SHARED_MEMORY_TOO_SMALL,
         "ERROR: Unexpected bus error encountered in worker. This might be caused by insufficient shared memory "
         "(shm)."),
    Case("shm-exit-135", K.SHARED_MEMORY_TOO_SMALL, "", exit_code=135),
    # --- KVCacheDtypeUnsupported
    Case("dtype-017-no-valid-backend", K.KV_CACHE_DTYPE_UNSUPPORTED,
         "ValueError: No valid attention backend found for cuda with AttentionSelectorConfig(head_size=576, "
         "dtype=torch.bfloat16, kv_cache_dtype=fp8, block_size=None, use_mla=True). Reasons: {FLASH_ATTN_MLA: "
         "[compute capability not supported], FLASHMLA: [compute capability not supported], TRITON_MLA: "
         "[kv_cache_dtype not supported]}."),
    Case("dtype-033-triton-mla", K.KV_CACHE_DTYPE_UNSUPPORTED,
         "ValueError: FP8 KV cache is not supported by the Triton MLA backend on NVIDIA A100 (compute capability "
         "8.0); native FP8 (fp8e4nv) requires SM89+. Re-run with --kv-cache-dtype bfloat16."),
    Case("dtype-triton-arch-lt-89", K.KV_CACHE_DTYPE_UNSUPPORTED,
         "AssertionError: fp8e4nv data type is not supported on CUDA arch < 89", engine=None),
    Case("dtype-sglang-trtllm-sm120", K.KV_CACHE_DTYPE_UNSUPPORTED,
         "ValueError: TRTLLM FMHAv2 prefill on SM120 does not support fp8_e4m3 KV cache or skip-softmax.", SGLANG),
    Case("dtype-v0-flash-attn-hint", K.KV_CACHE_DTYPE_UNSUPPORTED,
         "INFO selector.py:135] Cannot use FlashAttention-2 backend for FP8 KV cache.\nRuntimeError: some error"),
    Case("dtype-hint-loses-to-kv-error", K.KV_CACHE_TOO_SMALL,
         "INFO Cannot use FlashAttention-2 backend for FP8 KV cache.\n" + KV_011),
    # --- ContextExceedsModelLimit
    Case("ctx-vllm-033", K.CONTEXT_EXCEEDS_MODEL_LIMIT,
         "ValueError: User-specified max_model_len (262144) is greater than the derived max_model_len "
         "(max_position_embeddings=40960 or model_max_length=131072 in model's config.json). To allow overriding "
         "this maximum, set the env var VLLM_ALLOW_LONG_MAX_MODEL_LEN=1.",
         numbers={"requestedContextLength": 262144, "derivedMaxContextLength": 40960, "modelMaxLength": 131072}),
    Case("ctx-vllm-v0-model-max-none", K.CONTEXT_EXCEEDS_MODEL_LIMIT,
         "ValueError: User-specified max_model_len (65536) is greater than the derived max_model_len "
         "(max_position_embeddings=32768 or model_max_length=None in model's config.json). This may lead to "
         "incorrect model outputs or CUDA errors.",
         numbers={"requestedContextLength": 65536, "derivedMaxContextLength": 32768}),
    Case("ctx-sglang", K.CONTEXT_EXCEEDS_MODEL_LIMIT,
         "ValueError: User-specified context_length (524288) is greater than the derived context_length (163840). "
         "This may lead to incorrect model outputs or CUDA errors.", SGLANG,
         numbers={"requestedContextLength": 524288, "derivedMaxContextLength": 163840}),
    # --- Unknown
    Case("unknown-wrapper-only", K.UNKNOWN, "INFO starting\n" + WRAPPER, evidence=WRAPPER, numbers={"exitCode": 1}),
    Case("unknown-nccl-generic", K.UNKNOWN,
         "torch.distributed.DistBackendError: NCCL error in: ProcessGroupNCCL.cpp:1970, remote process exited"),
    Case("unknown-oom-while-profiling", K.UNKNOWN, "INFO Model loading took 70.80 GiB and 523.1 seconds\n" + TORCH_OOM,
         numbers={"requestedBytes": int(1.02 * GiB)}),
    Case("unknown-oom-while-serving", K.UNKNOWN,
         "INFO:     Application startup complete.\nINFO POST /v1/chat/completions\n" + TORCH_OOM),
    Case("bare-oom-no-phase", K.GPU_OUT_OF_MEMORY, TORCH_OOM, numbers={"requestedBytes": int(1.02 * GiB)}),
    Case("unknown-last-error-line", K.UNKNOWN, "INFO a\nValueError: something new\nINFO shutting down",
         evidence="ValueError: something new"),
    Case("unknown-nothing", K.UNKNOWN, "", reason=None, exit_code=None, evidence="terminated"),
    # --- engine selection
    Case("sglang-text-on-vllm-server", K.STATIC_MEMORY_TOO_SMALL,
         "RuntimeError: Not enough memory. Please try to increase --mem-fraction-static.", VLLM),
    Case("vllm-text-engine-unknown", K.KV_CACHE_TOO_SMALL, KV_011, None),
]


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_classify(case: Case) -> None:
    observation = Observation(reason=case.reason, exit_code=case.exit_code, message=case.message,
                              log_tail=case.log_tail, events=case.events)
    failure = classify(observation, case.engine)
    assert failure.kind is case.kind, failure
    for name, want in case.numbers.items():
        assert name in failure.numbers, failure.numbers
        if name.endswith("Bytes"):
            assert abs(failure.numbers[name] - want) <= 1, (name, failure.numbers[name], want)
        else:
            assert failure.numbers[name] == want, name
    if case.evidence:
        assert failure.evidence == case.evidence
    assert failure.evidence
    assert "\n" not in failure.evidence


def test_cut_message_is_really_cut() -> None:
    cut = cut_2048(padded("x" * 1900 + KV_033[:120] + "\n" + KV_033))
    assert len(cut.encode()) <= 2048
    assert not cut.startswith("INFO")


def test_log_tail_and_message_are_both_read() -> None:
    failure = classify(Observation(exit_code=1, message="RuntimeError: " + WRAPPER, log_tail=KV_011), VLLM)
    assert failure.kind is K.KV_CACHE_TOO_SMALL
    assert failure.numbers["estimatedMaxContextLength"] == 79456


def test_root_cause_wins_whatever_the_order() -> None:
    """Wrapper before or after, the KV error is the diagnosis."""
    for text in (WRAPPER + "\n" + KV_011, KV_011 + "\n" + WRAPPER):
        assert classify(Observation(message=text), VLLM).kind is K.KV_CACHE_TOO_SMALL


def test_engine_text_beats_probe_events() -> None:
    failure = classify(Observation(exit_code=143, message=KV_011,
                                   events=("Container vllm failed startup probe, will be restarted",)), VLLM)
    assert failure.kind is K.KV_CACHE_TOO_SMALL


def test_bytes_message_is_decoded() -> None:
    observation = Observation(message=KV_011.encode() + b"\xff\xfe")  # type: ignore[arg-type]
    assert classify(observation, VLLM).kind is K.KV_CACHE_TOO_SMALL


def test_evidence_is_trimmed_on_huge_lines() -> None:
    failure = classify(Observation(message="x" * 50_000 + KV_011 + "y" * 50_000), VLLM)
    assert failure.kind is K.KV_CACHE_TOO_SMALL
    assert len(failure.evidence) <= 512
    assert "KV cache is needed" in failure.evidence


def test_every_pattern_names_its_source_and_markers() -> None:
    for kind in EngineKind:
        patterns, phases = engine_patterns(kind)
        assert patterns and phases
        for pattern in patterns:
            assert pattern.source and pattern.markers and all(pattern.markers)
        for marker in phases:
            assert marker.source and marker.marker
    for pattern in GENERIC_PATTERNS:
        assert pattern.source and pattern.markers


def test_failure_wire_shape() -> None:
    wire = classify(Observation(message=KV_011), VLLM).to_wire()
    assert set(wire) == {"kind", "numbers", "evidence"}
    assert wire["kind"] == "KVCacheTooSmall"


@pytest.mark.parametrize(
    ("message", "kept", "dropped"),
    [
        ("ValueError: The model's max seq len (1048576) is larger than the maximum number of tokens that can be "
         "stored in KV cache (NaN).", {"requestedContextLength": 1048576}, ()),
        (KV_011.replace("(131072)", "(73786976294838206464)").replace("79456", "98386976294838206464")
         .replace("16.00 GiB", "99999999999999999999 GiB"),
         {"availableBytes": int(9.70 * GiB)},
         ("requestedContextLength", "estimatedMaxContextLength", "neededBytes")),
    ],
    ids=["nan-capacity", "absurd-numbers"],
)
def test_garbled_numbers_are_treated_as_missing(message: str, kept: dict[str, Any], dropped: tuple[str, ...]) -> None:
    failure = classify(Observation(message=message), VLLM)
    assert failure.kind is K.KV_CACHE_TOO_SMALL
    assert failure.numbers == kept
    for name in dropped:
        assert name not in failure.numbers
