"""vLLM >= 0.20: which model runner a worker uses (Model Runner V2 deducts no CUDA-graph estimate), the capture
size vLLM picks when none is passed, and the estimate's architecture factors (engines/vllm/runner.py,
engines/vllm/cudagraph.py)."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest
from ctxfit.api import GiB, InferenceServerSpec
from ctxfit.engines import get_engine
from ctxfit.engines.overhead import CUDA_CONTEXT
from ctxfit.engines.vllm import VLLM, memory
from ctxfit.engines.vllm.cudagraph import (
    ESTIMATE_BASE,
    ESTIMATE_MLA_FACTOR,
    ESTIMATE_MOE_FACTOR,
    ESTIMATE_PER_LAYER,
    POOL_BASE,
    POOL_MLA_FACTOR,
    POOL_MOE_FACTOR,
    POOL_PER_LAYER,
    REFERENCE_GRAPHS,
    cuda_graph_bytes,
    default_capture_size,
    estimate_bytes,
)
from ctxfit.engines.vllm.memory import Family
from ctxfit.engines.vllm.runner import sampler_state_bytes, uses_model_runner_v2
from ctxfit.vocab.inputs import resolve_inputs

from bench.graph_fit import POOL_COLUMN, GraphFit, fit, sweep_rows

LLAMA = "LlamaForCausalLM"
DENSE: dict[str, Any] = {
    "num_hidden_layers": 32,
    "num_attention_heads": 32,
    "num_key_value_heads": 8,
    "head_dim": 128,
    "vocab_size": 128256,
    "intermediate_size": 14336,
    "max_position_embeddings": 131072,
    "architectures": [LLAMA],
}
MOE = {**DENSE, "architectures": ["MixtralForCausalLM"], "num_local_experts": 8, "num_experts_per_tok": 2}
MLA = {
    **DENSE,
    "architectures": ["DeepseekV3ForCausalLM"],
    "kv_lora_rank": 512,
    "qk_rope_head_dim": 64,
    "n_routed_experts": 64,
    "num_experts_per_tok": 6,
    "moe_intermediate_size": 1408,
}


@pytest.mark.parametrize(
    ("version", "archs", "moe", "hybrid", "quantized", "env", "expected"),
    [
        ((0, 21, 0), (LLAMA,), False, False, False, None, False),  # envs.py default "0"
        ((0, 21, 0), (LLAMA,), False, False, False, {"VLLM_USE_V2_MODEL_RUNNER": "1"}, True),
        ((0, 22, 0), ("Qwen3ForCausalLM",), False, False, False, None, True),
        ((0, 22, 0), (LLAMA,), False, False, False, None, False),  # not yet listed
        ((0, 23, 0), (LLAMA,), False, False, False, None, True),
        ((0, 23, 0), (LLAMA,), False, False, True, None, False),  # quantized: V1 runner in 0.22-0.23
        ((0, 24, 0), (LLAMA,), False, False, True, None, True),
        ((0, 24, 0), ("Gemma3ForCausalLM",), False, False, False, None, False),
        ((0, 25, 0), ("Gemma3ForCausalLM",), False, False, False, None, True),  # every dense model from 0.25
        ((0, 26, 0), (LLAMA,), False, False, True, None, True),  # the A40 start-ups of tests/fixtures/startups
        ((0, 26, 0), ("MixtralForCausalLM",), True, False, False, None, False),  # MoE, not listed
        ((0, 26, 0), ("Qwen2MoeForCausalLM",), True, False, False, None, True),
        ((0, 26, 0), ("GptOssForCausalLM",), True, False, False, None, False),
        ((0, 27, 0), ("Qwen3_5ForConditionalGeneration",), False, True, False, None, False),  # hybrid
        ((0, 28, 0), ("Qwen3_5ForConditionalGeneration",), False, True, False, None, False),
        ((0, 28, 0), (LLAMA,), False, False, False, {"VLLM_USE_V2_MODEL_RUNNER": "0"}, False),
        ((0, 28, 0), (), False, False, False, None, True),  # unknown name, dense: MRV2 from 0.25
        ((0, 24, 0), (), False, False, False, None, False),  # unknown name before 0.25: the V1 runner
        ((0, 29, 0), ("MixtralForCausalLM",), True, False, False, None, True),  # every model from 0.29
        ((0, 29, 0), ("Qwen3_5ForConditionalGeneration",), False, True, False, None, True),
        ((0, 33, 0), ("GptOssForCausalLM",), True, False, True, {"VLLM_USE_V2_MODEL_RUNNER": "0"}, False),
    ],
)
def test_model_runner_v2_default(
    version: tuple[int, int, int],
    archs: tuple[str, ...],
    moe: bool,
    hybrid: bool,
    quantized: bool,
    env: dict[str, str] | None,
    expected: bool,
) -> None:
    got = uses_model_runner_v2(version, architectures=archs, moe=moe, hybrid=hybrid, quantized=quantized, env=env)
    assert got is expected


def _plan(version: str, config: dict[str, Any], *, seqs: int = 256, product: str = "NVIDIA-H100-80GB-HBM3") -> Any:
    spec = InferenceServerSpec.model_validate(
        {
            "model": {"name": "calibration/runner", "weightsPerGPU": "15Gi"},
            "engine": {"kind": "vllm", "version": version},
            "gpu": {"count": 1, "product": product},
            "context": {"target": 4096},
            "memory": {"gpuMemoryUtilization": 0.9},
            "batching": {"maxNumSeqs": seqs},
        }
    )
    inputs = resolve_inputs(spec, hf_config=config)
    engine = get_engine(spec.engine.kind)
    effective = engine.default_effective(inputs, kv_cache_dtype="auto").model_copy(update={"context_length": 4096})
    profile = memory.profile_inputs(inputs, effective, max_num_batched_tokens=VLLM().max_num_batched_tokens(inputs))
    return inputs, effective, profile, engine.budget(inputs, effective)


def test_architectures_come_from_config_json() -> None:
    inputs = _plan("0.26.0", DENSE)[0]
    assert inputs.architectures == (LLAMA,)


def test_model_runner_v2_deducts_no_graph_estimate() -> None:
    inputs, effective, profile, terms = _plan("0.26.0", DENSE)
    assert profile.family is Family.V1_020 and profile.model_runner_v2 and not profile.graphs_deducted
    assert terms.cuda_graph_bytes == 0
    assert terms.usable_bytes == terms.weights_bytes + terms.activation_bytes + terms.other_bytes + terms.kv_cache_bytes
    # the graphs are captured after the KV cache: outside the budget, as before 0.20; so is the sampler state
    pool = cuda_graph_bytes(inputs, 512, max_num_seqs=256, max_num_batched_tokens=8192)
    assert terms.outside_bytes == CUDA_CONTEXT + pool + sampler_state_bytes(256, 128256)
    assert any("Model Runner V2 < 0.29 deducts none" in note for note in terms.notes)
    assert effective.cuda_graph_max_batch_size == 512


def test_forcing_the_v1_runner_restores_the_deduction() -> None:
    spec = InferenceServerSpec.model_validate(
        {
            "model": {"name": "calibration/runner", "weightsPerGPU": "15Gi"},
            "engine": {
                "kind": "vllm",
                "version": "0.26.0",
                "env": [{"name": "VLLM_USE_V2_MODEL_RUNNER", "value": "0"}],
            },
            "gpu": {"count": 1, "product": "NVIDIA-H100-80GB-HBM3"},
            "context": {"target": 4096},
            "memory": {"gpuMemoryUtilization": 0.9},
            "batching": {"maxNumSeqs": 256},
        }
    )
    inputs = resolve_inputs(spec, hf_config=DENSE)
    engine = get_engine(spec.engine.kind)
    effective = engine.default_effective(inputs, kv_cache_dtype="auto").model_copy(update={"context_length": 4096})
    forced = engine.budget(inputs, effective)
    default = _plan("0.26.0", DENSE)[3]
    estimate = estimate_bytes(inputs, 512, max_num_seqs=256, max_num_batched_tokens=8192)
    assert forced.cuda_graph_bytes == estimate > 0
    assert default.kv_cache_bytes - forced.kv_cache_bytes == estimate


def test_moe_models_keep_the_v1_runner_and_its_deduction() -> None:
    _, _, profile, terms = _plan("0.26.0", MOE)
    assert not profile.model_runner_v2 and profile.graphs_deducted
    assert terms.cuda_graph_bytes == profile.cuda_graph_bytes > 0


def test_estimate_architecture_factors() -> None:
    dense = _plan("0.21.0", DENSE)
    moe = _plan("0.21.0", MOE)
    mla = _plan("0.21.0", MLA)
    per_layer_86 = 32 * ESTIMATE_PER_LAYER * 86 / REFERENCE_GRAPHS  # 256 sequences: 51 + 35 graphs
    assert dense[2].cuda_graph_bytes == pytest.approx(ESTIMATE_BASE + per_layer_86, abs=1)
    assert moe[2].cuda_graph_bytes == pytest.approx(ESTIMATE_BASE + ESTIMATE_MOE_FACTOR * per_layer_86, abs=1)
    assert mla[2].cuda_graph_bytes == pytest.approx(ESTIMATE_BASE + ESTIMATE_MLA_FACTOR * per_layer_86, abs=1)


@pytest.mark.parametrize(
    ("version", "seqs", "cc", "archs", "spec_tokens", "expected"),
    [
        ((0, 26, 0), 256, (8, 6), (LLAMA,), 0, 512),  # min(2 x 256, 512): the A40 logs capture up to 512
        ((0, 26, 0), 8, (8, 6), (LLAMA,), 0, 16),
        ((0, 26, 0), 2, (8, 6), (LLAMA,), 3, 16),  # decode_query_len 4: "PIECEWISE=5 (largest=16)"
        ((0, 28, 0), 256, (12, 0), ("GptOssForCausalLM",), 0, 1024),  # GptOssForCausalLMConfig override
        ((0, 19, 0), 1024, (9, 0), ("GptOssForCausalLM",), 0, 1024),  # the sweep's gpt-oss-20b: 83 + 83 graphs
        ((0, 28, 0), 1024, (10, 0), (LLAMA,), 0, 1024),  # data-center Blackwell from 0.28
        ((0, 27, 0), 1024, (10, 0), (LLAMA,), 0, 512),
        ((0, 28, 0), 1024, None, (LLAMA,), 0, 512),
    ],
)
def test_default_capture_size(
    version: tuple[int, int, int],
    seqs: int,
    cc: tuple[int, int] | None,
    archs: tuple[str, ...],
    spec_tokens: int,
    expected: int,
) -> None:
    assert (
        default_capture_size(
            version, seqs, compute_capability=cc, architectures=archs, speculative_tokens=spec_tokens
        )
        == expected
    )


def test_graph_constants_are_the_sweep_fits() -> None:
    """``python bench/graph_fit.py`` on the sweep's printed estimates and captured pools gives the code's constants."""
    assert fit(sweep_rows()) == GraphFit(
        round(ESTIMATE_BASE / GiB, 4), round(ESTIMATE_PER_LAYER / GiB, 4), ESTIMATE_MOE_FACTOR, ESTIMATE_MLA_FACTOR
    )
    assert fit(sweep_rows(POOL_COLUMN)) == GraphFit(
        round(POOL_BASE / GiB, 4), round(POOL_PER_LAYER / GiB, 4), POOL_MOE_FACTOR, POOL_MLA_FACTOR
    )
    assert len(sweep_rows()) == 59


@pytest.mark.parametrize(("version", "deducted"), [("0.28.0", False), ("0.29.0", True), ("0.33.0", True)])
def test_model_runner_v2_deducts_its_captured_pool_from_029(version: str, deducted: bool) -> None:
    """0.29's MRV2 ``profile_cudagraph_memory`` captures the graphs and deducts what they took."""
    inputs, _, profile, terms = _plan(version, DENSE)
    assert profile.model_runner_v2 and profile.graphs_deducted is deducted
    pool = cuda_graph_bytes(inputs, 512, max_num_seqs=256, max_num_batched_tokens=8192)
    assert profile.cuda_graph_bytes == pool
    assert terms.cuda_graph_bytes == (pool if deducted else 0)
    # from 0.27 the sampler state is in vLLM's device-wide total_consumed: inside the budget
    assert terms.outside_bytes == CUDA_CONTEXT + (0 if deducted else pool)


