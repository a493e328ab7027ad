"""Policy chain table tests: each check with its numbers, history and edge cases."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import pytest
from ctxfit.api import EffectiveConfig, GiB, InferenceServerSpec, MiB
from ctxfit.recovery import FailedAttempt, Failure, FailureKind, changed_knobs, decide
from ctxfit.recovery.checks import POLICY_CHAIN
from ctxfit.recovery.policy import Decision, PolicyContext, _guard

from tests.unit.recovery.policykit import LLAMA, VLLM_BASE, make_spec

K = FailureKind
SGLANG_BASE = VLLM_BASE.model_copy(update={"gpu_memory_utilization": None, "mem_fraction_static": 0.85,
                                           "cuda_graph_max_batch_size": 256})


def fake_replan(result: tuple[int, str] | Exception) -> Callable[[InferenceServerSpec, dict[str, Any]],
                                                                   tuple[int, str]]:
    def replan(spec: InferenceServerSpec, pin: dict[str, Any]) -> tuple[int, str]:
        assert "context_length" in pin and "max_num_seqs" in pin  # every other knob is held
        if isinstance(result, Exception):
            raise result
        return result

    return replan


@dataclass(frozen=True)
class Row:
    id: str
    kind: FailureKind
    numbers: dict[str, Any] = field(default_factory=dict)
    current: dict[str, Any] = field(default_factory=dict)
    next: dict[str, Any] | None = None
    engine: str = "vllm"
    model: str = LLAMA
    spec: dict[str, Any] = field(default_factory=dict)
    history: tuple[tuple[dict[str, Any], FailureKind], ...] = ()
    replan: Any = None
    cap: int | None = None
    says: tuple[str, ...] = ()
    check: str | None = None


ROWS = [
    # KVCacheTooSmall
    Row("kv-estimate", K.KV_CACHE_TOO_SMALL, {"requestedContextLength": 262144, "estimatedMaxContextLength": 178752,
        "neededBytes": int(17.16 * GiB), "availableBytes": int(11.70 * GiB)}, {"context_length": 262144},
        {"contextLength": 131072}, says=("11.70 GiB", "17.16 GiB", "178752", "131072", "25% headroom")),
    Row("kv-no-headroom", K.KV_CACHE_TOO_SMALL, {"estimatedMaxContextLength": 200000}, {"context_length": 262144},
        {"contextLength": 196608}, model="moonshotai/Kimi-K2.5", spec={"context": {"target": 262144, "headroom": 0.0}}),
    Row("kv-derived-from-catalog-architecture", K.KV_CACHE_TOO_SMALL,
        {"requestedContextLength": 131072, "availableBytes": int(9.70 * GiB), "neededBytes": 16 * GiB},
        next={"contextLength": 49152}, says=("131,072 B per token",)),
    Row("kv-derived-from-message-numbers", K.KV_CACHE_TOO_SMALL,
        {"requestedContextLength": 131072, "availableBytes": int(9.70 * GiB), "neededBytes": 16 * GiB},
        next={"contextLength": 49152}, model="acme/unknown-8b", says=("from the message",)),
    Row("kv-no-numbers-one-step", K.KV_CACHE_TOO_SMALL, next={"contextLength": 98304}),
    Row("kv-below-minimum-at-ceiling", K.KV_CACHE_TOO_SMALL, {"estimatedMaxContextLength": 20000},
        {"gpu_memory_utilization": 0.95}, spec={"context": {"target": 131072, "minimum": 32768}},
        says=("context.minimum 32768", "at gpu-memory-utilization 0.95, ctxfit's ceiling")),
    Row("kv-below-minimum-even-at-ceiling", K.KV_CACHE_TOO_SMALL, {"estimatedMaxContextLength": 10000},
        spec={"context": {"target": 131072, "minimum": 32768}},
        says=("context.minimum 32768", "nor at ctxfit's ceiling 0.95")),
    # 32768 / 0.75 = 43691 tokens wanted; 15691 more x 131,072 B = 1.92 GiB = 0.0426 of the L40S -> 0.85 -> 0.90
    Row("kv-below-minimum-raises-utilization", K.KV_CACHE_TOO_SMALL, {"estimatedMaxContextLength": 28000},
        {"gpu_memory_utilization": 0.85}, {"gpuMemoryUtilization": 0.9, "contextLength": 32768},
        spec={"context": {"target": 131072, "minimum": 32768}},
        says=("no context >= context.minimum 32768 fits at gpu-memory-utilization 0.85",
              "raising it to 0.9 and stepping the context down to 32768",
              "15691 more x 131,072 B per token = 1.92 GiB = 0.0426 of 44.99 GiB")),
    Row("kv-at-minimum-raises-utilization-keeps-context", K.KV_CACHE_TOO_SMALL, {"estimatedMaxContextLength": 28000},
        {"gpu_memory_utilization": 0.85, "context_length": 32768},
        {"gpuMemoryUtilization": 0.9, "contextLength": 32768},
        spec={"context": {"target": 32768, "minimum": 32768}}, says=("keeping the context at 32768",)),
    Row("kv-below-minimum-raises-static-fraction", K.KV_CACHE_TOO_SMALL, {"estimatedMaxContextLength": 28000},
        engine="sglang", next={"memFractionStatic": 0.9, "contextLength": 32768},
        spec={"context": {"target": 131072, "minimum": 32768}}, says=("mem-fraction-static 0.85",)),
    Row("kv-below-minimum-raise-skips-failed", K.KV_CACHE_TOO_SMALL, {"estimatedMaxContextLength": 28000},
        {"gpu_memory_utilization": 0.85}, {"gpuMemoryUtilization": 0.91, "contextLength": 32768},
        spec={"context": {"target": 131072, "minimum": 32768}},
        history=(({"gpu_memory_utilization": 0.9, "context_length": 32768}, K.UNKNOWN),)),
    Row("kv-below-minimum-raise-ruled-out", K.KV_CACHE_TOO_SMALL, {"estimatedMaxContextLength": 28000},
        {"gpu_memory_utilization": 0.85}, spec={"context": {"target": 131072, "minimum": 32768}},
        history=(({"gpu_memory_utilization": 0.88, "context_length": 32768}, K.GRAPH_CAPTURE_OOM),)),
    Row("kv-minimum-with-less-headroom", K.KV_CACHE_TOO_SMALL, {"estimatedMaxContextLength": 40000},
        next={"contextLength": 32768}, spec={"context": {"target": 131072, "minimum": 32768}}),
    Row("kv-skips-failed-size", K.KV_CACHE_TOO_SMALL, {"estimatedMaxContextLength": 178752},
        {"context_length": 262144}, {"contextLength": 98304},
        history=(({"context_length": 131072}, K.GRAPH_CAPTURE_OOM),)),
    Row("kv-estimate-not-below-current", K.KV_CACHE_TOO_SMALL, {"estimatedMaxContextLength": 1_000_000},
        next={"contextLength": 98304}),
    # ContextExceedsModelLimit
    Row("ctx-to-derived", K.CONTEXT_EXCEEDS_MODEL_LIMIT, {"requestedContextLength": 131072,
        "derivedMaxContextLength": 40960}, next={"contextLength": 40960}, says=("40960",)),
    Row("ctx-tokenizer-limit-lower", K.CONTEXT_EXCEEDS_MODEL_LIMIT, {"derivedMaxContextLength": 40960,
        "modelMaxLength": 32768}, next={"contextLength": 32768}),
    Row("ctx-derived-already-failed", K.CONTEXT_EXCEEDS_MODEL_LIMIT, {"derivedMaxContextLength": 40960},
        next={"contextLength": 32768}, history=(({"context_length": 40960}, K.KV_CACHE_TOO_SMALL),)),
    Row("ctx-below-minimum", K.CONTEXT_EXCEEDS_MODEL_LIMIT, {"derivedMaxContextLength": 2048},
        spec={"context": {"target": 131072, "minimum": 4096}}),
    Row("ctx-no-numbers", K.CONTEXT_EXCEEDS_MODEL_LIMIT, next={"contextLength": 98304}),
    # NoKVCacheMemory
    Row("nokv-raise-by-kv-bytes-capped", K.NO_KV_CACHE_MEMORY, next={"gpuMemoryUtilization": 0.95},
        says=("0.9", "131072 tokens x 131,072 B per token = 16.00 GiB", "capped at ctxfit's ceiling 0.95")),
    Row("nokv-raise-by-kv-bytes", K.NO_KV_CACHE_MEMORY, current={"context_length": 8192},
        next={"gpuMemoryUtilization": 0.93}, says=("8192 tokens x 131,072 B per token = 1.00 GiB", "0.9 + 0.0222")),
    Row("nokv-to-ceiling", K.NO_KV_CACHE_MEMORY, current={"gpu_memory_utilization": 0.94},
        next={"gpuMemoryUtilization": 0.95}),
    Row("nokv-at-ceiling", K.NO_KV_CACHE_MEMORY, current={"gpu_memory_utilization": 0.95}),
    Row("nokv-step-failed", K.NO_KV_CACHE_MEMORY, next={"gpuMemoryUtilization": 0.91},
        history=(({"gpu_memory_utilization": 0.92}, K.GRAPH_CAPTURE_OOM),)),
    Row("nokv-sglang-fraction", K.NO_KV_CACHE_MEMORY, engine="sglang", next={"memFractionStatic": 0.95}),
    Row("nokv-unknown-model-fixed-step", K.NO_KV_CACHE_MEMORY, model="acme/unknown-8b",
        next={"gpuMemoryUtilization": 0.92}, says=("unknown",)),
    # StaticMemoryTooSmall
    Row("static-minimum", K.STATIC_MEMORY_TOO_SMALL, {"minimumMemFractionStatic": 0.9113, "memFractionStatic": 0.88},
        {"mem_fraction_static": 0.88, "context_length": 4096}, {"memFractionStatic": 0.93, "contextLength": 4096},
        engine="sglang", says=("0.9113", "4096 tokens x 131,072 B per token", "0.93")),
    Row("static-step", K.STATIC_MEMORY_TOO_SMALL, engine="sglang", next={"memFractionStatic": 0.95}),
    Row("static-above-ceiling", K.STATIC_MEMORY_TOO_SMALL, {"minimumMemFractionStatic": 0.96}, engine="sglang",
        says=("0.95",)),
    Row("static-bracketed-halves-graph", K.STATIC_MEMORY_TOO_SMALL, {"minimumMemFractionStatic": 0.9113},
        {"mem_fraction_static": 0.88}, {"cudaGraphMaxBatchSize": 128, "contextLength": 131072}, engine="sglang",
        history=(({"mem_fraction_static": 0.92}, K.GRAPH_CAPTURE_OOM),),
        says=("mem-fraction-static 0.88 failed with StaticMemoryTooSmall (too low)",
              "mem-fraction-static 0.92 failed with GraphCaptureOOM (too high)", "halving")),
    Row("static-step-below-failed-bound", K.STATIC_MEMORY_TOO_SMALL, engine="sglang", next={"memFractionStatic": 0.94},
        history=(({"mem_fraction_static": 0.95}, K.GRAPH_CAPTURE_OOM),)),
    # GraphCaptureOOM
    Row("graph-sglang-halve", K.GRAPH_CAPTURE_OOM, {"requestedBytes": 448 * MiB, "freeBytes": 302 * MiB},
        engine="sglang", next={"cudaGraphMaxBatchSize": 128, "memFractionStatic": 0.85, "contextLength": 131072},
        says=("448.00 MiB", "256", "128")),
    Row("graph-sglang-at-floor-lowers-fraction", K.GRAPH_CAPTURE_OOM, engine="sglang",
        current={"cuda_graph_max_batch_size": 16}, next={"memFractionStatic": 0.83}),
    Row("graph-sglang-to-floor", K.GRAPH_CAPTURE_OOM, engine="sglang", current={"cuda_graph_max_batch_size": 24},
        next={"cudaGraphMaxBatchSize": 16}),
    Row("graph-sglang-halving-failed", K.GRAPH_CAPTURE_OOM, engine="sglang", next={"memFractionStatic": 0.83},
        history=(({"cuda_graph_max_batch_size": 128}, K.GRAPH_CAPTURE_OOM),)),
    Row("graph-vllm-lower", K.GRAPH_CAPTURE_OOM, current={"gpu_memory_utilization": 0.98},
        next={"gpuMemoryUtilization": 0.96, "contextLength": 131072}),
    Row("graph-vllm-lower-failed", K.GRAPH_CAPTURE_OOM, current={"gpu_memory_utilization": 0.98},
        next={"gpuMemoryUtilization": 0.97}, history=(({"gpu_memory_utilization": 0.96}, K.KV_CACHE_TOO_SMALL),)),
    Row("graph-vllm-near-floor", K.GRAPH_CAPTURE_OOM, current={"gpu_memory_utilization": 0.51},
        next={"gpuMemoryUtilization": 0.5}),
    Row("graph-vllm-floor-halves-graphs", K.GRAPH_CAPTURE_OOM, current={"gpu_memory_utilization": 0.5},
        next={"cudaGraphMaxBatchSize": 256}),
    Row("graph-vllm-nothing-left-lowers-context", K.GRAPH_CAPTURE_OOM,
        current={"gpu_memory_utilization": 0.5, "cuda_graph_max_batch_size": 16}, next={"contextLength": 98304}),
    Row("graph-vllm-nothing-left", K.GRAPH_CAPTURE_OOM, spec={"context": {"target": 131072, "minimum": 131072}},
        current={"gpu_memory_utilization": 0.5, "cuda_graph_max_batch_size": 16}),
    # GPUOutOfMemory (a bare CUDA OOM): decided from its numbers
    Row("gpu-oom-kv-allocated", K.GPU_OUT_OF_MEMORY, {"requestedBytes": 1 * GiB, "totalBytes": 44 * GiB,
        "inUseBytes": int(0.89 * 44 * GiB)}, next={"gpuMemoryUtilization": 0.87, "contextLength": 131072},
        says=("already allocated", "0.9 x 44.00 GiB = 39.60 GiB")),
    Row("gpu-oom-total-minus-free", K.GPU_OUT_OF_MEMORY, {"requestedBytes": 100 * MiB, "totalBytes": 44 * GiB,
        "freeBytes": 50 * MiB}, next={"gpuMemoryUtilization": 0.88}, says=("(total - free)",)),
    Row("gpu-oom-loading", K.GPU_OUT_OF_MEMORY, {"requestedBytes": 1 * GiB, "totalBytes": 44 * GiB,
        "inUseBytes": 5 * GiB}, says=("loading the weights",)),
    Row("gpu-oom-profiling", K.GPU_OUT_OF_MEMORY, {"requestedBytes": 1 * GiB, "totalBytes": 44 * GiB,
        "inUseBytes": 20 * GiB}, next={"maxNumSeqs": 128, "gpuMemoryUtilization": 0.9},
        says=("profiling activations",)),
    Row("gpu-oom-no-numbers-retries-once", K.GPU_OUT_OF_MEMORY, next={"contextLength": 131072,
        "gpuMemoryUtilization": 0.9}, says=("without the numbers",)),
    Row("gpu-oom-no-numbers-twice", K.GPU_OUT_OF_MEMORY, history=(({}, K.GPU_OUT_OF_MEMORY),),
        says=("already failed before",)),
    # SharedMemoryTooSmall with vLLM's "N MiB required, M MiB free": the request on top of what others hold
    Row("shm-request-plus-held", K.SHARED_MEMORY_TOO_SMALL, {"requestedBytes": 4096 * MiB, "freeBytes": 1405 * MiB},
        {"shm_bytes": 2 * GiB}, {"shmSize": "5Gi"}, says=("others hold",)),
    # MambaCacheTooSmall
    Row("mamba-at-most-blocks", K.MAMBA_CACHE_TOO_SMALL, {"maxNumSeqs": 256, "availableMambaBlocks": 108},
        next={"maxNumSeqs": 108, "contextLength": 131072}, says=("108 Mamba cache blocks",)),
    Row("mamba-no-count-halves", K.MAMBA_CACHE_TOO_SMALL, next={"maxNumSeqs": 128}),
    Row("mamba-blocks-failed-before", K.MAMBA_CACHE_TOO_SMALL, {"availableMambaBlocks": 108},
        next={"maxNumSeqs": 54}, history=(({"max_num_seqs": 108}, K.MAMBA_CACHE_TOO_SMALL),)),
    # permanent kinds
    Row("invalid-tp-heads", K.INVALID_PARALLELISM, {"attentionHeads": 32, "tensorParallelSize": 3},
        says=("tensor parallel sizes that divide attentionHeads 32: 1, 2, 4, 8",)),
    Row("invalid-pp-layers", K.INVALID_PARALLELISM, {"layers": 61, "pipelineParallelSize": 2},
        says=("pipeline parallel sizes that divide layers 61: 1",)),
    Row("driver-too-old", K.CUDA_DRIVER_TOO_OLD, {"driverCudaVersion": 12020}, says=("CUDA 12.2",)),
    Row("model-access-denied", K.MODEL_ACCESS_DENIED, says=(LLAMA,)),
    # SamplerWarmupOOM
    Row("sampler-halve", K.SAMPLER_WARMUP_OOM, {"dummyRequests": 1024}, {"max_num_seqs": 1024},
        {"maxNumSeqs": 512}),
    Row("sampler-from-dummy", K.SAMPLER_WARMUP_OOM, {"dummyRequests": 256}, {"max_num_seqs": 1024},
        {"maxNumSeqs": 128}),
    Row("sampler-at-one", K.SAMPLER_WARMUP_OOM, current={"max_num_seqs": 1}),
    Row("sampler-halving-failed", K.SAMPLER_WARMUP_OOM, current={"max_num_seqs": 1024}, next={"maxNumSeqs": 256},
        history=(({"max_num_seqs": 512}, K.SAMPLER_WARMUP_OOM),)),
    # InsufficientFreeGPUMemory
    Row("free-ratio", K.INSUFFICIENT_FREE_GPU_MEMORY, {"freeBytes": int(31.44 * GiB), "totalBytes": int(47.38 * GiB)},
        {"gpu_memory_utilization": 0.95}, {"gpuMemoryUtilization": 0.66, "contextLength": 131072},
        says=("31.44/47.38 GiB", "0.66")),
    Row("free-replan-lowers-context", K.INSUFFICIENT_FREE_GPU_MEMORY,
        {"freeBytes": int(31.44 * GiB), "totalBytes": int(47.38 * GiB)}, {"gpu_memory_utilization": 0.95},
        {"gpuMemoryUtilization": 0.66, "contextLength": 65536}, replan=fake_replan((65536, "fits 65536"))),
    Row("free-replan-nothing-fits", K.INSUFFICIENT_FREE_GPU_MEMORY,
        {"freeBytes": int(31.44 * GiB), "totalBytes": int(47.38 * GiB)}, {"gpu_memory_utilization": 0.95},
        replan=fake_replan((0, "weights alone exceed the budget")), says=("weights alone",)),
    Row("free-replan-unknown-model", K.INSUFFICIENT_FREE_GPU_MEMORY,
        {"freeBytes": int(31.44 * GiB), "totalBytes": int(47.38 * GiB)}, {"gpu_memory_utilization": 0.95},
        {"gpuMemoryUtilization": 0.66, "contextLength": 131072}, replan=fake_replan(ValueError("unknown model"))),
    Row("free-below-floor", K.INSUFFICIENT_FREE_GPU_MEMORY, {"freeBytes": 10 * GiB, "totalBytes": 80 * GiB},
        says=("0.12",)),
    Row("free-no-numbers", K.INSUFFICIENT_FREE_GPU_MEMORY, next={"gpuMemoryUtilization": 0.85}),
    Row("free-sglang", K.INSUFFICIENT_FREE_GPU_MEMORY, engine="sglang"),
    # HostOOMKilled
    Row("host-x1.5", K.HOST_OOM_KILLED, current={"memory_limit_bytes": 500 * GiB},
        next={"memoryLimit": "750Gi", "contextLength": 131072, "gpuMemoryUtilization": 0.9}, says=("500Gi", "750Gi")),
    Row("host-capped", K.HOST_OOM_KILLED, current={"memory_limit_bytes": 500 * GiB}, cap=600 * GiB,
        next={"memoryLimit": "600Gi"}),
    Row("host-at-cap", K.HOST_OOM_KILLED, current={"memory_limit_bytes": 500 * GiB}, cap=500 * GiB,
        says=("500Gi",)),
    Row("host-x1.5-failed", K.HOST_OOM_KILLED, current={"memory_limit_bytes": 500 * GiB},
        next={"memoryLimit": "1000Gi"}, history=(({"memory_limit_bytes": 750 * GiB}, K.HOST_OOM_KILLED),)),
    Row("host-small", K.HOST_OOM_KILLED, current={"memory_limit_bytes": 100 * MiB}, next={"memoryLimit": "150Mi"}),
    # StartupProbeTimeout
    Row("probe-double", K.STARTUP_PROBE_TIMEOUT, current={"startup_timeout_seconds": 150},
        next={"startupTimeoutSeconds": 300, "contextLength": 131072}),
    Row("probe-double-failed", K.STARTUP_PROBE_TIMEOUT, current={"startup_timeout_seconds": 150},
        next={"startupTimeoutSeconds": 600}, history=(({"startup_timeout_seconds": 300}, K.UNKNOWN),)),
    Row("probe-at-max", K.STARTUP_PROBE_TIMEOUT, current={"startup_timeout_seconds": 7 * 24 * 3600}),
    # SharedMemoryTooSmall
    Row("shm-minimum", K.SHARED_MEMORY_TOO_SMALL, {"requestedBytes": 9637888}, {"shm_bytes": 64 * MiB},
        {"shmSize": "1Gi", "contextLength": 131072}, says=("64Mi", "1Gi", "9,637,888")),
    Row("shm-double", K.SHARED_MEMORY_TOO_SMALL, current={"shm_bytes": 4 * GiB}, next={"shmSize": "8Gi"}),
    Row("shm-request", K.SHARED_MEMORY_TOO_SMALL, {"requestedBytes": 3 * GiB + 5}, {"shm_bytes": 64 * MiB},
        {"shmSize": "4Gi"}),
    Row("shm-failed", K.SHARED_MEMORY_TOO_SMALL, current={"shm_bytes": 64 * MiB}, next={"shmSize": "2Gi"},
        history=(({"shm_bytes": GiB}, K.SHARED_MEMORY_TOO_SMALL),)),
    # Regression: a zero or huge limit never gives a wrong permanent verdict or an absurd size
    Row("host-zero-limit", K.HOST_OOM_KILLED, current={"memory_limit_bytes": 0}, next={"memoryLimit": "48Gi"}),
    Row("host-zero-limit-node-cap", K.HOST_OOM_KILLED, current={"memory_limit_bytes": 0}, cap=32 * GiB,
        next={"memoryLimit": "32Gi"}),
    Row("host-zero-node-cap-ignored", K.HOST_OOM_KILLED, current={"memory_limit_bytes": 500 * GiB}, cap=0,
        next={"memoryLimit": "750Gi"}),
    Row("host-at-node-cap-says-node", K.HOST_OOM_KILLED, current={"memory_limit_bytes": 64 * GiB}, cap=64 * GiB,
        says=("the node allocates at most 64Gi",)),
    Row("host-near-ctxfit-max", K.HOST_OOM_KILLED, current={"memory_limit_bytes": 50 * 1024 * GiB},
        next={"memoryLimit": "64Ti"}),
    Row("host-at-ctxfit-max", K.HOST_OOM_KILLED, current={"memory_limit_bytes": 64 * 1024 * GiB},
        says=("ctxfit's maximum is 64Ti",)),
    Row("shm-absurd-request-ignored", K.SHARED_MEMORY_TOO_SMALL, {"requestedBytes": 10**30},
        {"shm_bytes": 64 * MiB}, next={"shmSize": "1Gi"}),
    Row("shm-at-ctxfit-max", K.SHARED_MEMORY_TOO_SMALL, current={"shm_bytes": 64 * 1024 * GiB}, says=("64Ti",)),
    # Regression: the next context never exceeds min(model maximum, context.target)
    Row("ceiling-kv-no-capacity", K.KV_CACHE_TOO_SMALL, {"requestedContextLength": 1048576},
        {"context_length": 1048576}, next={"contextLength": 131072}, says=("the model's maximum 131072",),
        spec={"context": {"target": 262144}}),
    Row("ceiling-kv-absurd-numbers", K.KV_CACHE_TOO_SMALL,
        {"requestedContextLength": 73786976294838206464, "estimatedMaxContextLength": 98386976294838206464},
        next={"contextLength": 98304}),
    Row("ceiling-kv-target-below-model", K.KV_CACHE_TOO_SMALL, {"requestedContextLength": 1048576},
        {"context_length": 1048576}, next={"contextLength": 65536}, spec={"context": {"target": 65536}},
        says=("context.target 65536",)),
    Row("ceiling-derived-above-model", K.CONTEXT_EXCEEDS_MODEL_LIMIT, {"derivedMaxContextLength": 200000},
        {"context_length": 262144}, next={"contextLength": 131072}),
    Row("ceiling-graph-oom-caps-context", K.GRAPH_CAPTURE_OOM, current={"context_length": 262144},
        next={"contextLength": 131072, "gpuMemoryUtilization": 0.88}, says=("capped",)),
    Row("ceiling-unknown-caps-context", K.UNKNOWN, current={"context_length": 262144},
        next={"contextLength": 131072}),
    Row("ceiling-below-minimum", K.KV_CACHE_TOO_SMALL, {"estimatedMaxContextLength": 178752},
        spec={"context": {"target": 262144, "minimum": 200000}}, check="ContextCeiling",
        says=("the model's maximum 131072 is below context.minimum 200000",)),
    # KVCacheDtypeUnsupported
    Row("dtype-replan", K.KV_CACHE_DTYPE_UNSUPPORTED, current={"kv_cache_dtype": "fp8"},
        next={"kvCacheDtype": "auto", "contextLength": 98304}, replan=fake_replan((98304, "chose 98304"))),
    Row("dtype-replan-capped", K.KV_CACHE_DTYPE_UNSUPPORTED, current={"kv_cache_dtype": "fp8"},
        next={"kvCacheDtype": "auto", "contextLength": 131072}, replan=fake_replan((262144, "fits"))),
    Row("dtype-replan-nothing", K.KV_CACHE_DTYPE_UNSUPPORTED, current={"kv_cache_dtype": "fp8"},
        replan=fake_replan((0, "does not fit at 16 bits"))),
    Row("dtype-catalog-ratio", K.KV_CACHE_DTYPE_UNSUPPORTED, current={"kv_cache_dtype": "fp8"},
        next={"kvCacheDtype": "auto", "contextLength": 65536}, replan=fake_replan(ValueError("no")),
        says=("65,536 -> 131,072 B per token",)),
    Row("dtype-unknown-model-ratio", K.KV_CACHE_DTYPE_UNSUPPORTED, current={"kv_cache_dtype": "fp8_e4m3"},
        model="acme/x", next={"kvCacheDtype": "auto", "contextLength": 65536}),
    Row("dtype-nvfp4-ratio", K.KV_CACHE_DTYPE_UNSUPPORTED, current={"kv_cache_dtype": "nvfp4"}, model="acme/x",
        next={"kvCacheDtype": "auto", "contextLength": 32768}),
    Row("dtype-ds-mla", K.KV_CACHE_DTYPE_UNSUPPORTED, current={"kv_cache_dtype": "fp8_ds_mla"},
        model="deepseek-ai/DeepSeek-V3.2-Exp", next={"kvCacheDtype": "auto", "contextLength": 65536},
        says=("48,068 -> 78,324",)),
    Row("dtype-already-16-bit", K.KV_CACHE_DTYPE_UNSUPPORTED),
    Row("dtype-below-minimum", K.KV_CACHE_DTYPE_UNSUPPORTED, current={"kv_cache_dtype": "fp8"},
        spec={"context": {"target": 131072, "minimum": 131072}}),
    # WeightsDoNotFit, Unknown, attempts
    Row("weights", K.WEIGHTS_DO_NOT_FIT, {"requestedBytes": GiB, "freeBytes": 612 * MiB},
        says=("1.00 GiB", "612.00 MiB", "tensor parallel above 1")),
    Row("unknown-retry", K.UNKNOWN, next={"contextLength": 131072, "gpuMemoryUtilization": 0.9},
        says=("in 30 s",)),
    Row("unknown-twice", K.UNKNOWN, history=(({}, K.UNKNOWN),), says=("already failed",)),
    Row("attempts-exhausted", K.KV_CACHE_TOO_SMALL, {"estimatedMaxContextLength": 178752},
        history=tuple(({"context_length": c}, K.KV_CACHE_TOO_SMALL) for c in (262144, 196608, 163840, 147456)),
        says=("5 failed starts", "spec.attempts (5)"), check="AttemptsExhausted"),
    Row("attempts-custom", K.HOST_OOM_KILLED, history=(({"memory_limit_bytes": 32 * GiB}, K.HOST_OOM_KILLED),),
        spec={"attempts": 2}, check="AttemptsExhausted"),
]


def run_row(row: Row) -> tuple[EffectiveConfig, Any]:
    base = VLLM_BASE if row.engine == "vllm" else SGLANG_BASE
    spec = make_spec(row.engine, row.model, **row.spec)
    current = base.model_copy(update=row.current)
    history = [FailedAttempt(current.model_copy(update=h), kind) for h, kind in row.history]
    failure = Failure(row.kind, dict(row.numbers), "the matched line")
    decision = decide(spec, current, failure, history, replan=row.replan, memory_cap_bytes=row.cap)
    return current, decision


@pytest.mark.parametrize("row", ROWS, ids=[r.id for r in ROWS])
def test_policy_row(row: Row) -> None:
    current, decision = run_row(row)
    assert "\n" not in decision.explanation and decision.explanation
    for text in row.says:
        assert text in decision.explanation, decision.explanation
    assert decision.check == (row.check or row.kind.value)
    if row.next is None:
        assert decision.permanent, decision
        assert decision.next is None
        return
    assert not decision.permanent, decision.explanation
    assert decision.next is not None
    wire = decision.next.to_wire()
    for key, want in row.next.items():
        assert wire[key] == want, (key, wire[key], want, decision.explanation)
    knobs = changed_knobs(current, decision.next)
    if row.kind is not K.UNKNOWN and not row.id.startswith("gpu-oom-no-numbers"):
        assert knobs, "a retry must change something"
    assert len(knobs) <= 2


def test_unknown_backoff_grows_and_is_bounded() -> None:
    spec = make_spec(attempts=20)
    failure = Failure(K.UNKNOWN, {}, "x")
    delays = []
    for n in range(8):
        history = [FailedAttempt(VLLM_BASE.model_copy(update={"context_length": 1024 + i}), K.UNKNOWN)
                   for i in range(n)]
        delays.append(decide(spec, VLLM_BASE, failure, history).retry_after_seconds)
    assert delays[:3] == [30, 60, 120]
    assert max(delays) == 600


CHECKS = {name: check for name, check in POLICY_CHAIN}


@pytest.mark.parametrize("name", [n for n in CHECKS if n not in ("AttemptsExhausted", "Unknown")])
def test_each_check_applies_only_to_its_kind(name: str) -> None:
    spec = make_spec()
    for kind in FailureKind:
        ctx = PolicyContext(spec, VLLM_BASE, Failure(kind, {}, ""), (), None, None)
        decision = CHECKS[name](ctx)
        assert (decision is not None) == (kind.value == name), (name, kind)


def test_chain_order_and_catch_all() -> None:
    names = [name for name, _ in POLICY_CHAIN]
    assert names[:6] == ["WeightsDoNotFit", "InvalidParallelism", "CUDADriverTooOld", "UnsupportedGPU",
                         "ModelAccessDenied", "AttemptsExhausted"]
    assert names[-1] == "Unknown"
    assert set(names) >= {k.value for k in FailureKind}


def test_guard_refuses_history_and_rising_context() -> None:
    spec = make_spec()
    tried = VLLM_BASE.model_copy(update={"context_length": 65536})
    ctx = PolicyContext(spec, VLLM_BASE, Failure(K.UNKNOWN), (FailedAttempt(tried, K.UNKNOWN),), None, None)
    assert _guard(ctx, Decision(tried, False, "x", FailureKind.UNKNOWN)).permanent
    higher = VLLM_BASE.model_copy(update={"context_length": 262144})
    assert _guard(ctx, Decision(higher, False, "x", FailureKind.UNKNOWN)).permanent
    lower = VLLM_BASE.model_copy(update={"context_length": 1024})
    assert not _guard(ctx, Decision(lower, False, "a\nb", FailureKind.UNKNOWN)).permanent
    assert _guard(ctx, Decision(None, False, "a\n b", FailureKind.UNKNOWN)).explanation == "a b"


def test_changed_knobs() -> None:
    after = VLLM_BASE.model_copy(update={"context_length": 1024, "shm_bytes": GiB})
    assert changed_knobs(VLLM_BASE, after) == ("contextLength", "shmSize")
    assert changed_knobs(VLLM_BASE, VLLM_BASE) == ()


def test_attempt_from_wire() -> None:
    attempt = FailedAttempt.from_wire({"contextLength": 65536, "failure": "KVCacheTooSmall"}, defaults=VLLM_BASE)
    assert attempt.failure is K.KV_CACHE_TOO_SMALL
    assert attempt.config == VLLM_BASE.model_copy(update={"context_length": 65536})
    full = FailedAttempt.from_wire({**VLLM_BASE.to_wire(), "failure": "Unknown"})
    assert full.config == VLLM_BASE
    with pytest.raises(ValueError, match="failure: 'Nope' is not one of"):
        FailedAttempt.from_wire({"failure": "Nope"}, defaults=VLLM_BASE)
    with pytest.raises(ValueError, match="contextLength: required"):
        FailedAttempt.from_wire({"failure": "Unknown"})
    with pytest.raises(ValueError, match="memoryLimit: must be a finite quantity"):
        FailedAttempt.from_wire({"memoryLimit": "lots", "failure": "Unknown"}, defaults=VLLM_BASE)


def test_replan_receives_the_held_knobs() -> None:
    seen: dict[str, Any] = {}

    def replan(spec: InferenceServerSpec, pin: dict[str, Any]) -> tuple[int, str]:
        seen.update(pin)
        return 65536, "ok"

    current = VLLM_BASE.model_copy(update={"kv_cache_dtype": "fp8", "gpu_memory_utilization": 0.95})
    decide(make_spec(), current, Failure(K.KV_CACHE_DTYPE_UNSUPPORTED), replan=replan)
    assert seen["kv_cache_dtype"] == "auto"
    assert seen["context_length"] == 131072
    assert seen["gpu_memory_utilization"] == 0.95
    assert "mem_fraction_static" not in seen
