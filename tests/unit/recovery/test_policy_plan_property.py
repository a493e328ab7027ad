"""A proposed configuration is never one the plan itself predicts will fail the same way.

Over catalog models, GPUs, engines and the memory kinds whose next step moves a memory fraction or the KV dtype
(StaticMemoryTooSmall, NoKVCacheMemory, GPUOutOfMemory and GraphCaptureOOM with memory held by other processes,
KVCacheDtypeUnsupported naming fp8e5), the policy with the real planner (``replan_context``) proposes only
configurations the planner, pinned to every knob of the proposal, predicts hold the proposed context. Plus the
issue's own example: a fraction of 0.2 failing under weights of 0.24 of the GPU goes above weights + KV.
"""

from __future__ import annotations

from typing import Any

import pytest
from ctxfit.api import GiB, InferenceServerSpec
from ctxfit.budget.planner import plan, replan_context
from ctxfit.recovery import Failure, FailureKind, decide, initial_effective
from ctxfit.vocab.inputs import PlanInputError
from hypothesis import assume, given, settings
from hypothesis import strategies as st

K = FailureKind
MODELS = ("meta-llama/Llama-3.1-8B-Instruct", "Qwen/Qwen3-32B", "moonshotai/Kimi-K2.5", "Qwen/Qwen3-235B-A22B")
GPUS = ("NVIDIA-H100-80GB-HBM3", "NVIDIA-A100-SXM4-80GB", "NVIDIA-L40S", "NVIDIA-H200", "NVIDIA-B200")


@st.composite
def servers(draw: st.DrawFn) -> InferenceServerSpec:
    engine = draw(st.sampled_from(["vllm", "sglang"]))
    tp = draw(st.sampled_from([1, 2, 4, 8]))
    memory: dict[str, Any] = {}
    if draw(st.booleans()):
        key = "gpuMemoryUtilization" if engine == "vllm" else "memFractionStatic"
        memory[key] = draw(st.integers(20, 95)) / 100
    if draw(st.booleans()):
        memory["kvCacheDtype"] = "fp8"
    spec: dict[str, Any] = {
        "model": {"name": draw(st.sampled_from(MODELS))},
        "engine": {"kind": engine, "version": draw(st.sampled_from(
            ["0.10.2", "0.17.1", "0.20.0"] if engine == "vllm" else ["0.4.6", "0.5.4", "0.5.23"]))},
        "gpu": {"count": tp, "product": draw(st.sampled_from(GPUS))},
        "parallelism": {"tensor": tp},
        "context": {"target": draw(st.sampled_from([8192, 32768, 131072, 262144]))},
        "memory": memory,
    }
    return InferenceServerSpec.model_validate(spec)


def failure_for(kind: FailureKind, total_bytes: int, draw: st.DrawFn) -> Failure:
    if kind in (K.GPU_OUT_OF_MEMORY, K.GRAPH_CAPTURE_OOM):
        others = draw(st.integers(1, 40)) * GiB // 4
        return Failure(kind, {"totalBytes": total_bytes, "freeBytes": GiB // 8, "requestedBytes": GiB,
                              "otherProcessesBytes": others}, "CUDA out of memory")
    if kind is K.KV_CACHE_DTYPE_UNSUPPORTED:
        return Failure(kind, {"fp8E5m2Supported": 1}, "type fp8e4nv not supported; ('fp8e4b15', 'fp8e5')")
    if kind is K.STATIC_MEMORY_TOO_SMALL and draw(st.booleans()):
        return Failure(kind, {"minimumMemFractionStatic": draw(st.integers(5, 90)) / 100}, "Loaded weights leave")
    return Failure(kind, {}, "Not enough memory")


def predicted_context(spec: InferenceServerSpec, config: Any) -> int:
    """What the planner, pinned to every knob of ``config`` (context as the target), says holds."""
    relaxed = spec.model_copy(update={"context": spec.context.model_copy(update={"minimum": None})})
    pin = {k: v for k, v in config.model_dump().items() if v is not None}
    return plan(relaxed, pin=pin, suggest=False).context_length