def test_every_model_runs_model_runner_v2_from_029() -> None:
    for config in (MOE, MLA):
        assert _plan("0.29.0", config)[2].model_runner_v2
        assert not _plan("0.28.0", config)[2].model_runner_v2


def test_sampler_state_is_the_penalty_buffers() -> None:
    """``PenaltiesState``: int32 ``[seqs, vocab]`` counts + int32 ``[seqs, ceil(vocab / 32)]`` prompt mask."""
    assert sampler_state_bytes(256, 128256) == 256 * (128256 + 4008) * 4
    assert sampler_state_bytes(1, 33) == (33 + 2) * 4
    with pytest.raises(ValueError, match="positive"):
        sampler_state_bytes(0, 128256)


@pytest.mark.parametrize(("seqs", "version"), [(256, "0.26.0"), (1024, "0.26.0"), (256, "0.25.0")])
def test_model_runner_v2_sampler_state_lies_outside_the_budget_up_to_026(seqs: int, version: str) -> None:
    """Up to 0.26 the buffers are allocated after the memory snapshot and outside the profiled terms: the KV pool
    is unchanged, and what the GPU must hold beyond ``requested`` grows by them."""
    _inputs, _, profile, terms = _plan(version, DENSE, seqs=seqs)
    state = sampler_state_bytes(seqs, 128256)
    assert profile.sampler_state_bytes == state
    graphs_outside = 0 if profile.graphs_deducted else profile.cuda_graph_bytes
    assert terms.outside_bytes == CUDA_CONTEXT + graphs_outside + state
    assert terms.usable_bytes == (
        terms.weights_bytes + terms.activation_bytes + terms.other_bytes + terms.cuda_graph_bytes + terms.kv_cache_bytes
    )
    assert any("sampler state" in note for note in terms.notes)


