"""LoRA on MoE, MLA and hybrid models: the modules each engine version wraps (read in the wheels) and
refusals where the engine itself would refuse (vLLM classes without SupportsLoRA, SGLang before 0.5.12 on MLA)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from ctxfit.api import InferenceServerSpec
from ctxfit.budget.planner import Plan, plan
from ctxfit.engines.vllm import lora_archs
from ctxfit.vocab.inputs import PlanInputError

CONFIGS = Path(__file__).resolve().parents[2] / "fixtures" / "hub" / "configs"
MODELS = {"deepseek-ai/DeepSeek-V2-Lite": "deepseek-ai--DeepSeek-V2-Lite", "Qwen/Qwen3-30B-A3B": "Qwen--Qwen3-30B-A3B",
          "nvidia/Nemotron-H-56B-Base-8K": "nvidia--Nemotron-H-56B-Base-8K",
          "meta-llama/Llama-3.1-8B": "meta-llama--Llama-3.1-8B"}
PUNICA = 32  # bytes per batched token (engines/extras.PUNICA_BYTES_PER_TOKEN)
TOKENS = 8192


def config(model: str) -> dict[str, Any]:
    return dict(json.loads((CONFIGS / f"{MODELS[model]}.json").read_text()))


def run(model: str, engine: str, version: str, *, slots: int = 2, rank: int = 16, tp: int = 1,
        lora: dict[str, Any] | None = None, hf: dict[str, Any] | None = None) -> Plan:
    doc: dict[str, Any] = {
        "model": {"name": model, "weightsPerGPU": "20Gi"}, "engine": {"kind": engine, "version": version},
        "gpu": {"count": tp, "product": "NVIDIA-H100-80GB-HBM3"}, "parallelism": {"tensor": tp},
        "context": {"target": 4096}, "batching": {"maxNumBatchedTokens": TOKENS},
        "lora": lora or {"adapters": [{"name": "a", "source": "org/a", "rank": rank}], "maxLoras": slots}}
    return plan(InferenceServerSpec.model_validate(doc), hf_config=hf or config(model))


def buffers(result: Plan) -> int:
    return next(e.bytes for e in result.per_gpu.extras if e.label == "LoRA buffers")


def test_vllm_wraps_the_routed_experts_from_012() -> None:
    """Qwen3-30B-A3B (48 MoE layers, 128 experts of 768): vLLM 0.12+ ``FusedMoEWithLoRA`` adds, per layer,
    w1/w3 A ``[slots, experts, rank, hidden]``, B ``[slots, experts, inter, rank]``, w2 A ``[slots, experts, rank,
    inter]``, B ``[slots, experts, hidden, rank]``; 0.11 wraps no expert (``get_supported_lora_modules``: LinearBase
    only)."""
    new, old = run("Qwen/Qwen3-30B-A3B", "vllm", "0.19.0"), run("Qwen/Qwen3-30B-A3B", "vllm", "0.11.0")
    experts = 2 * 128 * 16 * (3 * 2048 + 3 * 768) * 2 * 48
    embeddings = 2 * 2 * 16 * (151936 + 2048) * 2  # Qwen3MoeForCausalLM declares embedding_modules from 0.16
    assert buffers(new) - PUNICA * TOKENS - (buffers(old) - PUNICA * TOKENS) == experts + embeddings
    assert "experts" in next(e.source for e in new.per_gpu.extras if e.label == "LoRA buffers")


def test_expert_parallelism_keeps_whole_experts_per_rank() -> None:
    one = run("Qwen/Qwen3-30B-A3B", "vllm", "0.19.0", tp=2)
    ep = plan(InferenceServerSpec.model_validate({
        "model": {"name": "Qwen/Qwen3-30B-A3B", "weightsPerGPU": "20Gi"},
        "engine": {"kind": "vllm", "version": "0.19.0"},
        "gpu": {"count": 2, "product": "NVIDIA-H100-80GB-HBM3"}, "parallelism": {"tensor": 2, "expert": True},
        "context": {"target": 4096}, "batching": {"maxNumBatchedTokens": TOKENS},
        "lora": {"adapters": [{"name": "a", "source": "org/a", "rank": 16}], "maxLoras": 2}}),
        hf_config=config("Qwen/Qwen3-30B-A3B"))
    # TP splits the intermediate (64 x (2h + 2i/2 + i/2 + h)); EP keeps 64 whole experts (64 x (3h + 3i))
    tp_experts = 2 * 128 * 16 * (3 * 2048 + 3 * 768 // 2) * 2 * 48
    ep_experts = 2 * 64 * 16 * (3 * 2048 + 3 * 768) * 2 * 48
    assert buffers(one) - buffers(ep) == tp_experts - ep_experts


def test_vllm_mla_modules_follow_the_low_rank_shapes() -> None:
    """DeepSeek-V2-Lite (no q_lora_rank): ``--lora-target-modules kv_b_proj o_proj`` (0.19+) leaves exactly
    kv_b_proj (column: kv_lora_rank -> heads x (nope + v)) and o_proj (row: heads x v -> hidden) on 27 layers."""
    lora = {"adapters": [{"name": "a", "source": "org/a", "rank": 16}], "maxLoras": 2,
            "targetModules": ["kv_b_proj", "o_proj"]}
    for tp in (1, 2):
        result = run("deepseek-ai/DeepSeek-V2-Lite", "vllm", "0.19.0", tp=tp, lora=lora)
        heads, kv_rank, nope, v, hidden = 16, 512, 128, 128, 2048
        kv_b = kv_rank + heads * (nope + v) // tp
        o = heads * v // tp + hidden
        assert buffers(result) == 2 * 16 * (kv_b + o) * 2 * 27 + PUNICA * TOKENS


def test_vllm_refuses_lora_where_the_model_class_has_none() -> None:
    """DeepseekV2ForCausalLM is SupportsLoRA from 0.10.2 (read in the wheels); 0.10.0 would raise "does not support
    LoRA yet" after loading the weights."""
    with pytest.raises(PlanInputError) as info:
        run("deepseek-ai/DeepSeek-V2-Lite", "vllm", "0.10.0")
    message = str(info.value)
    assert info.value.field == "spec.lora" and "DeepseekV2ForCausalLM" in message and "0.10.2" in message
    mamba = config("meta-llama/Llama-3.1-8B") | {"architectures": ["MambaForCausalLM"]}
    assert lora_archs.supports_lora("MambaForCausalLM", (0, 19, 0)) is False
    with pytest.raises(PlanInputError, match="MambaForCausalLM"):
        run("meta-llama/Llama-3.1-8B", "vllm", "0.19.0", hf=mamba)
    assert lora_archs.supports_lora("SomeNewForCausalLM", (0, 19, 0)) is None, "unknown classes are not refused"
    run("meta-llama/Llama-3.1-8B", "vllm", "0.19.0", hf=config("meta-llama/Llama-3.1-8B") | {
        "architectures": ["SomeNewForCausalLM"]})


