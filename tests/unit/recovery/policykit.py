"""What the policy tests decide on: ``make_spec`` and ``VLLM_BASE`` for the table cases, and hypothesis
strategies of specs, configurations and failures for the properties."""

from __future__ import annotations

from typing import Any

from ctxfit.api import EffectiveConfig, GiB, InferenceServerSpec, MiB
from ctxfit.recovery import Failure, FailureKind
from hypothesis import strategies as st

LLAMA = "meta-llama/Llama-3.1-8B-Instruct"


def make_spec(engine: str = "vllm", model: str = LLAMA, **sections: Any) -> InferenceServerSpec:
    data: dict[str, Any] = {
        "model": {"name": model},
        "engine": {"kind": engine, "version": "0.11.0" if engine == "vllm" else "0.5.23"},
        "gpu": {"count": 1, "product": "NVIDIA-L40S"},
        "context": {"target": 131072},
    }
    data.update(sections)
    return InferenceServerSpec.model_validate(data)


VLLM_BASE = EffectiveConfig(
    context_length=131072, gpu_memory_utilization=0.90, mem_fraction_static=None, kv_cache_dtype="auto",
    max_num_seqs=256, cuda_graph_max_batch_size=512, memory_limit_bytes=64 * GiB, shm_bytes=16 * GiB,
    startup_timeout_seconds=1200,
)

NUMBER_NAMES = ("requestedContextLength", "estimatedMaxContextLength", "neededBytes", "availableBytes",
                "freeBytes", "totalBytes", "requestedBytes", "minimumMemFractionStatic", "memFractionStatic",
                "dummyRequests", "derivedMaxContextLength", "modelMaxLength", "gpuMemoryUtilization", "inUseBytes",
                "maxNumSeqs", "availableMambaBlocks", "attentionHeads", "tensorParallelSize", "otherProcessesBytes",
                "fp8E5m2Supported", "computeCapability", "minimumComputeCapability")
MODELS = ("meta-llama/Llama-3.1-8B-Instruct", "moonshotai/Kimi-K2.5", "deepseek-ai/DeepSeek-V3.2-Exp", "acme/x")

fractions = st.integers(30, 100).map(lambda n: n / 100)


@st.composite
def specs(draw: st.DrawFn) -> InferenceServerSpec:
    engine = draw(st.sampled_from(["vllm", "sglang"]))
    target = draw(st.integers(1024, 1 << 20))
    context: dict[str, Any] = {"target": target}
    if draw(st.booleans()):
        context["minimum"] = draw(st.integers(16, target))
    if draw(st.booleans()):
        context["headroom"] = draw(st.integers(0, 90)) / 100
    tp = draw(st.sampled_from([1, 2, 8]))
    return InferenceServerSpec.model_validate({
        "model": {"name": draw(st.sampled_from(MODELS))},
        "engine": {"kind": engine, "version": draw(st.sampled_from(["0.11.0", "0.20.0", "0.5.23"]))},
        "gpu": {"count": tp}, "parallelism": {"tensor": tp}, "context": context,
        "attempts": draw(st.integers(1, 10)),
    })


@st.composite
def configs(draw: st.DrawFn, spec: InferenceServerSpec) -> EffectiveConfig:
    vllm = spec.engine.kind.value == "vllm"
    return EffectiveConfig(
        context_length=draw(st.integers(16, 1 << 21)),
        gpu_memory_utilization=draw(fractions) if vllm else None,
        mem_fraction_static=None if vllm else draw(st.integers(30, 99).map(lambda n: n / 100)),
        kv_cache_dtype=draw(st.sampled_from(["auto", "bfloat16", "fp8", "fp8_e4m3", "fp8_e5m2", "fp8_ds_mla",
                                             "nvfp4"])),
        max_num_seqs=draw(st.integers(1, 4096)),
        cuda_graph_max_batch_size=draw(st.integers(1, 1024)),
        memory_limit_bytes=draw(st.integers(1, 1 << 20)) * MiB,
        shm_bytes=draw(st.integers(1, 1 << 16)) * MiB,
        startup_timeout_seconds=draw(st.integers(30, 7 * 24 * 3600)),
    )


@st.composite
def failures(draw: st.DrawFn) -> Failure:
    kind = draw(st.sampled_from(list(FailureKind)))
    names = draw(st.lists(st.sampled_from(NUMBER_NAMES), unique=True, max_size=5))
    numbers: dict[str, int | float] = {}
    for name in names:
        if "Fraction" in name or "Utilization" in name:
            numbers[name] = draw(st.floats(0, 1.5, allow_nan=False))
        elif name.endswith("Bytes"):
            numbers[name] = draw(st.integers(0, 200 * GiB))
        else:
            numbers[name] = draw(st.integers(0, 1 << 22))
    return Failure(kind, numbers, draw(st.text(max_size=80)))
