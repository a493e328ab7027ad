"""Hybrid (Mamba / Gated DeltaNet) models: config.json reading, state bytes, the max-num-seqs cap."""

from __future__ import annotations

from typing import Any

import pytest
from ctxfit.api import EngineKind, InferenceServerSpec
from ctxfit.budget.hybrid import (
    max_sequences,
    split_pool,
    state_bytes_per_layer,
    state_bytes_per_sequence,
)
from ctxfit.budget.planner import plan
from ctxfit.catalog import lookup_model
from ctxfit.catalog.hybrid import HybridState
from ctxfit.engines.sglang import MAMBA_FULL_MEMORY_RATIO as SGLANG_MAMBA_FULL_MEMORY_RATIO
from ctxfit.vocab.hfconfig import architecture_from_hf_config
from ctxfit.vocab.hybridconfig import hybrid_from_hf_config
from ctxfit.vocab.inputs import resolve_inputs
from hypothesis import given, settings
from hypothesis import strategies as st

# config.json fields of the published checkpoints (relevant fields only; sources in catalog/models.yaml)
QWEN3_NEXT: dict[str, Any] = {
    "model_type": "qwen3_next", "hidden_size": 2048, "num_hidden_layers": 48, "num_attention_heads": 16,
    "num_key_value_heads": 2, "head_dim": 256, "full_attention_interval": 4, "linear_conv_kernel_dim": 4,
    "linear_key_head_dim": 128, "linear_value_head_dim": 128, "linear_num_key_heads": 16,
    "linear_num_value_heads": 32, "num_experts": 512, "num_experts_per_tok": 10, "moe_intermediate_size": 512,
    "shared_expert_intermediate_size": 512, "vocab_size": 151936, "max_position_embeddings": 262144,
}
JAMBA: dict[str, Any] = {
    "model_type": "jamba", "hidden_size": 4096, "intermediate_size": 14336, "num_hidden_layers": 32,
    "num_attention_heads": 32, "num_key_value_heads": 8, "attn_layer_offset": 4, "attn_layer_period": 8,
    "mamba_d_conv": 4, "mamba_d_state": 16, "mamba_expand": 2, "num_experts": 16, "num_experts_per_tok": 2,
    "vocab_size": 65536, "max_position_embeddings": 262144,
}
NEMOTRON_H: dict[str, Any] = {
    "model_type": "nemotron_h", "hybrid_override_pattern": "M-M-M-M*-M-M-M-M-M*-M-M-M-M-M*-M-M-M-M-M*-M-M-M-M-M-",
    "hidden_size": 4096, "num_hidden_layers": 52, "num_attention_heads": 32, "num_key_value_heads": 8,
    "ssm_state_size": 128, "mamba_num_heads": 128, "mamba_head_dim": 64, "n_groups": 8, "conv_kernel": 4,
    "expand": 2, "vocab_size": 131072, "max_position_embeddings": 8192,
}
GRANITE_TINY: dict[str, Any] = {  # granitemoehybrid layout (layer_types mamba/attention)
    "model_type": "granitemoehybrid", "hidden_size": 512, "num_hidden_layers": 8, "num_attention_heads": 8,
    "num_key_value_heads": 8, "layer_types": ["mamba", "mamba", "mamba", "attention"] * 2, "mamba_d_conv": 4,
    "mamba_d_head": 128, "mamba_d_state": 128, "mamba_n_groups": 1, "mamba_n_heads": 8, "vocab_size": 49152,
}


@pytest.mark.parametrize(
    ("config", "kind", "attention_layers", "state_layers", "layer_bytes_tp1"),
    [
        # conv (2*16*128 + 32*128) * 3 * 2 B + ssm 32*128*128 * 2 B
        (QWEN3_NEXT, "gated_deltanet", 12, 36, 8192 * 3 * 2 + 32 * 128 * 128 * 2),
        # d_inner 8192: conv 8192 * 3 * 2 B + ssm 8192 * 16 * 2 B
        (JAMBA, "mamba1", 4, 28, 8192 * 3 * 2 + 8192 * 16 * 2),
        # conv (128*64 + 2*8*128) * 3 * 2 B + ssm 128*64*128 * 2 B
        (NEMOTRON_H, "mamba2", 4, 24, 10240 * 3 * 2 + 128 * 64 * 128 * 2),
        (GRANITE_TINY, "mamba2", 2, 6, (1024 + 2 * 128) * 3 * 2 + 8 * 128 * 128 * 2),
    ],
    ids=["qwen3-next", "jamba", "nemotron-h", "granite-h"],
)
def test_hf_config_reads_hybrid_layers_and_state(
    config: dict[str, Any], kind: str, attention_layers: int, state_layers: int, layer_bytes_tp1: int
) -> None:
    state = hybrid_from_hf_config(config)
    assert state is not None and state.kind == kind and state.state_layers == state_layers
    assert state_bytes_per_layer(state) == layer_bytes_tp1
    arch = architecture_from_hf_config(config)
    assert arch.num_layers == attention_layers  # the KV cache counts only the attention layers
    assert arch.num_attention_heads == config["num_attention_heads"]


def test_dense_config_is_not_hybrid() -> None:
    assert hybrid_from_hf_config({"num_hidden_layers": 32, "num_attention_heads": 32}) is None


def test_fp32_ssm_state_doubles_the_ssm_part() -> None:
    state = hybrid_from_hf_config({**QWEN3_NEXT, "mamba_ssm_dtype": "float32"})
    assert state is not None and state_bytes_per_layer(state) == 8192 * 3 * 2 + 32 * 128 * 128 * 4


