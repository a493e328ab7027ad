"""The LoRA and speculative-decoding terms of the budget, from the engines' own shapes."""

from __future__ import annotations

from typing import Any

import pytest
from ctxfit.api import GiB, InferenceServerSpec
from ctxfit.budget.planner import plan
from ctxfit.vocab.inputs import PlanInputError

from tests.unit.engines.modelkit import speculative

LLAMA_8B = {"hidden": 4096, "heads": 32, "kv": 8, "head_dim": 128, "inter": 14336, "layers": 32}


def spec(engine: str = "vllm", version: str = "0.20.0", **extra: Any) -> InferenceServerSpec:
    doc: dict[str, Any] = {"model": {"name": "meta-llama/Llama-3.1-8B-Instruct"},
                           "engine": {"kind": engine, "version": version},
                           "gpu": {"count": 1, "product": "NVIDIA-H100-80GB-HBM3"}, "context": {"target": 8192}}
    doc.update(extra)
    return InferenceServerSpec.model_validate(doc)


def lora(*ranks: int, **extra: Any) -> dict[str, Any]:
    return {"adapters": [{"name": f"a{i}", "source": f"org/a{i}", "rank": r} for i, r in enumerate(ranks)], **extra}


def buffers(slots: int, rank: int, tp: int = 1, dims: dict[str, int] = LLAMA_8B) -> int:
    """vLLM ``create_lora_weights`` / SGLang ``LoRAMemoryPool``: A per slice [slots, rank, in(/tp row)], B [slots,
    out(/tp column), rank], bf16, every layer."""
    h, q, kv = dims["hidden"], dims["heads"] * dims["head_dim"], dims["kv"] * dims["head_dim"]
    qkv = 3 * h + (q + 2 * kv) // tp
    o = q // tp + h
    gate_up = 2 * h + 2 * dims["inter"] // tp
    down = dims["inter"] // tp + h
    return slots * rank * 2 * (qkv + o + gate_up + down) * dims["layers"]


def extra(result: Any, label: str) -> int:
    return next(e.bytes for e in result.per_gpu.extras if e.label == label)


@pytest.mark.parametrize(("tp", "product"), [(1, "NVIDIA-H100-80GB-HBM3"), (2, "NVIDIA-H100-80GB-HBM3")])
def test_vllm_lora_buffers_follow_the_layer_shapes(tp: int, product: str) -> None:
    base = plan(spec(gpu={"count": tp, "product": product}, parallelism={"tensor": tp}))
    result = plan(spec(gpu={"count": tp, "product": product}, parallelism={"tensor": tp},
                       lora=lora(16, 64, maxLoras=4)))
    expected = buffers(4, 64, tp) + 32 * 8192  # punica metadata for the 8192-token H100 default
    assert extra(result, "LoRA buffers") == expected
    graphs = result.per_gpu.cuda_graph_bytes - base.per_gpu.cuda_graph_bytes
    assert graphs > 0, "0.12+ captures every graph with and without LoRA (cudagraph_specialize_lora)"
    assert result.per_gpu.kv_cache_bytes == base.per_gpu.kv_cache_bytes - expected - graphs
    assert result.per_gpu.usable_bytes == (result.per_gpu.weights_bytes + result.per_gpu.activation_bytes
                                           + result.per_gpu.cuda_graph_bytes + result.per_gpu.other_bytes
                                           + result.per_gpu.extra_in_budget_bytes + result.per_gpu.kv_cache_bytes)


def test_vllm_before_012_captures_lora_graphs_once() -> None:
    base = plan(spec(version="0.11.0"))
    result = plan(spec(version="0.11.0", lora=lora(16)))
    assert result.per_gpu.cuda_graph_bytes == base.per_gpu.cuda_graph_bytes
    assert result.per_gpu.kv_cache_bytes == base.per_gpu.kv_cache_bytes - extra(result, "LoRA buffers")


def test_lora_host_memory_and_ranks_per_engine() -> None:
    base = plan(spec())
    vllm = plan(spec(lora=lora(24, 12)))
    assert vllm.effective.max_lora_rank == 32, "vLLM takes 8, 16, 32, ...: 24 is rounded up"
    assert "--max-lora-rank" in vllm.engine_args and vllm.engine_args[vllm.engine_args.index("--max-lora-rank") + 1] \
        == "32"
    assert vllm.effective.memory_limit_bytes > base.effective.memory_limit_bytes
    sglang = plan(spec("sglang", "0.5.23", lora=lora(24, 12)))
    assert sglang.effective.max_lora_rank == 24
    assert extra(sglang, "LoRA buffers") == buffers(2, 24)


