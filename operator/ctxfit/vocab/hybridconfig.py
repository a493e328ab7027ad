"""Hybrid (Mamba / Gated DeltaNet) models from a Hugging Face config.json (pure).

Which layers hold attention (and so a KV cache), and the recurrent-state sizes of the others:

- Qwen3-Next / Qwen3.5 (``linear_num_value_heads``): ``layer_types`` entries ``linear_attention`` vs
  ``full_attention``, else every ``full_attention_interval``-th layer is attention (vLLM
  ``Qwen3NextConfig.layer_types``); state per vLLM ``MambaStateShapeCalculator.gated_delta_net_state_shape``.
- Nemotron-H (``hybrid_override_pattern``): ``M`` Mamba-2, ``*`` attention, ``-`` MLP only.
- Granite-4.0-H (``layer_types`` ``mamba``/``attention``, ``mamba_n_heads``/``mamba_d_head``/``mamba_d_state``/
  ``mamba_n_groups``/``mamba_d_conv``): Mamba-2. Models that put attention and Mamba in the same layer
  (Falcon-H1) have no per-layer pattern and are not recognised (their state is not counted).
- Jamba (``attn_layer_period``/``attn_layer_offset``; or ``layers_block_type``): Mamba-1 with
  d_inner = ``mamba_expand * hidden_size``.
- ``mamba_ssm_dtype`` (``float32``) sets the SSM-state element size; otherwise the model dtype (2 bytes).
"""

from __future__ import annotations

from typing import Any

from ctxfit.catalog.hybrid import HybridState

DTYPE_BYTES = {"float32": 4, "fp32": 4, "float16": 2, "bfloat16": 2, "fp16": 2, "bf16": 2}


def _int(config: dict[str, Any], *keys: str, default: int | None = None) -> int:
    for key in keys:
        value = config.get(key)
        if isinstance(value, int) and not isinstance(value, bool):
            return value
    if default is None:
        raise ValueError(f"{keys[0]} is missing")
    return default


def _ssm_bytes(config: dict[str, Any]) -> int:
    return DTYPE_BYTES.get(str(config.get("mamba_ssm_dtype") or "").lower(), 2)


def attention_layer_flags(config: dict[str, Any]) -> list[bool] | None:
    """Per layer: True when it is an attention layer; None for a model that is not hybrid.

    Raises:
        ValueError: a hybrid config whose layer description does not match ``num_hidden_layers``.
    """
    layers = config.get("num_hidden_layers")
    if not isinstance(layers, int):
        return None
    flags: list[bool] | None = None
    pattern = config.get("hybrid_override_pattern")
    types = config.get("layer_types") or config.get("layers_block_type")
    if isinstance(pattern, str):
        flags = [c == "*" for c in pattern]
    elif isinstance(types, list) and any(t in ("linear_attention", "mamba") for t in types):
        flags = [t in ("full_attention", "attention") for t in types]
    elif isinstance(config.get("full_attention_interval"), int) and "linear_num_value_heads" in config:
        step = config["full_attention_interval"]
        flags = [(i + 1) % step == 0 for i in range(layers)]
    elif isinstance(config.get("attn_layer_period"), int):
        period, offset = config["attn_layer_period"], int(config.get("attn_layer_offset", 0))
        flags = [i % period == offset for i in range(layers)]
    if flags is None:
        return None
    if len(flags) != layers:
        raise ValueError(f"the hybrid layer pattern has {len(flags)} entries, num_hidden_layers is {layers}")
    return flags


def hybrid_from_hf_config(config: dict[str, Any]) -> HybridState | None:
    """The recurrent-state geometry of a hybrid (text) config, or None for a pure-attention model.

    Raises:
        ValueError: a hybrid config missing a state field (message names it).
    """
    flags = attention_layer_flags(config)
    if flags is None:
        return None
    total = len(flags)
    if isinstance(config.get("hybrid_override_pattern"), str):
        state_layers = config["hybrid_override_pattern"].count("M")
    else:
        state_layers = flags.count(False)
    if state_layers == 0:
        return None
    ssm = _ssm_bytes(config)
    if "linear_num_value_heads" in config:
        return HybridState(
            kind="gated_deltanet",
            state_layers=state_layers,
            total_layers=total,
            conv_kernel=_int(config, "linear_conv_kernel_dim"),
            num_heads=_int(config, "linear_num_value_heads"),
            head_dim=_int(config, "linear_value_head_dim"),
            n_groups=_int(config, "linear_num_key_heads"),
            key_head_dim=_int(config, "linear_key_head_dim"),
            ssm_dtype_bytes=ssm,
        )
    if "attn_layer_period" in config or config.get("model_type") == "jamba":
        return HybridState(
            kind="mamba1",
            state_layers=state_layers,
            total_layers=total,
            conv_kernel=_int(config, "mamba_d_conv", default=4),
            state_size=_int(config, "mamba_d_state", default=16),
            intermediate_size=_int(config, "mamba_expand", default=2) * _int(config, "hidden_size"),
            ssm_dtype_bytes=ssm,
        )
    return HybridState(
        kind="mamba2",
        state_layers=state_layers,
        total_layers=total,
        conv_kernel=_int(config, "conv_kernel", "mamba_d_conv"),
        state_size=_int(config, "ssm_state_size", "mamba_d_state"),
        num_heads=_int(config, "mamba_num_heads", "mamba_n_heads"),
        head_dim=_int(config, "mamba_head_dim", "mamba_d_head"),
        n_groups=_int(config, "n_groups", "mamba_n_groups", default=1),
        ssm_dtype_bytes=ssm,
    )
