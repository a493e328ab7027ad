"""Map a Hugging Face ``config.json`` to an ``Architecture`` (pure; reading or fetching the file is the
CLI's job: ``ctxfit.cli.hfconfig``).

Field mapping (docs/engine-memory.md sections A.2, A.3, D; vLLM ``config/model.py``):
num_hidden_layers -> numLayers; num_key_value_heads (else num_attention_heads) -> numKVHeads;
head_dim (else hidden_size / num_attention_heads) -> headDim; kv_lora_rank + qk_rope_head_dim -> MLA;
index_head_dim -> DSA indexer; sliding_window + layer_types -> sliding layers; the derived maximum
context is the minimum of the length fields, multiplied by rope ``factor`` only for rope types vLLM
does not treat as already scaled (not su, longrope, llama3, yarn, deepseek_yarn, deepseek_llama_scaling).
Multimodal configs keep the language model under ``text_config``. num_attention_heads ->
numAttentionHeads. Hybrid (Mamba / Gated DeltaNet) configs: numLayers counts only the attention layers
(``ctxfit.vocab.hybridconfig``); their recurrent state is not KV.
"""

from __future__ import annotations

from typing import Any

from pydantic import ValidationError

from ctxfit.api import Architecture

from .hybridconfig import attention_layer_flags

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
    lengths = [
        int(config[key])
        for key in LENGTH_FIELDS
        if isinstance(config.get(key), int | float)
        and not isinstance(config.get(key), bool)
        and 0 < config[key] < float("inf")
    ]
    if not lengths:
        return None
    derived = min(lengths)
    rope = config.get("rope_scaling") or config.get("rope_parameters")
    if isinstance(rope, dict):
        rope_type = str(rope.get("rope_type") or rope.get("type") or "")
        factor = rope.get("factor")
        if (
            isinstance(factor, int | float)
            and 0 < factor < float("inf")
            and rope_type not in PRESCALED_ROPE_TYPES
            and rope_type != "default"
        ):
            derived = int(derived * factor)
    return derived


def architecture_from_hf_config(config: dict[str, Any]) -> Architecture:
    """Build an ``Architecture`` from a config.json dict.

    Raises:
        ValueError: when a needed field is missing (message names it), or a value is out of the architecture's
            range (one line: the field, its value, the rule).
    """
    text = config.get("text_config") if isinstance(config.get("text_config"), dict) else config
    assert isinstance(text, dict)
    layers = int_field(text, "num_hidden_layers", required=True)
    assert layers is not None
    flags = attention_layer_flags(text)
    if flags is not None:
        layers = max(1, flags.count(True))
    fields: dict[str, Any] = {"numLayers": layers, "maxPositionEmbeddings": derived_max_model_len(text)}
    if int_field(text, "num_attention_heads") is not None:  # 0 is refused by the Architecture's bound, not dropped
        fields["numAttentionHeads"] = int_field(text, "num_attention_heads")
    if text.get("kv_lora_rank") is not None:
        fields.update(
            attention="mla",
            kvLoraRank=int_field(text, "kv_lora_rank", required=True),
            qkRopeHeadDim=int_field(text, "qk_rope_head_dim", required=True),
        )
    else:
        heads, kv_heads = _heads(text)
        head_dim = int_field(text, "head_dim")
        if head_dim is None:
            head_dim = _derived_head_dim(int_field(text, "hidden_size"), heads)
        if not kv_heads:
            raise ValueError("num_key_value_heads (or num_attention_heads) is missing")
        fields.update(attention="gqa" if heads and kv_heads < heads else "mha", numKVHeads=kv_heads, headDim=head_dim)
    index_head_dim = int_field(text, "index_head_dim")
    if index_head_dim and text.get("index_topk"):
        fields["indexHeadDim"] = index_head_dim
    window = int_field(text, "sliding_window")
    layer_types = text.get("layer_types") if flags is None else None
    if window and text.get("use_sliding_window") is not False:
        fields["slidingWindow"] = window
        if isinstance(layer_types, list):
            fields["layerTypes"] = [
                t if t in ("full_attention", "sliding_attention") else "full_attention" for t in layer_types
            ]
        else:  # Mistral-style: one window for every layer
            fields["numSlidingLayers"] = layers
    try:
        return Architecture.model_validate(fields)
    except ValidationError as exc:  # one line, as every refusal: the first field out of range, its value
        first = exc.errors()[0]
        field = ".".join(str(p) for p in first.get("loc", ())) or "architecture"
        more = f" (and {len(exc.errors()) - 1} more)" if len(exc.errors()) > 1 else ""
        raise ValueError(f"the architecture it gives has {field} {str(first.get('input'))[:40]}: "
                         f"{str(first.get('msg', 'invalid')).removeprefix('Value error, ')}{more}") from None


def _derived_head_dim(hidden: int | None, heads: int | None) -> int:
    """``hidden_size // num_attention_heads`` (transformers' default ``head_dim``). Raises ValueError naming the
    config's own fields when either is missing, or the quotient would be 0 or less."""
    if hidden is None or not heads:
        raise ValueError("head_dim (or hidden_size and num_attention_heads) is missing")
    if hidden <= 0:
        raise ValueError(f"hidden_size must be a positive number, got {hidden}")
    if hidden < heads:
        raise ValueError(f"hidden_size {hidden} is smaller than num_attention_heads {heads} "
                         "(head_dim = hidden_size / num_attention_heads)")
    return hidden // heads


def _heads(text: dict[str, Any]) -> tuple[int | None, int | None]:
    """(num_attention_heads, num_key_value_heads): only an absent ``num_key_value_heads`` falls back to the query
    heads (transformers' rule); 0 or fewer of either is refused (ValueError naming the field), never taken as absent."""
    heads = int_field(text, "num_attention_heads")
    kv_given = int_field(text, "num_key_value_heads")
    kv_heads = kv_given if kv_given is not None else heads
    for key, value in (("num_attention_heads", heads), ("num_key_value_heads", kv_given)):
        if value is not None and value <= 0:
            raise ValueError(f"{key} must be a positive number of heads, got {value}")
    return heads, kv_heads


def int_field(config: dict[str, Any], key: str, *, required: bool = False) -> int | None:
    """An integer config field (every config.json integer ctxfit reads goes through here); floats with a fraction,
    booleans and strings are errors, not truncations.

    Raises:
        ValueError: naming ``key``.
    """
    value = config.get(key)
    if value is None:
        if required:
            raise ValueError(f"{key} is missing")
        return None
    if (
        isinstance(value, bool)
        or not isinstance(value, int | float)
        or value != value
        or value in (float("inf"), float("-inf"))
    ):
        raise ValueError(f"{key} must be an integer, got {value!r}")
    if isinstance(value, float) and not value.is_integer():
        raise ValueError(f"{key} must be an integer, got {value!r}")
    return int(value)
