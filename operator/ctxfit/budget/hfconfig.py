"""Map a Hugging Face ``config.json`` to an ``Architecture`` (and fetch one with huggingface_hub).

Field mapping (engine-memory.md sections A.2, A.3, D; vLLM ``config/model.py``):
num_hidden_layers -> numLayers; num_key_value_heads (else num_attention_heads) -> numKVHeads;
head_dim (else hidden_size / num_attention_heads) -> headDim; kv_lora_rank + qk_rope_head_dim -> MLA;
index_head_dim -> DSA indexer; sliding_window + layer_types -> sliding layers; the derived maximum
context is the minimum of the length fields, multiplied by rope ``factor`` only for rope types vLLM
does not treat as already scaled (not su, longrope, llama3, yarn, deepseek_yarn, deepseek_llama_scaling).
Multimodal configs keep the language model under ``text_config``.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from ctxfit.api import Architecture

LENGTH_FIELDS = (
    "max_position_embeddings",
    "n_positions",
    "max_seq_len",
    "seq_length",
    "model_max_length",
    "max_target_positions",
    "max_sequence_length",
    "max_seq_length",
    "seq_len",
)
"""vLLM 0.33 ``_get_and_verify_max_len`` ``possible_keys``."""

PRESCALED_ROPE_TYPES = frozenset({"su", "longrope", "llama3", "yarn", "deepseek_yarn", "deepseek_llama_scaling"})
"""Rope types whose max_position_embeddings vLLM 0.33 treats as already scaled."""


def derived_max_model_len(config: dict[str, Any]) -> int | None:
    """The context limit vLLM derives from a (text) config, or None when no length field exists."""
    lengths = [int(config[key]) for key in LENGTH_FIELDS if isinstance(config.get(key), int | float)]
    if not lengths:
        return None
    derived = min(lengths)
    rope = config.get("rope_scaling") or config.get("rope_parameters")
    if isinstance(rope, dict):
        rope_type = str(rope.get("rope_type") or rope.get("type") or "")
        factor = rope.get("factor")
        if rope_type not in PRESCALED_ROPE_TYPES and rope_type != "default" and isinstance(factor, int | float):
            derived = int(derived * factor)
    return derived


def architecture_from_hf_config(config: dict[str, Any]) -> Architecture:
    """Build an ``Architecture`` from a config.json dict.

    Raises:
        ValueError: when a needed field is missing (message names it).
    """
    text = config.get("text_config") if isinstance(config.get("text_config"), dict) else config
    assert isinstance(text, dict)
    layers = text.get("num_hidden_layers")
    if not isinstance(layers, int):
        raise ValueError("num_hidden_layers is missing")
    fields: dict[str, Any] = {"numLayers": layers, "maxPositionEmbeddings": derived_max_model_len(text)}
    if text.get("kv_lora_rank"):
        fields.update(
            attention="mla", kvLoraRank=int(text["kv_lora_rank"]), qkRopeHeadDim=int(text.get("qk_rope_head_dim", 0))
        )
    else:
        heads = text.get("num_attention_heads")
        kv_heads = text.get("num_key_value_heads") or heads
        head_dim = text.get("head_dim")
        if head_dim is None:
            hidden = text.get("hidden_size")
            if not isinstance(hidden, int) or not isinstance(heads, int):
                raise ValueError("head_dim (or hidden_size and num_attention_heads) is missing")
            head_dim = hidden // heads
        if not isinstance(kv_heads, int):
            raise ValueError("num_key_value_heads (or num_attention_heads) is missing")
        fields.update(
            attention="gqa" if heads and kv_heads < heads else "mha", numKVHeads=kv_heads, headDim=int(head_dim)
        )
    if text.get("index_head_dim") and text.get("index_topk"):
        fields["indexHeadDim"] = int(text["index_head_dim"])
    layer_types = text.get("layer_types")
    if isinstance(layer_types, list) and text.get("sliding_window"):
        fields["slidingWindow"] = int(text["sliding_window"])
        fields["numSlidingLayers"] = sum(1 for t in layer_types if t == "sliding_attention")
    return Architecture.model_validate(fields)


def load_hf_config(path: str | Path) -> dict[str, Any]:
    """Read a config.json file.

    Raises:
        ValueError: unreadable file or not a JSON object.
    """
    try:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError) as exc:
        raise ValueError(f"cannot read config.json {path}: {exc}") from exc
    if not isinstance(data, dict):
        raise ValueError(f"{path} is not a JSON object")
    return data


def fetch_hf_config(repo_id: str, *, revision: str | None = None) -> dict[str, Any]:
    """Download ``config.json`` of ``repo_id`` with huggingface_hub (needs network; HF_TOKEN for gated repos).

    Raises:
        ValueError: when the download fails (offline, gated, missing).
    """
    try:
        from huggingface_hub import hf_hub_download

        path = hf_hub_download(repo_id=repo_id, filename="config.json", revision=revision)
    except Exception as exc:  # huggingface_hub raises many types (offline, 401, 404)
        raise ValueError(f"cannot fetch config.json of {repo_id}: {exc}") from exc
    return load_hf_config(path)
