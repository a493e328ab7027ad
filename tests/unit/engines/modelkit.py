"""Model shapes the engine tests share: QwQ-32B bnb-4bit's config.json, and ``speculative``, a ``spec.speculative``
with an EAGLE head or a draft model for Llama-3.1-8B."""

from __future__ import annotations

from typing import Any

QWQ_32B_BNB = {
    "num_hidden_layers": 64,
    "num_attention_heads": 40,
    "num_key_value_heads": 8,
    "head_dim": 128,
    "hidden_size": 5120,
    "vocab_size": 152064,
    "intermediate_size": 27648,
    "max_position_embeddings": 131072,
    "quantization_config": {"quant_method": "bitsandbytes", "load_in_4bit": True},
}

DRAFT_GEOMETRY = {"attention": "gqa", "numLayers": 1, "numKVHeads": 8, "headDim": 128}


def speculative(method: str, tokens: int = 3) -> dict[str, Any]:
    """A ``spec.speculative`` for ``method`` on Llama-3.1-8B (an EAGLE head, or Llama-3.2-1B as the draft)."""
    doc: dict[str, Any] = {"method": method, "numSpeculativeTokens": tokens}
    if method in ("eagle", "eagle3"):
        doc["draft"] = {"name": "yuhuili/EAGLE-LLaMA3.1-Instruct-8B", "weightsPerGPU": "1Gi",
                        "architecture": DRAFT_GEOMETRY}
    elif method == "draft":
        doc["draft"] = {"name": "meta-llama/Llama-3.2-1B-Instruct", "weightsPerGPU": "2560Mi",
                        "architecture": {**DRAFT_GEOMETRY, "numLayers": 16, "headDim": 64}}
    return doc