@settings(max_examples=120, deadline=None)
@given(data=st.data())
def test_a_proposal_is_never_one_the_plan_predicts_to_fail(data: st.DataObject) -> None:
    spec = data.draw(servers())
    try:
        current = initial_effective(spec)
        planned = plan(spec, suggest=False)
    except PlanInputError:
        assume(False)
    kinds = [K.STATIC_MEMORY_TOO_SMALL, K.GPU_OUT_OF_MEMORY, K.GRAPH_CAPTURE_OOM]
    kinds += [K.NO_KV_CACHE_MEMORY] if spec.engine.kind.value == "vllm" else []
    kinds += [K.KV_CACHE_DTYPE_UNSUPPORTED] if current.kv_cache_dtype in ("fp8", "fp8_e4m3") else []
    kind = data.draw(st.sampled_from(kinds))
    failure = failure_for(kind, planned.per_gpu.cuda_total_bytes, data.draw)
    decision = decide(spec, current, failure, replan=replan_context)
    if decision.permanent or decision.next is None:
        return
    nxt = decision.next
    assert predicted_context(spec, nxt) >= nxt.context_length, (kind.value, decision.explanation)


def test_low_fraction_under_heavier_weights_covers_weights_and_kv() -> None:
    """The issue's case: SGLang at mem-fraction-static 0.2 with weights of 0.24 of the GPU. The next fraction covers
    weights + the context's KV (not 0.2 + KV, which holds half the context), and the plan predicts the context."""
    spec = InferenceServerSpec.model_validate({
        "engine": {"kind": "sglang", "version": "0.4.6"},
        "model": {"name": "meta-llama/Llama-3.1-8B-Instruct", "weightsPerGPU": "19Gi"},
        "gpu": {"count": 1, "product": "NVIDIA-H100-80GB-HBM3"},
        "context": {"target": 131072}, "memory": {"memFractionStatic": 0.2}})
    current = initial_effective(spec)
    failure = Failure(K.STATIC_MEMORY_TOO_SMALL, {}, "Not enough memory. Please try to increase --mem-fraction-static.")
    for replan in (None, replan_context):
        decision = decide(spec, current, failure, replan=replan)
        assert decision.next is not None, decision.explanation
        weights_share = 19 * GiB / (79.65 * GiB - 0.51 * GiB)
        kv_share = 131072 * 131072 / (79.65 * GiB - 0.51 * GiB)
        assert decision.next.mem_fraction_static >= weights_share + kv_share
        assert decision.next.context_length == 131072
        assert "weights 19.00 GiB" in decision.explanation
        assert predicted_context(spec, decision.next) >= 131072


@pytest.mark.parametrize("util", [0.9, 0.95])
def test_oom_with_other_processes_frees_their_memory(util: float) -> None:
    """vLLM on an H100: 12.5 GiB of another process on the GPU. The next utilization is lower by at least that share,
    whatever phase the OOM came in, and the plan still predicts the context there."""
    spec = InferenceServerSpec.model_validate({
        "engine": {"kind": "vllm", "version": "0.6.3"}, "model": {"name": "meta-llama/Llama-3.1-8B-Instruct"},
        "gpu": {"count": 1, "product": "NVIDIA-H100-80GB-HBM3"}, "context": {"target": 131072},
        "memory": {"gpuMemoryUtilization": util}})
    current = initial_effective(spec)
    total = int(79.19 * GiB)
    failure = Failure(K.GPU_OUT_OF_MEMORY, {"totalBytes": total, "freeBytes": GiB, "requestedBytes": 2 * GiB,
                                            "inUseBytes": int(65.1 * GiB), "otherProcessesBytes": int(12.5 * GiB)},
                      "CUDA out of memory")
    decision = decide(spec, current, failure, replan=replan_context)
    assert decision.next is not None and decision.next.gpu_memory_utilization is not None
    assert decision.next.gpu_memory_utilization <= util - 12.5 / 79.19
    assert predicted_context(spec, decision.next) >= decision.next.context_length