def test_tp_and_pp_shard_the_state() -> None:
    state = hybrid_from_hf_config(QWEN3_NEXT)
    assert state is not None
    assert state_bytes_per_sequence(state, tp=4) == 36 * (2048 * 3 * 2 + 8 * 128 * 128 * 2)
    assert state_bytes_per_sequence(state, tp=1, pp=4) == 9 * state_bytes_per_layer(state)
    one_group = HybridState(kind="mamba2", state_layers=4, total_layers=8, conv_kernel=4, state_size=128,
                            num_heads=8, head_dim=128, n_groups=1)
    # vLLM extra_groups_for_head_shards: 1 group padded to TP 4 -> conv (1024 + 2*4*128) / 4
    assert state_bytes_per_layer(one_group, tp=4) == (1024 + 1024) // 4 * 3 * 2 + 2 * 128 * 128 * 2


def test_catalog_has_hybrid_models_matching_their_configs() -> None:
    for name, config in [("Qwen/Qwen3-Next-80B-A3B-Instruct", QWEN3_NEXT), ("ai21labs/AI21-Jamba-1.5-Mini", JAMBA),
                         ("nvidia/Nemotron-H-8B-Base-8K", NEMOTRON_H)]:
        entry = lookup_model(name)
        assert entry is not None and entry.hybrid == hybrid_from_hf_config(config), name
        assert entry.architecture.num_layers == architecture_from_hf_config(config).num_layers


def test_sglang_splits_the_pool_by_the_mamba_ratio() -> None:
    split = split_pool(EngineKind.SGLANG, 19 * 2**30, 10 * 2**20)
    assert split.state_pool_bytes == int(19 * 2**30 * SGLANG_MAMBA_FULL_MEMORY_RATIO / 1.9)
    assert split.kv_pool_bytes + split.state_pool_bytes == 19 * 2**30
    assert max_sequences(split, one_request_bytes=0) == split.state_pool_bytes // (10 * 2**20)
    shared = split_pool(EngineKind.VLLM, 19 * 2**30, 10 * 2**20)
    assert shared.state_pool_bytes == 0 and shared.kv_pool_bytes == 19 * 2**30


def spec(name: str, engine: str, product: str, tp: int, **extra: Any) -> InferenceServerSpec:
    data: dict[str, Any] = {"model": {"name": name}, "engine": {"kind": engine},
                            "gpu": {"count": tp, "product": product}, "parallelism": {"tensor": tp}}
    data.update(extra)
    return InferenceServerSpec.model_validate(data)


def test_planner_caps_max_num_seqs_before_the_first_start() -> None:
    result = plan(spec("nvidia/Nemotron-H-8B-Base-8K", "vllm", "NVIDIA-L4", 1))
    assert result.fits
    assert result.effective.max_num_seqs < 256  # vLLM's default on this GPU
    assert any("max-num-seqs 256 ->" in r and "mamba2 state" in r for r in result.reasons)
    user = plan(spec("nvidia/Nemotron-H-8B-Base-8K", "vllm", "NVIDIA-L4", 1, batching={"maxNumSeqs": 1000}))
    assert user.fits and user.effective.max_num_seqs <= result.effective.max_num_seqs


MODELS = st.sampled_from(["Qwen/Qwen3-Next-80B-A3B-Instruct", "ai21labs/AI21-Jamba-1.5-Mini",
                          "nvidia/Nemotron-H-8B-Base-8K"])
GPUS = st.sampled_from(["NVIDIA-H100-80GB-HBM3", "NVIDIA-H200", "NVIDIA-B200", "NVIDIA-L40S", "NVIDIA-A100-SXM4-80GB"])


@settings(max_examples=40, deadline=None)
@given(MODELS, GPUS, st.sampled_from([1, 2, 4, 8]), st.sampled_from(["vllm", "sglang"]),
       st.sampled_from([4096, 8192, 32768, 131072]))
def test_property_state_of_every_sequence_fits_next_to_one_request(
    model: str, product: str, tp: int, engine: str, target: int
) -> None:
    s = spec(model, engine, product, tp, context={"target": target, "minimum": 1024})
    result = plan(s)
    if not result.fits:
        return
    inputs = resolve_inputs(s)
    assert inputs.hybrid is not None
    per_seq = state_bytes_per_sequence(inputs.hybrid, tp=tp)
    one = result.context_length * result.kv_bytes_per_token
    state = result.effective.max_num_seqs * per_seq
    if engine == "vllm":
        assert state + one <= result.per_gpu.kv_cache_bytes
    else:
        assert state <= result.per_gpu.kv_cache_bytes * SGLANG_MAMBA_FULL_MEMORY_RATIO / 1.9 + per_seq


def test_a_hybrid_config_json_is_planned_like_the_catalog_entry() -> None:
    s = spec("acme/jamba-copy", "vllm", "NVIDIA-H100-80GB-HBM3", 2, model={"name": "acme/jamba-copy",
                                                                          "weightsPerGPU": "48Gi"})
    from_config = plan(s, hf_config=JAMBA)
    catalog = plan(spec("ai21labs/AI21-Jamba-1.5-Mini", "vllm", "NVIDIA-H100-80GB-HBM3", 2,
                        model={"name": "ai21labs/AI21-Jamba-1.5-Mini", "weightsPerGPU": "48Gi"}))
    assert from_config.kv_bytes_per_token == catalog.kv_bytes_per_token == 4 * 2 * 4 * 128 * 2
    assert from_config.effective.max_num_seqs == catalog.effective.max_num_seqs
