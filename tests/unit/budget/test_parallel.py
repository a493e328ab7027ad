"""Parallelism the engines cannot split is refused before any start, naming the sizes that would work."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml
from ctxfit.api import InferenceServerSpec
from ctxfit.budget.parallel import Rule, Split, dividing_tp_sizes, parallelism_problems, rules
from ctxfit.budget.planner import plan
from ctxfit.vocab.inputs import resolve_inputs
from hypothesis import given, settings
from hypothesis import strategies as st

ROOT = Path(__file__).resolve().parents[3]


def spec(name: str = "meta-llama/Llama-3.1-8B-Instruct", *, engine: str = "vllm", tp: int = 1, pp: int = 1,
         product: str = "NVIDIA-H100-80GB-HBM3", **extra: Any) -> InferenceServerSpec:
    data: dict[str, Any] = {
        "model": {"name": name},
        "engine": {"kind": engine},
        "gpu": {"count": tp * pp, "product": product},
        "parallelism": {"tensor": tp, "pipeline": pp},
        "context": {"target": 8192},
    }
    for key, value in extra.items():
        data[key] = value
    return InferenceServerSpec.model_validate(data)


def custom(heads: int, kv_heads: int, *, tp: int, pp: int = 1, layers: int = 32, vocab: int | None = None,
           engine: str = "vllm") -> InferenceServerSpec:
    arch = {"attention": "gqa", "numLayers": layers, "numKVHeads": kv_heads, "headDim": 128,
            "numAttentionHeads": heads}
    return spec("acme/custom", engine=engine, tp=tp, pp=pp,
                model={"name": "acme/custom", "architecture": arch, "weightsPerGPU": "1Gi"})


@pytest.mark.parametrize(
    ("heads", "kv", "tp", "ok"),
    [
        (32, 8, 8, True),     # KV heads split 1 per rank
        (32, 8, 16, True),    # TP 16 is a multiple of 8 KV heads: each KV head replicated twice
        (32, 8, 4, True),
        (32, 8, 3, False),    # 32 heads do not split in 3
        (64, 8, 32, True),    # replication 4x
        (24, 8, 12, False),   # 12 divides 24 heads, but is not a multiple of 8 KV heads
        (48, 6, 4, False),    # 4 divides 48 heads but neither divides nor is a multiple of 6 KV heads
        (48, 6, 12, True),    # 12 is a multiple of 6 KV heads
        (40, 40, 8, True),    # MHA
        (28, 4, 8, False),    # 28 heads (Qwen2.5-7B) do not split in 8
    ],
)
def test_head_rules_follow_qkv_parallel_linear(heads: int, kv: int, tp: int, ok: bool) -> None:
    problems = parallelism_problems(resolve_inputs(custom(heads, kv, tp=tp)))
    assert (not problems) is ok, problems


def test_vocabulary_is_padded_to_64_before_it_is_split() -> None:
    inputs = resolve_inputs(spec(tp=1))
    assert inputs.vocab_size == 128256
    assert 3 not in dividing_tp_sizes(inputs)  # 128256 is a multiple of 64 but not of 3 ...
    qwen = resolve_inputs(spec("Qwen/Qwen3-8B", tp=1))
    assert qwen.vocab_size == 151936
    assert all(151936 % t == 0 for t in dividing_tp_sizes(qwen))


def test_sglang_expert_parallelism_needs_experts_divisible_by_tp() -> None:
    # gpt-oss-120b: 128 experts, 64 heads, 8 KV heads, vocab 201088 = 3142 x 64
    assert not parallelism_problems(resolve_inputs(spec("openai/gpt-oss-120b", engine="sglang", tp=8,
                                                        parallelism={"tensor": 8, "expert": True})))
    config = {"num_hidden_layers": 24, "num_attention_heads": 16, "num_key_value_heads": 16, "head_dim": 128,
              "vocab_size": 151936, "num_experts": 60, "num_experts_per_tok": 4, "moe_intermediate_size": 1408}

    def problems(engine: str, expert: bool) -> list[str]:
        s = spec("acme/moe-60", engine=engine, tp=8, parallelism={"tensor": 8, "expert": expert},
                 model={"name": "acme/moe-60", "weightsPerGPU": "4Gi"})
        return parallelism_problems(resolve_inputs(s, hf_config=config))

    assert any("routed experts (60)" in p and "1, 2, 4" in p for p in problems("sglang", True))
    assert not problems("vllm", True)  # vLLM spreads the 4 remaining experts over the first ranks
    assert not problems("sglang", False)  # without EP the expert intermediate 1408 = 8 x 176 is split


def test_pipeline_does_not_need_divisible_layers_but_needs_a_layer_per_stage() -> None:
    assert not parallelism_problems(resolve_inputs(custom(32, 8, tp=1, pp=3, layers=32)))  # 11/11/10
    problems = parallelism_problems(resolve_inputs(custom(32, 8, tp=1, pp=8, layers=4)))
    assert problems and "parallelism.pipeline 8" in problems[0] and "up to 4" in problems[0]


def test_hybrid_state_heads_are_split_by_tp() -> None:
    # Qwen3-Next: 16 query heads, 2 KV heads, 32 linear-attention value heads
    assert not parallelism_problems(resolve_inputs(spec("Qwen/Qwen3-Next-80B-A3B-Instruct", tp=4)))
    sizes = dividing_tp_sizes(resolve_inputs(spec("Qwen/Qwen3-Next-80B-A3B-Instruct", tp=1)))
    assert sizes == [1, 2, 4, 8, 16]


def test_mamba2_groups_divide_or_are_one() -> None:
    # Nemotron-H-8B: 128 Mamba heads, 8 groups -> TP 16 splits the heads but not the 8 groups
    problems = parallelism_problems(resolve_inputs(spec("nvidia/Nemotron-H-8B-Base-8K", tp=16)))
    assert any("Mamba groups (8)" in p for p in problems)
    assert not parallelism_problems(resolve_inputs(spec("nvidia/Nemotron-H-8B-Base-8K", tp=8)))


def test_refused_plan_is_a_verdict_with_the_sizes_that_divide() -> None:
    result = plan(spec(tp=3))
    assert not result.fits and not result.target_fits and result.context_length == 0
    text = " ".join(result.reasons)
    assert "parallelism.tensor 3" in text and "1, 2, 4, 8, 16, 32" in text
    assert result.kv_bytes_per_token > 0 and result.per_gpu.total_bytes > 0
    assert "tensor 1 x pipeline 3" in text  # a layout the model can split on the same 3 GPUs


def test_cli_exits_3_with_the_plan_for_a_layout_that_cannot_split(tmp_path: Path) -> None:
    doc = yaml.safe_load((ROOT / "manifests" / "kimi-128k.yaml").read_text())
    doc["spec"]["model"] = {"name": "meta-llama/Llama-3.1-8B-Instruct"}
    doc["spec"]["gpu"]["count"] = 6
    doc["spec"]["parallelism"] = {"tensor": 6}
    doc["spec"].pop("memory", None)
    path = tmp_path / "tp6.yaml"
    path.write_text(yaml.safe_dump(doc))
    out = subprocess.run([sys.executable, "-m", "ctxfit.cli", "plan", "-f", str(path), "-o", "json"],
                         capture_output=True, text=True, check=False)
    assert out.returncode == 3, out.stderr
    result = json.loads(out.stdout)
    assert result["fits"] is False and result["targetFits"] is False
    assert result["kvBytesPerToken"] > 0 and result["perGPU"]["totalBytes"] > 0
    assert any("parallelism.tensor 6" in r for r in result["reasons"])


@pytest.mark.parametrize("split", list(Split))
def test_a_rule_decides_by_its_split_never_by_its_wording(split: Split) -> None:
    # the sentence a rule prints may change (or name another part) without changing what it allows
    axis = "pp" if split is Split.STAGES else "tp"
    words = ["KV heads (8)", "Mamba groups (8)", "vocabulary (8)", "layers (8)", "attention heads (8)", "x"]
    for count in (1, 6, 8, 100):
        expected = [n for n in range(1, 65) if Rule(words[0], count, axis, split).ok(n)]
        for what in words[1:]:
            assert [n for n in range(1, 65) if Rule(what, count, axis, split).ok(n)] == expected, (split, what)


def test_each_split_is_the_engines_rule() -> None:
    assert [n for n in range(1, 17) if Rule("", 4, "tp", Split.REPLICATE).ok(n)] == [1, 2, 4, 8, 12, 16]
    assert [n for n in range(1, 9) if Rule("", 1, "tp", Split.ONE_OR_DIVIDE).ok(n)] == list(range(1, 9))
    assert [n for n in range(1, 9) if Rule("", 6, "tp", Split.ONE_OR_DIVIDE).ok(n)] == [1, 2, 3, 6]
    assert [n for n in range(1, 9) if Rule("", 100, "tp", Split.PADDED).ok(n)] == [1, 2, 4, 8]  # 128
    assert [n for n in range(1, 9) if Rule("", 100, "tp", Split.DIVIDE).ok(n)] == [1, 2, 4, 5]
    assert [n for n in range(1, 9) if Rule("", 5, "pp", Split.STAGES).ok(n)] == [1, 2, 3, 4, 5]


def test_the_model_rules_carry_their_split() -> None:
    inputs = _inputs(8, 4, 32, 1000, 1, 1)
    split = {r.what.split(" (")[0]: r.split for r in rules(inputs)}
    assert split == {"attention heads": Split.DIVIDE, "KV heads": Split.REPLICATE, "vocabulary": Split.PADDED,
                     "layers": Split.STAGES}
    groups = [r for r in rules(resolve_inputs(spec("nvidia/Nemotron-H-8B-Base-8K"))) if r.split is Split.ONE_OR_DIVIDE]
    assert [r.count for r in groups] == [8]


LAYOUT = st.tuples(
    st.sampled_from([1, 2, 4, 8, 16]),          # KV heads
    st.sampled_from([1, 2, 3, 4, 5, 6, 8]),     # query heads per KV head
    st.integers(min_value=1, max_value=96),     # layers
    st.integers(min_value=1000, max_value=300_000),  # vocabulary
)


def _inputs(kv: int, group: int, layers: int, vocab: int, tp: int, pp: int) -> Any:
    arch = {"attention": "gqa", "numLayers": layers, "numKVHeads": kv, "headDim": 128,
            "numAttentionHeads": kv * group}
    s = spec("acme/custom", tp=tp, pp=pp, model={"name": "acme/custom", "architecture": arch, "weightsPerGPU": "1Gi"})
    return resolve_inputs(s, hf_config={"num_hidden_layers": layers, "num_attention_heads": kv * group,
                                        "num_key_value_heads": kv, "head_dim": 128, "vocab_size": vocab})


@settings(max_examples=150, deadline=None)
@given(LAYOUT, st.integers(min_value=1, max_value=64), st.integers(min_value=1, max_value=8))
def test_property_refused_iff_a_rule_breaks_and_suggested_sizes_pass(
    layout: tuple[int, int, int, int], tp: int, pp: int
) -> None:
    kv, group, layers, vocab = layout
    if tp * pp > 64:
        tp = max(1, 64 // pp)
    inputs = _inputs(kv, group, layers, vocab, tp, pp)
    heads = kv * group
    padded = -(-vocab // 64) * 64
    kv_ok = kv % tp == 0 if tp < kv else tp % kv == 0
    divisible = heads % tp == 0 and kv_ok and padded % tp == 0 and pp <= layers
    problems = parallelism_problems(inputs)
    assert (not problems) is divisible
    for size in dividing_tp_sizes(inputs):  # every size the message names passes on its own
        assert not [p for p in parallelism_problems(_inputs(kv, group, max(layers, pp), vocab, size, 1))
                    if "tensor" in p]
    if problems and any("parallelism.tensor" in p for p in problems):
        assert "1" in problems[0]  # TP 1 always divides, so the list is never empty