@pytest.mark.parametrize(("seqs", "version"), [(256, "0.27.0"), (1024, "0.28.0"), (256, "0.29.0"), (256, "0.33.0")])
def test_model_runner_v2_sampler_state_is_in_the_budget_from_027(seqs: int, version: str) -> None:
    """0.27's ``memory_profiling`` budgets ``total_consumed`` (free memory taken since the init snapshot), which
    holds the buffers: the non-torch term grows by them, the KV pool shrinks by them, nothing of them is outside."""
    _inputs, _effective, profile, terms = _plan(version, DENSE, seqs=seqs)
    state = sampler_state_bytes(seqs, 128256)
    assert profile.sampler_state_bytes == state and profile.sampler_state_in_budget
    graphs_outside = 0 if profile.graphs_deducted else profile.cuda_graph_bytes
    assert terms.outside_bytes == CUDA_CONTEXT + graphs_outside
    without = memory.overheads(replace(profile, sampler_state_in_budget=False))
    assert terms.other_bytes == without.non_torch_bytes + state
    assert memory.overheads(profile).kv_pool_bytes(profile) == without.kv_pool_bytes(profile) - state
    assert any("total_consumed" in note for note in terms.notes)


def test_v1_runner_has_no_sampler_state_outside() -> None:
    for _, _, profile, terms in (_plan("0.26.0", MOE), _plan("0.21.0", DENSE), _plan("0.19.0", DENSE)):
        assert not profile.model_runner_v2 and profile.sampler_state_bytes == 0
        assert not any("sampler state" in note for note in terms.notes)