def test_sglang_mla_lora_needs_0512() -> None:
    with pytest.raises(PlanInputError, match="MLA") as info:
        run("deepseek-ai/DeepSeek-V2-Lite", "sglang", "0.5.9")
    assert info.value.field == "spec.lora"
    result = run("deepseek-ai/DeepSeek-V2-Lite", "sglang", "0.5.23")
    assert buffers(result) > 0


def test_sglang_experts_only_from_0510() -> None:
    new, old = run("Qwen/Qwen3-30B-A3B", "sglang", "0.5.10"), run("Qwen/Qwen3-30B-A3B", "sglang", "0.5.9")
    assert buffers(new) - buffers(old) == 2 * 128 * 16 * (3 * 2048 + 3 * 768) * 2 * 48


def test_hybrid_mixer_modules_sit_on_their_layers() -> None:
    """Nemotron-H-56B: Mamba-2 in_proj / out_proj on the M layers, qkv / o on the attention layers, the MLP on the
    '-' layers (hybrid_override_pattern); ``--lora-target-modules in_proj`` leaves the mixer's in_proj alone."""
    hf = config("nvidia/Nemotron-H-56B-Base-8K")
    pattern = hf["hybrid_override_pattern"]
    mamba_layers = pattern.count("M")
    heads, head_dim, groups, state = hf["mamba_num_heads"], hf["mamba_head_dim"], hf["n_groups"], hf["ssm_state_size"]
    width = 2 * heads * head_dim + 2 * groups * state + heads
    result = run("nvidia/Nemotron-H-56B-Base-8K", "vllm", "0.19.0",
                 lora={"adapters": [{"name": "a", "source": "org/a", "rank": 8}], "maxLoras": 1,
                       "targetModules": ["in_proj"]})
    assert buffers(result) == 8 * (hf["hidden_size"] + width) * 2 * mamba_layers + PUNICA * TOKENS
