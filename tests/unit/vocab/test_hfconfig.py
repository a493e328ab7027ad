"""config.json -> Architecture mapping (vLLM's field precedence and rope rules)."""

from __future__ import annotations

import pytest
from ctxfit.api import AttentionKind
from ctxfit.vocab.hfconfig import architecture_from_hf_config, derived_max_model_len
from ctxfit.vocab.inputs import moe_from_hf_config

KIMI_K25 = {
    "model_type": "kimi_k25",
    "text_config": {
        "model_type": "kimi_k2",
        "num_hidden_layers": 61,
        "num_attention_heads": 64,
        "num_key_value_heads": 64,
        "kv_lora_rank": 512,
        "qk_rope_head_dim": 64,
        "max_position_embeddings": 262144,
        "hidden_size": 7168,
        "n_routed_experts": 384,
        "num_experts_per_tok": 8,
        "moe_intermediate_size": 2048,
        "vocab_size": 163840,
        "rope_scaling": {"type": "yarn", "factor": 64.0, "original_max_position_embeddings": 4096},
    },
}
GLM5 = {
    "model_type": "glm_moe_dsa",
    "num_hidden_layers": 78,
    "num_attention_heads": 64,
    "num_key_value_heads": 64,
    "kv_lora_rank": 512,
    "qk_rope_head_dim": 64,
    "index_head_dim": 128,
    "index_topk": 2048,
    "max_position_embeddings": 202752,
}
GPT_OSS = {
    "num_hidden_layers": 4,
    "num_attention_heads": 64,
    "num_key_value_heads": 8,
    "head_dim": 64,
    "sliding_window": 128,
    "layer_types": ["sliding_attention", "full_attention"] * 2,
    "max_position_embeddings": 131072,
    "rope_scaling": {"rope_type": "yarn", "factor": 32.0},
}


def test_kimi_text_config_mla() -> None:
    a = architecture_from_hf_config(KIMI_K25)
    assert a.attention is AttentionKind.MLA and a.num_layers == 61
    assert (a.kv_lora_rank, a.qk_rope_head_dim, a.max_position_embeddings) == (512, 64, 262144)
    moe = moe_from_hf_config(KIMI_K25["text_config"])
    assert moe is not None and (moe.experts, moe.top_k, moe.intermediate_size) == (384, 8, 2048)


def test_glm5_indexer() -> None:
    a = architecture_from_hf_config(GLM5)
    assert a.index_head_dim == 128


def test_sliding_layers() -> None:
    a = architecture_from_hf_config(GPT_OSS)
    assert (a.sliding_window, a.head_dim) == (128, 64)
    assert a.layer_types is not None and a.layer_types.count("sliding_attention") == 2
    assert a.max_position_embeddings == 131072  # yarn is treated as already scaled


def test_head_dim_from_hidden_size() -> None:
    a = architecture_from_hf_config(
        {"num_hidden_layers": 2, "num_attention_heads": 32, "num_key_value_heads": 32, "hidden_size": 4096}
    )
    assert a.attention is AttentionKind.MHA and a.head_dim == 128


@pytest.mark.parametrize(
    ("config", "expected"),
    [
        ({"max_position_embeddings": 4096, "rope_scaling": {"type": "linear", "factor": 4.0}}, 16384),
        ({"max_position_embeddings": 131072, "rope_scaling": {"rope_type": "llama3", "factor": 8.0}}, 131072),
        ({"max_position_embeddings": 32768, "seq_length": 8192}, 8192),
        ({}, None),
    ],
    ids=["linear-scaled", "llama3-prescaled", "min-of-fields", "none"],
)
def test_derived_max(config: dict[str, object], expected: int | None) -> None:
    assert derived_max_model_len(config) == expected


def test_missing_layers_raises() -> None:
    with pytest.raises(ValueError, match="num_hidden_layers"):
        architecture_from_hf_config({"hidden_size": 1})


