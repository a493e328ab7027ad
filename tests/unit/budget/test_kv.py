"""KV bytes per token per GPU: the worked numbers of docs/engine-memory.md A.2 and the issue's acceptance."""

from __future__ import annotations

import pytest
from ctxfit.api import Architecture
from ctxfit.budget.kv import indexer_bytes_per_layer, kv_bytes_per_token, kv_dtype_bytes, kv_layout
from ctxfit.catalog import lookup_model


def arch(name: str) -> Architecture:
    entry = lookup_model(name)
    assert entry is not None
    return entry.architecture


@pytest.mark.parametrize(
    ("model", "tp", "dtype", "expected"),
    [
        ("meta-llama/Llama-3.1-8B-Instruct", 1, "auto", 131_072),
        ("meta-llama/Llama-3.1-8B-Instruct", 1, "fp8", 65_536),
        ("meta-llama/Llama-3.1-8B-Instruct", 4, "auto", 32_768),
        ("meta-llama/Llama-3.1-8B-Instruct", 8, "auto", 16_384),
        ("meta-llama/Llama-3.1-70B-Instruct", 1, "auto", 327_680),
        ("meta-llama/Llama-3.1-70B-Instruct", 8, "auto", 40_960),
        ("Qwen/Qwen3-32B", 1, "auto", 262_144),
        ("Qwen/Qwen3-32B", 8, "auto", 32_768),
        ("Qwen/Qwen3-235B-A22B", 1, "auto", 192_512),
        ("Qwen/Qwen3-235B-A22B", 4, "auto", 48_128),
        ("Qwen/Qwen3-235B-A22B", 8, "auto", 48_128),  # 4 KV heads replicated past TP 4
        ("zai-org/GLM-4.6", 1, "auto", 376_832),
        ("zai-org/GLM-4.6", 8, "auto", 47_104),
        ("moonshotai/Kimi-K2.5", 8, "auto", 70_272),
        ("moonshotai/Kimi-K2.5", 8, "fp8", 35_136),
        ("moonshotai/Kimi-K2.5", 1, "auto", 70_272),  # MLA is not divided by TP
        ("deepseek-ai/DeepSeek-V3", 8, "auto", 70_272),
        ("deepseek-ai/DeepSeek-V3.2-Exp", 8, "auto", 78_324),
        ("deepseek-ai/DeepSeek-V3.2-Exp", 8, "fp8_ds_mla", 48_068),
        ("zai-org/GLM-5", 8, "auto", 100_152),
        ("zai-org/GLM-5", 8, "fp8_ds_mla", 61_464),
    ],
    ids=lambda v: str(v),
)
def test_worked_numbers(model: str, tp: int, dtype: str, expected: int) -> None:
    assert kv_bytes_per_token(arch(model), tensor_parallel=tp, kv_cache_dtype=dtype) == expected


def test_glm5_field_report_division_by_tp_is_not_inherited() -> None:
    # docs/field-reports.md deployment 2: 576 x 2 x 78 / 8 = 11,232 is wrong; MLA is replicated.
    value = kv_bytes_per_token(arch("zai-org/GLM-5"), tensor_parallel=8)
    assert value != 11_232
    assert value == 78 * (576 * 2 + 132)


def test_indexer_bytes() -> None:
    assert indexer_bytes_per_layer(128) == 132


def test_pipeline_parallel_splits_layers() -> None:
    a = arch("meta-llama/Llama-3.1-8B-Instruct")
    assert kv_bytes_per_token(a, pipeline_parallel=2) == 131_072 // 2
    assert kv_bytes_per_token(a, pipeline_parallel=3) == 11 * 4096  # busiest stage holds ceil(32/3)


def test_sliding_window_layers_are_bounded() -> None:
    a = arch("openai/gpt-oss-120b")
    layout = kv_layout(a)
    assert layout.full_bytes_per_token == 18 * 2 * 8 * 64 * 2
    assert layout.sliding_bytes_per_token == layout.full_bytes_per_token
    short = layout.request_bytes(131072, block_size=16, in_flight_tokens=16384)
    # sliding layers keep cdiv(127 + 16384, 16) + 1 blocks, not the whole context
    assert short == 131072 * 18 * 2048 + (-(-16511 // 16) + 1) * 16 * 18 * 2048


def test_measured_override() -> None:
    a = Architecture.model_validate({"kvBytesPerToken": 3800})
    assert kv_bytes_per_token(a, tensor_parallel=4) == 3800


def test_unknown_dtype_raises() -> None:
    with pytest.raises(ValueError, match="kvCacheDtype"):
        kv_dtype_bytes("int3")


def test_ds_mla_on_gqa_raises() -> None:
    with pytest.raises(ValueError, match="MLA"):
        kv_layout(arch("Qwen/Qwen3-32B"), kv_cache_dtype="fp8_ds_mla")


def test_max_context_inverse_of_request_bytes() -> None:
    layout = kv_layout(arch("moonshotai/Kimi-K2.5"))
    pool = 11_700 * 2**20
    best = layout.max_context_for(pool, block_size=16)
    assert layout.request_bytes(best, block_size=16) <= pool < layout.request_bytes(best + 16, block_size=16)