def test_sglang_buffers_only_for_the_adapters_modules() -> None:
    adapters = {"adapters": [{"name": "a", "source": "org/a", "rank": 8, "targetModules": ["q_proj", "v_proj"]}]}
    sglang = plan(spec("sglang", "0.5.23", lora=adapters))
    h, q, kv = 4096, 4096, 1024
    assert extra(sglang, "LoRA buffers") == 1 * 8 * 2 * (3 * h + q + 2 * kv) * 32
    vllm = plan(spec(lora=adapters))
    assert extra(vllm, "LoRA buffers") == buffers(1, 8) + 32 * 8192, "vLLM wraps every linear module"


def test_rank_and_modules_from_adapter_config() -> None:
    adapters = {"adapters": [{"name": "sql", "source": "org/sql"}]}
    configs = {"sql": {"r": 32, "target_modules": ["q_proj", "k_proj", "v_proj", "o_proj"],
                       "base_model_name_or_path": "meta-llama/Llama-3.1-8B-Instruct"}}
    result = plan(spec("sglang", "0.5.23", lora=adapters), adapter_configs=configs)
    assert result.effective.max_lora_rank == 32
    h = 4096
    assert extra(result, "LoRA buffers") == 1 * 32 * 2 * ((3 * h + 4096 + 2 * 1024) + (4096 + h)) * 32


@pytest.mark.parametrize(("adapters", "configs", "needle"), [
    ({"adapters": [{"name": "big", "source": "org/big", "rank": 128}], "maxLoraRank": 64}, {}, "above"),
    ({"adapters": [{"name": "odd", "source": "org/odd", "rank": 8, "targetModules": ["mlp.fc1"]}]}, {}, "fc1"),
    ({"adapters": [{"name": "other", "source": "org/other"}]},
     {"other": {"r": 8, "base_model_name_or_path": "mistralai/Mistral-7B-v0.1"}}, "Mistral"),
    ({"adapters": [{"name": "norank", "source": "org/norank"}]}, {}, "rank unknown"),
])
def test_mismatched_adapters_are_refused_by_name(adapters: dict[str, Any], configs: dict[str, Any],
                                                 needle: str) -> None:
    with pytest.raises((PlanInputError, ValueError)) as info:
        plan(spec(lora=adapters), adapter_configs=configs)
    name = adapters["adapters"][0]["name"]
    assert name in str(info.value) and needle in str(info.value)


def test_lora_on_an_mla_model_without_its_config_is_refused() -> None:
    """The catalog lacks MLA's low-rank sizes (q_lora_rank, qk_nope_head_dim, v_head_dim): LoRA needs config.json
    (tests/unit/engines/test_lora_layer_types.py plans the same model from it)."""
    with pytest.raises(PlanInputError) as info:
        plan(spec(model={"name": "deepseek-ai/DeepSeek-V3"}, gpu={"count": 8, "product": "NVIDIA-H200"},
                  parallelism={"tensor": 8}, lora=lora(8)))
    assert info.value.field == "spec.lora" and "config.json" in str(info.value)


# --- speculative decoding


def test_vllm_eagle_adds_weights_kv_and_graphs() -> None:
    base = plan(spec())
    eagle = plan(spec(speculative=speculative("eagle")))
    assert extra(eagle, "draft weights") == GiB
    assert eagle.kv_bytes_per_token == base.kv_bytes_per_token + 2 * 8 * 128 * 2, "one EAGLE layer of KV"
    assert eagle.per_gpu.cuda_graph_bytes > base.per_gpu.cuda_graph_bytes, "FULL graphs cover 1 + k tokens"
    assert eagle.per_gpu.kv_cache_bytes < base.per_gpu.kv_cache_bytes - GiB
    assert eagle.effective.num_speculative_tokens == 3


