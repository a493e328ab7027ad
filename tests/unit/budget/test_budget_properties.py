"""Hypothesis properties of the budget (house-style point 12)."""

from __future__ import annotations

from ctxfit.api import Architecture, InferenceServerSpec
from ctxfit.budget.context import context_ladder
from ctxfit.budget.kv import kv_bytes_per_token, kv_layout
from ctxfit.budget.planner import plan
from hypothesis import assume, given, settings
from hypothesis import strategies as st

LADDER = set(context_ladder())
DTYPES = st.sampled_from(["auto", "fp8"])


@st.composite
def gqa(draw: st.DrawFn) -> Architecture:
    return Architecture.model_validate(
        {
            "attention": "gqa",
            "numLayers": draw(st.integers(1, 128)),
            "numKVHeads": draw(st.sampled_from([1, 2, 4, 8, 16, 32])),
            "headDim": draw(st.sampled_from([64, 96, 128, 256])),
        }
    )


@given(gqa(), st.integers(1, 8), DTYPES)
def test_kv_linear_in_layers(arch: Architecture, factor: int, dtype: str) -> None:
    more = arch.model_copy(update={"num_layers": arch.num_layers * factor})  # type: ignore[operator]
    assert kv_bytes_per_token(more, kv_cache_dtype=dtype) == factor * kv_bytes_per_token(arch, kv_cache_dtype=dtype)


@given(gqa(), st.integers(1, 4))
def test_kv_linear_in_heads(arch: Architecture, factor: int) -> None:
    more = arch.model_copy(update={"num_kv_heads": arch.num_kv_heads * factor})  # type: ignore[operator]
    assert kv_bytes_per_token(more) == factor * kv_bytes_per_token(arch)


@given(gqa())
def test_kv_linear_in_dtype_width(arch: Architecture) -> None:
    assert kv_bytes_per_token(arch, kv_cache_dtype="auto") == 2 * kv_bytes_per_token(arch, kv_cache_dtype="fp8")


@given(st.integers(1, 64), st.sampled_from([1, 2, 4, 8]))
def test_mla_not_divided_by_tp(layers: int, tp: int) -> None:
    arch = Architecture.model_validate(
        {"attention": "mla", "numLayers": layers, "kvLoraRank": 512, "qkRopeHeadDim": 64}
    )
    assert kv_bytes_per_token(arch, tensor_parallel=tp) == layers * 1152


@given(gqa(), st.integers(0, 1 << 36), st.sampled_from([1, 16, 64]))
def test_max_context_is_tight(arch: Architecture, pool: int, block: int) -> None:
    layout = kv_layout(arch)
    best = layout.max_context_for(pool, block_size=block, limit=1 << 30)
    if best > 0:
        assert layout.request_bytes(best, block_size=block) <= pool
    if best + block <= 1 << 30:
        assert layout.request_bytes(best + block, block_size=block) > pool


def spec_for(memory_mib: int, weights_gib: float, target: int, engine: str, minimum: int) -> InferenceServerSpec:
    assume(weights_gib * 1024 < memory_mib)  # weights larger than the GPU are rejected as input, by design
    memory = {"gpuMemoryUtilization": 0.92} if engine == "vllm" else {"memFractionStatic": 0.85}
    return InferenceServerSpec.model_validate(
        {
            "model": {"name": "meta-llama/Llama-3.1-70B-Instruct", "weightsPerGPU": f"{int(weights_gib * 2**30)}"},
            "engine": {"kind": engine, "version": "0.20.0" if engine == "vllm" else "0.5.23"},
            "gpu": {"count": 2, "memory": f"{memory_mib}Mi"},
            "parallelism": {"tensor": 2},
            "context": {"target": target, "minimum": minimum},
            "memory": memory,
        }
    )


ENGINES = st.sampled_from(["vllm", "sglang"])


@settings(max_examples=60, deadline=None)
@given(st.integers(40_000, 200_000), st.integers(0, 30_000), st.floats(5, 35), st.integers(1024, 131072), ENGINES)
def test_max_context_never_grows_when_gpu_shrinks(
    mib: int, shrink: int, weights: float, target: int, engine: str
) -> None:
    big = plan(spec_for(mib, weights, target, engine, 1024), suggest=False)
    small = plan(spec_for(max(20_000, mib - shrink), weights, target, engine, 1024), suggest=False)
    assert small.max_context_length <= big.max_context_length


@settings(max_examples=60, deadline=None)
@given(st.integers(40_000, 200_000), st.floats(5, 30), st.floats(0, 5), st.integers(1024, 131072), ENGINES)
def test_max_context_never_grows_when_weights_grow(
    mib: int, weights: float, extra: float, target: int, engine: str
) -> None:
    light = plan(spec_for(mib, weights, target, engine, 1024), suggest=False)
    heavy = plan(spec_for(mib, weights + extra, target, engine, 1024), suggest=False)
    assert heavy.max_context_length <= light.max_context_length


@settings(max_examples=80, deadline=None)
@given(st.integers(30_000, 200_000), st.floats(5, 35), st.integers(1024, 131072), ENGINES)
def test_chosen_context_rules(mib: int, weights: float, target: int, engine: str) -> None:
    result = plan(spec_for(mib, weights, target, engine, 1024), suggest=False)
    if result.fits:
        assert result.context_length <= result.max_context_length
        assert result.context_length == target or result.context_length in LADDER
        assert result.context_length >= 1024
    else:
        assert result.context_length == 0


@settings(max_examples=60, deadline=None)
@given(st.integers(30_000, 200_000), st.floats(5, 35))
def test_vllm_budget_identity_and_tightness(mib: int, weights: float) -> None:
    result = plan(spec_for(mib, weights, 4096, "vllm", 1024), suggest=False)
    t = result.per_gpu
    overheads = t.activation_bytes + t.cuda_graph_bytes + t.other_bytes
    assert t.usable_bytes == t.weights_bytes + overheads + t.kv_cache_bytes
    if result.max_context_length > 0 and result.max_context_length < 131072:
        one_block = 16 * result.kv_bytes_per_token
        kv_max = result.max_context_length * result.kv_bytes_per_token
        # weights + KV(max) + overheads <= usable < weights + KV(max + one block) + overheads (+ null block)
        assert t.weights_bytes + kv_max + overheads <= t.usable_bytes
        assert t.usable_bytes < t.weights_bytes + kv_max + 2 * one_block + overheads