def test_mistral_style_window_applies_to_every_layer() -> None:
    a = architecture_from_hf_config(
        {
            "num_hidden_layers": 32,
            "num_attention_heads": 32,
            "num_key_value_heads": 8,
            "head_dim": 128,
            "sliding_window": 4096,
        }
    )
    assert (a.sliding_window, a.num_sliding_layers) == (4096, 32)


def test_qwen_style_disabled_window_is_ignored() -> None:
    a = architecture_from_hf_config(
        {
            "num_hidden_layers": 4,
            "num_attention_heads": 8,
            "num_key_value_heads": 2,
            "head_dim": 64,
            "sliding_window": 4096,
            "use_sliding_window": False,
        }
    )
    assert a.sliding_window is None


@pytest.mark.parametrize(
    ("config", "needle"),
    [
        ({"num_hidden_layers": True, "num_attention_heads": 8, "head_dim": 64}, "num_hidden_layers"),
        ({"num_hidden_layers": 2, "num_attention_heads": 8, "head_dim": 128.5}, "head_dim"),
        ({"num_hidden_layers": 2, "kv_lora_rank": 512}, "qk_rope_head_dim"),
        ({"num_hidden_layers": 2, "num_attention_heads": 0, "hidden_size": 4096}, "num_attention_heads .* got 0"),
        ({"num_hidden_layers": 2, "num_attention_heads": 32, "num_key_value_heads": 0, "head_dim": 128},
         "num_key_value_heads .* got 0"),
        ({"num_hidden_layers": 2, "num_attention_heads": 0, "num_key_value_heads": 8, "head_dim": 128},
         "num_attention_heads .* got 0"),
        ({"num_hidden_layers": 2, "num_attention_heads": 32, "hidden_size": -1}, "^hidden_size .* got -1$"),
        ({"num_hidden_layers": 2, "num_attention_heads": 32, "hidden_size": 0}, "^hidden_size .* got 0$"),
        ({"num_hidden_layers": 2, "num_attention_heads": 32, "hidden_size": 16},
         "^hidden_size 16 is smaller than num_attention_heads 32"),
        (
            {
                "num_hidden_layers": 2,
                "num_attention_heads": 8,
                "head_dim": 64,
                "layer_types": ["full_attention"],
                "sliding_window": 8,
            },
            "layerTypes",
        ),
    ],
    ids=["bool-layers", "fractional-head-dim", "mla-without-rope", "zero-heads", "zero-kv-heads",
         "zero-heads-with-head-dim", "negative-hidden-size", "zero-hidden-size", "hidden-size-below-heads",
         "layer-types-mismatch"],
)
def test_bad_configs_raise_naming_the_field(config: dict[str, object], needle: str) -> None:
    with pytest.raises(ValueError, match=needle):
        architecture_from_hf_config(config)


@pytest.mark.parametrize(("changes", "expected"), [
    ({"num_hidden_layers": -3}, "numLayers -3: Input should be greater than or equal to 1"),
    ({"max_position_embeddings": 10**40}, "maxPositionEmbeddings 1000000000000000000000000000000000000000: Input"),
    ({"num_hidden_layers": -3, "max_position_embeddings": 10**40}, "numLayers -3: Input should be greater than or "
     "equal to 1 (and 1 more)"),
])
def test_an_absurd_config_value_is_one_line_naming_the_field_and_its_value(changes: dict[str, int],
                                                                           expected: str) -> None:
    config = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 4096,
              "num_hidden_layers": 32, "num_attention_heads": 32, "num_key_value_heads": 8, "vocab_size": 128256,
              "max_position_embeddings": 131072, "torch_dtype": "bfloat16", "intermediate_size": 14336, **changes}
    with pytest.raises(ValueError) as bad:
        architecture_from_hf_config(config)
    assert expected in str(bad.value) and "\n" not in str(bad.value) and "pydantic" not in str(bad.value)