def test_vllm_draft_model_uses_its_own_geometry() -> None:
    base = plan(spec(version="0.20.0"))
    draft = plan(spec(version="0.20.0", speculative=speculative("draft")))
    assert draft.kv_bytes_per_token == base.kv_bytes_per_token + 16 * 2 * 8 * 64 * 2
    assert extra(draft, "draft weights") == 2560 * (1 << 20)


def test_vllm_mtp_loads_the_models_own_layers() -> None:
    h200 = {"model": {"name": "deepseek-ai/DeepSeek-V3"}, "gpu": {"count": 8, "product": "NVIDIA-H200"},
            "parallelism": {"tensor": 8}, "context": {"target": 32768}}
    base = plan(spec(**h200))
    mtp = plan(spec(**h200, speculative={"method": "mtp", "numSpeculativeTokens": 1}))
    assert extra(mtp, "MTP layers") == -(-base.per_gpu.weights_bytes // 61)
    assert mtp.kv_bytes_per_token == base.kv_bytes_per_token + base.kv_bytes_per_token // 61
    assert '"method":"mtp"' in " ".join(mtp.engine_args)


def test_ngram_adds_no_memory_but_larger_graphs() -> None:
    base = plan(spec())
    ngram = plan(spec(speculative=speculative("ngram")))
    assert not ngram.per_gpu.extras
    assert ngram.kv_bytes_per_token == base.kv_bytes_per_token


def test_sglang_before_0514_puts_the_draft_in_the_slack() -> None:
    base = plan(spec("sglang", "0.5.4"))
    eagle = plan(spec("sglang", "0.5.4", speculative=speculative("eagle")))
    assert eagle.kv_bytes_per_token == base.kv_bytes_per_token, "the target pool is sized alone"
    terms = {e.label: e for e in eagle.per_gpu.extras}
    assert not terms["draft weights"].in_budget and not terms["draft KV pool"].in_budget
    assert eagle.per_gpu.outside_bytes >= base.per_gpu.outside_bytes + GiB + terms["draft KV pool"].bytes
    assert eagle.effective.mem_fraction_static is not None and base.effective.mem_fraction_static is not None
    assert eagle.effective.mem_fraction_static < base.effective.mem_fraction_static, "SGLang reserves 2 GiB more"


def test_sglang_from_0514_sizes_the_draft_inside_the_pool() -> None:
    base = plan(spec("sglang", "0.5.23"))
    eagle = plan(spec("sglang", "0.5.23", speculative=speculative("eagle")))
    assert eagle.kv_bytes_per_token == base.kv_bytes_per_token + base.kv_bytes_per_token // 32
    assert extra(eagle, "draft weights") == GiB
    assert eagle.per_gpu.kv_cache_bytes == base.per_gpu.kv_cache_bytes - GiB


def test_speculative_refused_where_the_engine_cannot_run_it() -> None:
    with pytest.raises(PlanInputError) as info:
        plan(spec(version="0.12.0", speculative=speculative("draft")))
    assert info.value.field == "spec.speculative.method" and "0.15.0" in str(info.value)


def test_sglang_start_up_reads_the_draft_pool_separately() -> None:
    """SGLang prints the draft worker's pool after the target's on every rank (``engines/sglang/ranks.py``)."""
    from ctxfit.engines.sglang.startup import parse_startup

    log = "\n".join([
        "[2025-10-01 12:00:00 TP0] KV Cache is allocated. #tokens: 412000, K size: 25.15 GB, V size: 25.15 GB",
        "[2025-10-01 12:00:00 TP1] KV Cache is allocated. #tokens: 412000, K size: 25.15 GB, V size: 25.15 GB",
        "[2025-10-01 12:00:02 TP0] KV Cache is allocated. #tokens: 412100, K size: 0.79 GB, V size: 0.79 GB",
        "[2025-10-01 12:00:02 TP1] KV Cache is allocated. #tokens: 412100, K size: 0.79 GB, V size: 0.79 GB",
        "[2025-10-01 12:00:05 TP0] max_total_num_tokens=412000, chunked_prefill_size=8192, max_prefill_tokens=16384, "
        "max_running_requests=2048, context_len=131072",
    ])
    report = parse_startup(log)
    assert report.kv_cache_tokens == 412000 and report.draft_kv_cache_tokens == 412100
    assert abs((report.draft_kv_cache_bytes or 0) - 1.58 * GiB) < 1e6
