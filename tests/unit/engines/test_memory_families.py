"""The memory model's version families: which rules apply to which engine version, on which GPUs."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest
from ctxfit.api import GiB, InferenceServerSpec
from ctxfit.engines import get_engine
from ctxfit.engines.overhead import (
    CUDA_CONTEXT,
    NCCL_INIT_NVSWITCH,
    SamplerWarmup,
    activation_peak,
    nvswitch_system,
    pre_load_used_bytes,
)
from ctxfit.engines.vllm import VLLM, memory
from ctxfit.engines.vllm.cudagraph import (
    ESTIMATE_BASE,
    ESTIMATE_PER_LAYER,
    REFERENCE_GRAPHS,
    capture_sizes,
    graph_counts,
)
from ctxfit.engines.vllm.dequant import dequant_bytes
from ctxfit.engines.vllm.memory import Family, family, profile_inputs
from ctxfit.engines.vllm.v0batch import v0_batched_tokens
from ctxfit.vocab.inputs import PlanInputs, quantization_method, resolve_inputs

from tests.unit.engines.modelkit import QWQ_32B_BNB

LLAMA_8B = {
    "num_hidden_layers": 32,
    "num_attention_heads": 32,
    "num_key_value_heads": 8,
    "head_dim": 128,
    "vocab_size": 128256,
    "intermediate_size": 14336,
    "max_position_embeddings": 131072,
}


@pytest.mark.parametrize(
    ("version", "env", "expected"),
    [
        ((0, 5, 5), None, Family.V0),
        ((0, 6, 4), None, Family.V0),
        ((0, 6, 5), {"VLLM_USE_V1": "1"}, Family.V0),
        ((0, 7, 2), None, Family.V0),
        ((0, 7, 1), {"VLLM_USE_V1": "1"}, Family.V1),  # opt-in V1 in 0.7
        ((0, 8, 0), None, Family.V1),
        ((0, 8, 5), {"VLLM_USE_V1": "0"}, Family.V0),
        ((0, 10, 1), {"VLLM_USE_V1": "0"}, Family.V0),
        ((0, 11, 0), {"VLLM_USE_V1": "0"}, Family.V1),  # V0 removed in 0.11
        ((0, 19, 0), None, Family.V1),
        ((0, 20, 0), None, Family.V1_020),
        ((0, 33, 0), None, Family.V1_020),
    ],
    ids=lambda v: str(v),
)
def test_family_by_version_and_env(version: tuple[int, int, int], env: dict[str, str] | None, expected: Family) -> None:
    assert family(version, env) is expected


@pytest.mark.parametrize(
    ("version", "env", "capability", "expected"),
    [
        ((0, 8, 2), None, (7, 5), Family.V0),  # T4: "Compute Capability < 8.0 ... Falling back to V0"
        ((0, 10, 1), None, (7, 0), Family.V0),  # V100
        ((0, 9, 2), None, (8, 0), Family.V1),  # A100: V1
        ((0, 9, 2), None, None, Family.V1),  # unknown GPU: no fallback assumed
        ((0, 8, 5), {"VLLM_USE_V1": "1"}, (7, 5), Family.V1),  # forced: vLLM raises instead (a failed start)
        ((0, 7, 2), None, (7, 5), Family.V0),  # V0 anyway before 0.8
        ((0, 11, 0), None, (7, 5), Family.V1),  # V0 removed: no fallback left
    ],
    ids=lambda v: str(v),
)
def test_v1_oracle_falls_back_below_ampere(
    version: tuple[int, int, int], env: dict[str, str] | None, capability: tuple[int, int] | None, expected: Family
) -> None:
    assert family(version, env, capability) is expected


@pytest.mark.parametrize(
    ("version", "kv_dtype", "capability", "env", "mla", "expected"),
    [
        ((0, 8, 1), "fp8", (9, 0), {}, False, Family.V0),  # 0.8.0/0.8.1: any KV dtype but auto falls back
        ((0, 8, 2), "fp8", (9, 0), {}, False, Family.V1),  # FlashAttention 3 takes fp8 on Hopper
        ((0, 9, 2), "fp8", (8, 9), {}, False, Family.V0),  # L40S: FA2, no fp8 -> "--kv-cache-dtype ... V0"
        ((0, 9, 2), "fp8_e5m2", (8, 0), {}, False, Family.V0),  # A100
        ((0, 9, 2), "fp8", (9, 0), {"VLLM_FLASH_ATTN_VERSION": "2"}, False, Family.V0),  # FA2 forced on Hopper
        ((0, 9, 2), "fp8", (9, 0), {"VLLM_ATTENTION_BACKEND": "FLASHINFER"}, False, Family.V0),  # not FA before 0.10.2
        ((0, 9, 2), "fp8", (10, 0), {}, False, Family.V0),  # B200 before 0.10.0
        ((0, 10, 1), "fp8", (10, 0), {}, False, Family.V1),  # 0.10.0: SM 10.0 takes every KV dtype
        ((0, 10, 1), "fp8", (12, 0), {}, False, Family.V0),  # RTX 5090 is not 10.0
        ((0, 10, 2), "fp8", (8, 9), {}, True, Family.V1),  # 0.10.2: FlashMLA takes fp8 for MLA models
        ((0, 10, 2), "fp8", (8, 9), {}, False, Family.V0),
        ((0, 10, 2), "fp8", (8, 9), {"VLLM_ATTENTION_BACKEND": "FLASHINFER"}, False, Family.V1),
        ((0, 10, 2), "fp8", (8, 9), {"VLLM_ATTENTION_BACKEND": "TRITON_ATTN_VLLM_V1"}, False, Family.V1),
        ((0, 10, 2), "fp8", (8, 6), {"VLLM_ATTENTION_BACKEND": "TRITON_ATTN_VLLM_V1"}, False, Family.V0),
        ((0, 10, 2), "fp8", (8, 9), {"VLLM_ATTENTION_BACKEND": "TRITON_MLA"}, True, Family.V0),
        ((0, 9, 2), "fp8", (8, 9), {"VLLM_USE_V1": "1"}, False, Family.V1),  # forced: vLLM raises instead
        ((0, 9, 2), "fp8", None, {}, False, Family.V1),  # unknown GPU: no fallback assumed
        ((0, 8, 1), "auto", (8, 9), {}, False, Family.V1),
        ((0, 11, 0), "fp8", (8, 9), {}, False, Family.V1),  # V0 removed
    ],
    ids=lambda v: str(v),
)
def test_v1_oracle_falls_back_for_a_kv_dtype_its_backend_does_not_take(
    version: tuple[int, int, int],
    kv_dtype: str,
    capability: tuple[int, int] | None,
    env: dict[str, str],
    mla: bool,
    expected: Family,
) -> None:
    """engine/arg_utils.py::_is_v1_supported_oracle "No Fp8 KV cache so far" (0.8.0-0.10.2 wheels; oracle.py)."""
    assert family(version, env, capability, kv_dtype, mla=mla) is expected


def test_an_fp8_kv_plan_on_an_l40s_with_09_uses_the_v0_rules() -> None:
    """vLLM 0.9.2 on an L40S with ``--kv-cache-dtype fp8`` falls back to V0: budgeted and batched as V0, while the
    same server with a 16-bit cache is V1."""
    spec = InferenceServerSpec.model_validate({
        "model": {"name": "calibration/llama-8b-like", "weightsPerGPU": "15Gi"},
        "engine": {"kind": "vllm", "version": "0.9.2"},
        "gpu": {"count": 1, "product": "NVIDIA-L40S"},
        "memory": {"kvCacheDtype": "fp8"},
        "context": {"target": 8192},
    })
    inputs = resolve_inputs(spec, hf_config=LLAMA_8B)
    assert inputs.compute_capability == (8, 9)
    engine = VLLM()
    assert engine.resolve_kv_dtype(inputs, "fp8").kv_cache_dtype == "fp8"
    fp8 = engine.default_effective(inputs, kv_cache_dtype="fp8").model_copy(update={"context_length": 8192})
    auto = engine.default_effective(inputs, kv_cache_dtype="auto").model_copy(update={"context_length": 8192})
    assert profile_inputs(inputs, fp8, max_num_batched_tokens=engine.max_num_batched_tokens(inputs)).family is Family.V0
    assert profile_inputs(inputs, auto, max_num_batched_tokens=2048).family is Family.V1
    assert (fp8.max_num_seqs, auto.max_num_seqs) == (256, 256)  # 48 GiB: V1's default is 256 too
    assert engine.max_num_batched_tokens(inputs) == 2048  # V0's floor (chunked prefill not yet known)
    v0, v1 = engine.budget(inputs, fp8), engine.budget(inputs, auto)
    assert any(note.startswith("activation:") and note.endswith("(vllm-v0)") for note in v0.notes)
    assert any(note.startswith("activation:") and note.endswith("(vllm-v1-0.7)") for note in v1.notes)
    assert v0.activation_bytes != v1.activation_bytes


def test_a_t4_plan_on_08_uses_the_v0_rules() -> None:
    """A plan for vLLM 0.8.2 on a T4 with VLLM_USE_V1 unset is budgeted (and batched) as V0."""
    spec = InferenceServerSpec.model_validate({
        "model": {"name": "calibration/llama-8b-like", "weightsPerGPU": "6Gi"},
        "engine": {"kind": "vllm", "version": "0.8.2"},
        "gpu": {"count": 1, "product": "Tesla-T4"},
        "context": {"target": 2048},
    })
    inputs = resolve_inputs(spec, hf_config=LLAMA_8B)
    assert inputs.compute_capability == (7, 5)
    engine = VLLM()
    effective = engine.default_effective(inputs, kv_cache_dtype="auto").model_copy(update={"context_length": 2048})
    profile = profile_inputs(inputs, effective, max_num_batched_tokens=engine.max_num_batched_tokens(inputs))
    assert profile.family is Family.V0 and profile.warmup is SamplerWarmup.SORTING
    assert effective.max_num_seqs == 256


@pytest.mark.parametrize(
    ("context", "model_max", "sliding", "expected"),
    [
        (1024, None, False, 2048),  # at least 2048
        (8192, None, False, 8192),  # chunked prefill off: the whole context is profiled
        (29000, None, False, 29000),
        (32768, None, False, 32768),  # "> 32K" turns chunked prefill on, 32768 does not
        (32769, None, False, 2048),
        (131072, None, False, 2048),
        (131072, None, True, 131072),  # sliding-window models never auto-enable chunked prefill
        (0, 131072, False, 32768),  # context not chosen yet: the largest profile below the switch
        (0, 16384, False, 16384),
        (0, 65536, True, 65536),
    ],
    ids=lambda v: str(v),
)
def test_v0_profiled_tokens(context: int, model_max: int | None, sliding: bool, expected: int) -> None:
    assert v0_batched_tokens(context, model_max, sliding_window=sliding) == expected


def test_v0_chunk_was_512_tokens_before_065() -> None:
    assert v0_batched_tokens(65536, None, version=(0, 6, 4)) == 512
    assert v0_batched_tokens(65536, None, version=(0, 6, 5)) == 2048
    assert v0_batched_tokens(8192, None, version=(0, 5, 5)) == 8192


@pytest.mark.parametrize(
    ("product", "expected"),
    [
        ("NVIDIA-H100-80GB-HBM3", True),
        ("NVIDIA-H200", True),
        ("NVIDIA-H20", True),
        ("NVIDIA-B200", True),
        ("NVIDIA-H100-PCIe", False),
        ("NVIDIA-H100-NVL", False),
        ("NVIDIA-H200-NVL", False),
        ("NVIDIA-A100-SXM4-80GB", False),
        ("NVIDIA-RTX-PRO-6000-Blackwell-Server-Edition", False),
        ("NVIDIA-GeForce-RTX-4090", False),
        ("NVIDIA-L40S", False),
        (None, True),  # unknown: the larger footprint
    ],
    ids=lambda v: str(v),
)
def test_nvswitch_classification(product: str | None, expected: bool) -> None:
    assert nvswitch_system(product) is expected


def test_pre_load_memory_by_topology() -> None:
    assert pre_load_used_bytes("NVIDIA-H100-80GB-HBM3", 1) == CUDA_CONTEXT
    assert pre_load_used_bytes("NVIDIA-H100-80GB-HBM3", 8) == CUDA_CONTEXT + NCCL_INIT_NVSWITCH
    # SGLang 0.5.2 on 8x H100 printed 77.43 GiB free of 79.19 at load begin: 1.76 GiB used
    assert abs(pre_load_used_bytes("NVIDIA-H100-80GB-HBM3", 8) / GiB - (79.19 - 77.43)) <= 0.3
    # PCIe parts: the distributed init grows with the ranks (SGLang issues 17402 and 40558: 0.29 GB at TP 2,
    # 0.39 GB at TP 4 "Init torch distributed ends. mem usage")
    assert pre_load_used_bytes("NVIDIA-GeForce-RTX-4090", 1) == CUDA_CONTEXT
    assert abs((pre_load_used_bytes("NVIDIA-GeForce-RTX-4090", 2) - CUDA_CONTEXT) / GiB - 0.29) < 0.01
    assert abs((pre_load_used_bytes("NVIDIA-RTX-PRO-6000-Blackwell-Server-Edition", 4) - CUDA_CONTEXT) / GiB
               - 0.39) < 0.01
    assert pre_load_used_bytes("NVIDIA-L4", 8) > pre_load_used_bytes("NVIDIA-L4", 4)


def _vllm(
    version: str,
    *,
    context: int,
    product: str = "NVIDIA-GeForce-RTX-3090",
    tp: int = 1,
    batching: dict[str, int] | None = None,
    **extra: Any,
):
    spec = InferenceServerSpec.model_validate(
        {
            "batching": batching or {},
            "model": {"name": "meta-llama/Llama-3.1-8B-Instruct", "weightsPerGPU": "15Gi"},
            "engine": {"kind": "vllm", "version": version, **extra},
            "gpu": {"count": tp, "product": product},
            "parallelism": {"tensor": tp},
            "context": {"target": context},
            "memory": {"gpuMemoryUtilization": 0.9},
        }
    )
    inputs = resolve_inputs(spec, hf_config=LLAMA_8B)
    engine = get_engine(spec.engine.kind)
    effective = engine.default_effective(inputs, kv_cache_dtype="auto").model_copy(update={"context_length": context})
    return inputs, effective, engine.budget(inputs, effective)


def test_v0_activation_follows_the_context_until_chunked_prefill_switches_on() -> None:
    peaks = {ctx: _vllm("0.6.4", context=ctx)[2].activation_bytes for ctx in (4096, 16384, 32768, 65536)}
    assert peaks[4096] < peaks[16384] < peaks[32768]
    assert peaks[65536] == peaks[4096]  # 2048-token chunks: the sampler warm-up dominates both
    # V1 profiles max_num_batched_tokens whatever the context
    v1 = {ctx: _vllm("0.19.0", context=ctx)[2].activation_bytes for ctx in (4096, 32768)}
    assert v1[4096] == v1[32768]


def test_v0_rtx3090_start_up_is_predicted_from_its_own_rules() -> None:
    # vllm issue 10517: 29000-token profile, 2.99 GiB activation, 0.35 GiB non-torch, 2.89 GiB KV
    spec_weights = 14.9888
    inputs, _, terms = _vllm("0.6.4", context=29000)
    assert inputs.cuda_total_bytes / GiB == pytest.approx(23.58, abs=0.01)
    kv = terms.kv_cache_bytes + (inputs.weights_per_gpu_bytes - int(spec_weights * GiB))
    assert kv / GiB == pytest.approx(2.89, abs=0.25)
    assert terms.usable_bytes == terms.weights_bytes + terms.activation_bytes + terms.other_bytes + terms.kv_cache_bytes


def test_nvswitch_buffers_only_on_nvswitch_systems() -> None:
    h100 = _vllm("0.19.0", context=8192, product="NVIDIA-H100-80GB-HBM3", tp=2)[2]
    pcie = _vllm("0.19.0", context=8192, product="NVIDIA-H100-PCIe", tp=2)[2]
    assert h100.other_bytes - pcie.other_bytes == memory.FITTED["vllm-v1-0.17"].nvlink_buffers_bytes


def test_cuda_graphs_deducted_only_from_020() -> None:
    before = _vllm("0.19.0", context=8192, product="NVIDIA-H100-80GB-HBM3")[2]
    after = _vllm("0.20.0", context=8192, product="NVIDIA-H100-80GB-HBM3")[2]
    assert before.cuda_graph_bytes == 0 < after.cuda_graph_bytes


def test_use_v1_env_selects_v0_rules_on_08() -> None:
    v1 = _vllm("0.8.5", context=16384)[2]
    v0 = _vllm("0.8.5", context=16384, env=[{"name": "VLLM_USE_V1", "value": "0"}])[2]
    assert "(vllm-v0)" in v0.notes[2] and "(vllm-v1-0.7)" in v1.notes[2]


def test_engine_max_batched_tokens_is_what_the_profile_uses_for_v1() -> None:
    inputs, effective, _ = _vllm("0.19.0", context=8192, product="NVIDIA-H100-80GB-HBM3")
    profile = memory.profile_inputs(inputs, effective, max_num_batched_tokens=VLLM().max_num_batched_tokens(inputs))
    assert profile.sizes.max_num_batched_tokens == 8192
    assert profile.family is Family.V1 and profile.warmup is SamplerWarmup.LEAN


@pytest.mark.parametrize(
    ("config", "args", "expected"),
    [
        ({}, [], None),
        ({"quantization_config": {"quant_method": "bitsandbytes", "load_in_4bit": True}}, [], "bitsandbytes"),
        ({"quantization_config": {"quant_method": "bitsandbytes", "load_in_8bit": True}}, [], "bitsandbytes-8bit"),
        ({"quantization_config": {"quant_method": "AWQ"}}, [], "awq"),
        ({}, ["--quantization", "bitsandbytes"], "bitsandbytes"),
        ({"quantization_config": {"quant_method": "gptq"}}, ["--quantization=gptq_marlin"], "gptq_marlin"),
        ({"quantization_config": "bitsandbytes"}, [], None),  # not a dict: unknown, not an error
    ],
    ids=lambda v: str(v),
)
def test_quantization_method(config: dict[str, Any], args: list[str], expected: str | None) -> None:
    assert quantization_method(config, args) == expected


def _qwq_stage(config: dict[str, Any]) -> tuple[PlanInputs, memory.ProfileInputs]:
    spec = InferenceServerSpec.model_validate(
        {
            "model": {"name": "unsloth/QwQ-32B-unsloth-bnb-4bit", "weightsPerGPU": "10Gi"},
            "engine": {"kind": "vllm", "version": "0.8.5", "env": [{"name": "VLLM_USE_V1", "value": "0"}]},
            "gpu": {"count": 2, "product": "NVIDIA-GeForce-RTX-5090"},
            "parallelism": {"pipeline": 2},
            "context": {"target": 50000},
            "memory": {"gpuMemoryUtilization": 0.85},
        }
    )
    inputs = resolve_inputs(spec, hf_config=config)
    engine = get_engine(spec.engine.kind)
    effective = engine.default_effective(inputs, kv_cache_dtype="auto").model_copy(update={"context_length": 50000})
    tokens = VLLM().max_num_batched_tokens(inputs)
    return inputs, memory.profile_inputs(inputs, effective, max_num_batched_tokens=tokens)


def test_bnb_dequant_buffer_is_the_largest_shard() -> None:
    inputs, profile = _qwq_stage(QWQ_32B_BNB)
    assert inputs.quantization == "bitsandbytes"
    tokens = profile.sizes.max_num_batched_tokens
    assert tokens == 2048  # V0 at 50000 tokens: chunked prefill, 2048-token profile
    assert dequant_bytes(inputs) == 27648 * 5120 * 2  # one bf16 gate (or up) shard of QwQ-32B at TP 1
    assert profile.sizes.dequant_bytes == dequant_bytes(inputs)
    unquantized, _ = _qwq_stage({k: v for k, v in QWQ_32B_BNB.items() if k != "quantization_config"})
    assert dequant_bytes(unquantized) == 0
    eight_bit = {**QWQ_32B_BNB, "quantization_config": {"quant_method": "bitsandbytes", "load_in_8bit": True}}
    assert dequant_bytes(_qwq_stage(eight_bit)[0]) == 0


def test_bnb_dequant_moves_the_forward_only_stage_toward_its_ledger() -> None:
    """vllm issue 14452 (tests/fixtures/startups): QwQ-32B bnb-4bit, PP 2; the first stage does not sample and
    prints "PyTorch activation peak memory takes 1.01GiB" (its forward alone)."""
    _, profile = _qwq_stage(QWQ_32B_BNB)
    copies = memory.FITTED[Family.V0].copies
    no_sampler = replace(profile.sizes, sampler_logits_bytes=0)
    with_dequant = activation_peak(no_sampler, copies, warmup=SamplerWarmup.SORTING).bytes / GiB
    without = activation_peak(replace(no_sampler, dequant_bytes=0), copies, warmup=SamplerWarmup.SORTING).bytes / GiB
    assert abs(with_dequant - 1.01) < abs(without - 1.01)
    assert with_dequant < 1.01  # the term is the bf16 shard, not a fitted pad


def test_bnb_moe_dequantizes_every_expert() -> None:
    config = {
        **LLAMA_8B,
        "hidden_size": 2048,
        "num_experts": 128,
        "num_experts_per_tok": 8,
        "moe_intermediate_size": 768,
        "intermediate_size": 6144,
        "quantization_config": {"quant_method": "bitsandbytes"},
    }
    spec = InferenceServerSpec.model_validate(
        {
            "model": {"name": "Qwen/Qwen3-30B-A3B-bnb-4bit", "weightsPerGPU": "17Gi"},
            "engine": {"kind": "vllm", "version": "0.10.0"},
            "gpu": {"count": 2, "product": "NVIDIA-H100-80GB-HBM3"},
            "parallelism": {"tensor": 2},
            "context": {"target": 8192},
        }
    )
    inputs = resolve_inputs(spec, hf_config=config)
    assert dequant_bytes(inputs) == 128 * 3 * (768 // 2) * 2048 * 2


def test_capture_sizes_follow_vllm_defaults() -> None:
    # config/vllm.py::_set_cudagraph_sizes: [1, 2, 4] + range(8, 256, 8) + range(256, max + 1, 16)
    assert capture_sizes(512)[:5] == [1, 2, 4, 8, 16] and capture_sizes(512)[-2:] == [496, 512]
    assert len(capture_sizes(512)) == 51 and len(capture_sizes(256)) == 35 and capture_sizes(16) == [1, 2, 4, 8, 16]


@pytest.mark.parametrize(
    ("capture", "seqs", "tokens", "expected"),
    [
        (512, 1024, 8192, (51, 51)),  # the 0.19 H100 sweep: PIECEWISE=51, FULL=51
        (512, 256, 2048, (51, 35)),  # "PIECEWISE=51 (largest=512), FULL=35 (largest=256)" (vllm PR 39559's log)
        (512, 128, 8192, (51, 19)),
        (512, 256, 256, (35, 35)),  # max_num_batched_tokens caps the capture size
        (16, 8, 2048, (5, 4)),
    ],
)
def test_graph_counts_per_mode(capture: int, seqs: int, tokens: int, expected: tuple[int, int]) -> None:
    assert graph_counts(capture, seqs, tokens) == expected


def test_cuda_graph_estimate_scales_with_the_graphs_vllm_captures() -> None:
    # 0.20+ deducts first capture + per-graph x graphs: 256 sequences capture 86 graphs, the sweep's 1024 capture 102
    full = _vllm("0.20.0", context=8192, product="NVIDIA-H100-80GB-HBM3", batching={"maxNumSeqs": 1024})
    fewer = _vllm("0.20.0", context=8192, product="NVIDIA-H100-80GB-HBM3", batching={"maxNumSeqs": 256})
    per_layer_part = 32 * ESTIMATE_PER_LAYER
    assert full[2].cuda_graph_bytes == ESTIMATE_BASE + per_layer_part  # the sweep's configuration
    assert fewer[2].cuda_graph_bytes == pytest.approx(ESTIMATE_BASE + per_layer_part * 86 / REFERENCE_GRAPHS, abs=1)
    assert fewer[2].kv_cache_bytes - full[2].kv_cache_bytes > 0
    assert fewer[2].cuda_graph_bytes == memory.cuda_graph_bytes(fewer[0], fewer[1], Family.V1_020, 8192)
