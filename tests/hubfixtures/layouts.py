"""Checkpoint tensor lists (names, dtypes, shapes) of Hugging Face models, from their config.json.

Each family follows the tensor names and shapes its transformers modeling file saves (``modeling_<type>.py``:
``nn.Linear(in, out)`` stores ``[out, in]``) and the names in the published ``model.safetensors.index.json``
weight maps; quantized layouts follow their packers (AutoAWQ ``qweight [in, out/8]``; AutoGPTQ ``qweight
[in/8, out]``, ``g_idx [in]``; compressed-tensors ``weight_packed [out, in/8]``, ``weight_scale``; FP8 block
``weight_scale_inv [ceil(out/128), ceil(in/128)]``; bitsandbytes NF4 ``weight [numel/2, 1]`` + absmax; OpenAI
MXFP4 ``*_blocks [E, out, in/32, 16]`` + ``*_scales``). ``tests/unit/hub/test_hub_fixtures.py`` checks the generated
tensors against the real figures models.yaml cites (index ``metadata.total_size``, Hub API parameter counts by dtype,
real safetensors dumps), so a layout that drifts from the real checkpoint fails there.
"""

from __future__ import annotations

import math
from typing import Any

T = tuple[str, str, tuple[int, ...]]


def _text(config: dict[str, Any]) -> dict[str, Any]:
    for key in ("text_config", "llm_config", "language_config"):
        if isinstance(config.get(key), dict):
            return config[key]
    return config


def _linear(prefix: str, out: int, inp: int, dtype: str, *, bias: bool = False) -> list[T]:
    ts = [(f"{prefix}.weight", dtype, (out, inp))]
    if bias:
        ts.append((f"{prefix}.bias", dtype, (out,)))
    return ts


def decoder(config: dict[str, Any],  # noqa: C901 - one layout per family
            prefix: str = "model.", head: str = "lm_head", dtype: str = "BF16") -> list[T]:
    """A Llama-style decoder (llama, mistral, qwen2/3, gemma 1-3, granite, phi3, mixtral, qwen2/3-moe, deepseek
    v2/v3 MLA + MoE + MTP, gpt-oss)."""
    c = _text(config)
    mt = str(c.get("model_type", ""))
    H, N, V = c["hidden_size"], c["num_hidden_layers"], c["vocab_size"]
    nh = c["num_attention_heads"]
    nkv = c.get("num_key_value_heads") or nh
    hd = c.get("head_dim") or H // nh
    inter = c.get("intermediate_size")
    ts: list[T] = [(f"{prefix}embed_tokens.weight", dtype, (V, H))]
    qkv_bias = bool(c.get("attention_bias")) or mt in ("qwen2", "qwen2_moe", "qwen2_vl", "qwen2_5_vl")
    qk_norm = mt in ("qwen3", "qwen3_moe", "qwen3_vl_text", "gemma3_text", "gemma3")
    mla = c.get("kv_lora_rank") is not None
    experts = c.get("n_routed_experts") or c.get("num_local_experts") or c.get("num_experts")
    nextn = int(c.get("num_nextn_predict_layers") or 0)
    for i in range(N + nextn):
        p = f"{prefix}layers.{i}."
        a = p + "self_attn."
        if mla:
            nope, rope, vd = c["qk_nope_head_dim"], c["qk_rope_head_dim"], c["v_head_dim"]
            qlr, kvlr = c.get("q_lora_rank"), c["kv_lora_rank"]
            if qlr:
                ts += [*_linear(a + "q_a_proj", qlr, H, dtype), (a + "q_a_layernorm.weight", dtype, (qlr,))]
                ts += _linear(a + "q_b_proj", nh * (nope + rope), qlr, dtype)
            else:
                ts += _linear(a + "q_proj", nh * (nope + rope), H, dtype)
            ts += _linear(a + "kv_a_proj_with_mqa", kvlr + rope, H, dtype)
            ts += [(a + "kv_a_layernorm.weight", dtype, (kvlr,))]
            ts += _linear(a + "kv_b_proj", nh * (nope + vd), kvlr, dtype)
            ts += _linear(a + "o_proj", H, nh * vd, dtype)
        elif mt in ("phi3",):
            ts += _linear(a + "qkv_proj", (nh + 2 * nkv) * hd, H, dtype)
            ts += _linear(a + "o_proj", H, nh * hd, dtype)
        else:
            ts += _linear(a + "q_proj", nh * hd, H, dtype, bias=qkv_bias)
            ts += _linear(a + "k_proj", nkv * hd, H, dtype, bias=qkv_bias)
            ts += _linear(a + "v_proj", nkv * hd, H, dtype, bias=qkv_bias)
            ts += _linear(a + "o_proj", H, nh * hd, dtype, bias=mt == "gpt_oss")
            if qk_norm:
                ts += [(a + "q_norm.weight", dtype, (hd,)), (a + "k_norm.weight", dtype, (hd,))]
            if mt == "gpt_oss":
                ts += [(a + "sinks", dtype, (nh,))]
        ts += [(p + "input_layernorm.weight", dtype, (H,)), (p + "post_attention_layernorm.weight", dtype, (H,))]
        if mt.startswith(("gemma2", "gemma3")):
            ts += [(p + "pre_feedforward_layernorm.weight", dtype, (H,)),
                   (p + "post_feedforward_layernorm.weight", dtype, (H,))]
        dense_layer = not experts or i < int(c.get("first_k_dense_replace") or 0) or (
            mt == "qwen2_moe" and False)
        if mt == "gpt_oss":
            E, I_ = experts, inter
            m = p + "mlp."
            ts += [(m + "router.weight", dtype, (E, H)), (m + "router.bias", dtype, (E,))]
            ts += [(m + "experts.gate_up_proj_blocks", "U8", (E, 2 * I_, H // 32, 16)),
                   (m + "experts.gate_up_proj_scales", "U8", (E, 2 * I_, H // 32)),
                   (m + "experts.gate_up_proj_bias", dtype, (E, 2 * I_)),
                   (m + "experts.down_proj_blocks", "U8", (E, H, I_ // 32, 16)),
                   (m + "experts.down_proj_scales", "U8", (E, H, I_ // 32)),
                   (m + "experts.down_proj_bias", dtype, (E, H))]
        elif dense_layer:
            m = p + "mlp."
            if mt == "phi3":
                ts += _linear(m + "gate_up_proj", 2 * inter, H, dtype) + _linear(m + "down_proj", H, inter, dtype)
            else:
                ts += _linear(m + "gate_proj", inter, H, dtype) + _linear(m + "up_proj", inter, H, dtype)
                ts += _linear(m + "down_proj", H, inter, dtype)
        elif mt == "mixtral":
            m = p + "block_sparse_moe."
            ts += _linear(m + "gate", experts, H, dtype)
            for e in range(experts):
                ts += _linear(f"{m}experts.{e}.w1", inter, H, dtype) + _linear(f"{m}experts.{e}.w2", H, inter, dtype)
                ts += _linear(f"{m}experts.{e}.w3", inter, H, dtype)
        else:
            m = p + "mlp."
            mi = c["moe_intermediate_size"]
            ts += _linear(m + "gate", experts, H, dtype)
            if mt in ("deepseek_v3", "kimi_k2", "glm4_moe") or c.get("topk_method") == "noaux_tc":
                ts += [(m + "gate.e_score_correction_bias", "F32", (experts,))]
            for e in range(experts):
                ts += _linear(f"{m}experts.{e}.gate_proj", mi, H, dtype) + _linear(f"{m}experts.{e}.up_proj", mi, H,
                                                                                     dtype)
                ts += _linear(f"{m}experts.{e}.down_proj", H, mi, dtype)
            shared = c.get("shared_expert_intermediate_size") or (c.get("n_shared_experts") or 0) * mi
            if shared:
                s = m + ("shared_expert." if mt == "qwen2_moe" else "shared_experts.")
                ts += _linear(s + "gate_proj", shared, H, dtype) + _linear(s + "up_proj", shared, H, dtype)
                ts += _linear(s + "down_proj", H, shared, dtype)
                if mt == "qwen2_moe":
                    ts += _linear(m + "shared_expert_gate", 1, H, dtype)
        if i >= N:  # DeepSeek-V3 next-n (MTP) layer extras
            ts += [(p + "enorm.weight", dtype, (H,)), (p + "hnorm.weight", dtype, (H,))]
            ts += [*_linear(p + "eh_proj", H, 2 * H, dtype), (p + "shared_head.norm.weight", dtype, (H,))]
            ts += [(p + "shared_head.head.weight", dtype, (V, H)), (p + "embed_tokens.weight", dtype, (V, H))]
    ts += [(f"{prefix}norm.weight", dtype, (H,))]
    # absent key: the config class default (transformers' PretrainedConfig: True; Llama/Qwen classes: False)
    tie = c.get("tie_word_embeddings", config.get("tie_word_embeddings", mt.startswith("gemma")))
    if not tie:
        ts += [(f"{head}.weight", dtype, (V, H))]
    return ts


def siglip(prefix: str, v: dict[str, Any], dtype: str = "BF16", *, post: bool = True) -> list[T]:
    """SigLIP / CLIP vision encoder (``modeling_siglip.py`` / ``modeling_clip.py``)."""
    H, I_, L = v["hidden_size"], v["intermediate_size"], v["num_hidden_layers"]
    P, img = v["patch_size"], v["image_size"]
    ts: list[T] = [(prefix + "embeddings.patch_embedding.weight", dtype, (H, v.get("num_channels", 3), P, P))]
    clip = v.get("model_type") == "clip_vision_model"
    if clip:
        ts += [(prefix + "embeddings.class_embedding", dtype, (H,))]
        ts += [(prefix + "embeddings.position_embedding.weight", dtype, ((img // P) ** 2 + 1, H))]
        ts += [(prefix + "pre_layrnorm.weight", dtype, (H,)), (prefix + "pre_layrnorm.bias", dtype, (H,))]
    else:
        ts += [(prefix + "embeddings.patch_embedding.bias", dtype, (H,))]
        ts += [(prefix + "embeddings.position_embedding.weight", dtype, ((img // P) ** 2, H))]
    for i in range(L):
        p = f"{prefix}encoder.layers.{i}."
        for n in ("q_proj", "k_proj", "v_proj", "out_proj"):
            ts += _linear(p + "self_attn." + n, H, H, dtype, bias=True)
        for n in ("layer_norm1", "layer_norm2"):
            ts += [(p + n + ".weight", dtype, (H,)), (p + n + ".bias", dtype, (H,))]
        ts += _linear(p + "mlp.fc1", I_, H, dtype, bias=True) + _linear(p + "mlp.fc2", H, I_, dtype, bias=True)
    if post:
        ts += [(prefix + "post_layernorm.weight", dtype, (H,)), (prefix + "post_layernorm.bias", dtype, (H,))]
    return ts


def qwen25_vl_visual(v: dict[str, Any], text_hidden: int, dtype: str = "BF16") -> list[T]:
    """Qwen2.5-VL vision tower (``modeling_qwen2_5_vl.py``: ``Qwen2_5_VisionTransformerPretrainedModel``)."""
    H, I_, depth = v["hidden_size"], v["intermediate_size"], v["depth"]
    P, tp = v["patch_size"], v.get("temporal_patch_size", 2)
    merge = v.get("spatial_merge_size", 2) ** 2 * H
    ts: list[T] = [("visual.patch_embed.proj.weight", dtype, (H, 3, tp, P, P))]
    for i in range(depth):
        p = f"visual.blocks.{i}."
        ts += [(p + "norm1.weight", dtype, (H,)), (p + "norm2.weight", dtype, (H,))]
        ts += _linear(p + "attn.qkv", 3 * H, H, dtype, bias=True) + _linear(p + "attn.proj", H, H, dtype, bias=True)
        for n in ("gate_proj", "up_proj"):
            ts += _linear(p + "mlp." + n, I_, H, dtype, bias=True)
        ts += _linear(p + "mlp.down_proj", H, I_, dtype, bias=True)
    ts += [("visual.merger.ln_q.weight", dtype, (H,))]
    ts += _linear("visual.merger.mlp.0", merge, merge, dtype, bias=True)
    ts += _linear("visual.merger.mlp.2", v.get("out_hidden_size", text_hidden), merge, dtype, bias=True)
    return ts


def nemotron_h(config: dict[str, Any], dtype: str = "BF16") -> list[T]:
    """Nemotron-H (``modeling_nemotron_h.py``): ``backbone.layers.N.mixer`` is a Mamba-2 mixer (``M``), attention
    (``*``) or a two-matrix MLP (``-``) per ``hybrid_override_pattern``; ``backbone.embeddings``, ``norm_f``."""
    c = config
    H, V, pattern = c["hidden_size"], c["vocab_size"], c["hybrid_override_pattern"]
    heads, head_dim = c["mamba_num_heads"], c["mamba_head_dim"]
    d_inner, groups, state = heads * head_dim, c["n_groups"], c["ssm_state_size"]
    conv_dim = d_inner + 2 * groups * state
    nh, nkv, hd = c["num_attention_heads"], c["num_key_value_heads"], c.get("attention_head_dim") or c.get("head_dim")
    ts: list[T] = [("backbone.embeddings.weight", dtype, (V, H))]
    for i, kind in enumerate(pattern):
        p = f"backbone.layers.{i}."
        m = p + "mixer."
        ts += [(p + "norm.weight", dtype, (H,))]
        if kind == "M":
            ts += _linear(m + "in_proj", d_inner + conv_dim + heads, H, dtype, bias=bool(c.get("use_bias")))
            ts += [(m + "conv1d.weight", dtype, (conv_dim, 1, c["conv_kernel"]))]
            if c.get("use_conv_bias", True):
                ts += [(m + "conv1d.bias", dtype, (conv_dim,))]
            ts += [(m + "dt_bias", dtype, (heads,)), (m + "A_log", dtype, (heads,)), (m + "D", dtype, (heads,)),
                   (m + "norm.weight", dtype, (d_inner,))]
            ts += _linear(m + "out_proj", H, d_inner, dtype, bias=bool(c.get("use_bias")))
        elif kind == "*":
            ts += _linear(m + "q_proj", nh * hd, H, dtype) + _linear(m + "k_proj", nkv * hd, H, dtype)
            ts += _linear(m + "v_proj", nkv * hd, H, dtype) + _linear(m + "o_proj", H, nh * hd, dtype)
        elif kind == "-":
            ts += _linear(m + "up_proj", c["intermediate_size"], H, dtype)
            ts += _linear(m + "down_proj", H, c["intermediate_size"], dtype)
        else:
            raise ValueError(f"unknown hybrid layer kind {kind!r}")
    ts += [("backbone.norm_f.weight", dtype, (H,))]
    if not c.get("tie_word_embeddings", False):
        ts += [("lm_head.weight", dtype, (V, H))]
    return ts


def qwen3_vl_visual(v: dict[str, Any], dtype: str = "BF16") -> list[T]:
    """Qwen3-VL vision tower (``modeling_qwen3_vl.py``: ``Qwen3VLVisionModel`` under ``model.visual``): LayerNorm
    blocks with fused ``attn.qkv``, ``mlp.linear_fc1/2``, learned ``pos_embed``, the patch merger and one
    DeepStack merger per ``deepstack_visual_indexes`` entry."""
    H, I_, depth, P = v["hidden_size"], v["intermediate_size"], v["depth"], v["patch_size"]
    tp, out = v.get("temporal_patch_size", 2), v["out_hidden_size"]
    merged = v.get("spatial_merge_size", 2) ** 2 * H
    pre = "model.visual."
    ts: list[T] = [(pre + "patch_embed.proj.weight", dtype, (H, v.get("in_channels", 3), tp, P, P)),
                   (pre + "patch_embed.proj.bias", dtype, (H,)),
                   (pre + "pos_embed.weight", dtype, (v["num_position_embeddings"], H))]
    for i in range(depth):
        p = f"{pre}blocks.{i}."
        for n in ("norm1", "norm2"):
            ts += [(p + n + ".weight", dtype, (H,)), (p + n + ".bias", dtype, (H,))]
        ts += _linear(p + "attn.qkv", 3 * H, H, dtype, bias=True) + _linear(p + "attn.proj", H, H, dtype, bias=True)
        ts += _linear(p + "mlp.linear_fc1", I_, H, dtype, bias=True) + _linear(p + "mlp.linear_fc2", H, I_, dtype,
                                                                              bias=True)
    mergers = [pre + "merger."] + [f"{pre}deepstack_merger_list.{j}." for j in range(len(v.get(
        "deepstack_visual_indexes") or []))]
    for j, m in enumerate(mergers):
        norm = H if j == 0 else merged  # the DeepStack mergers normalise after the spatial merge
        ts += [(m + "norm.weight", dtype, (norm,)), (m + "norm.bias", dtype, (norm,))]
        ts += _linear(m + "linear_fc1", merged, merged, dtype, bias=True)
        ts += _linear(m + "linear_fc2", out, merged, dtype, bias=True)
    return ts


def model_tensors(config: dict[str, Any]) -> list[T]:
    """The tensors of an unquantized checkpoint of ``config`` (bf16, or the config's torch_dtype)."""
    dtype = {"float16": "F16", "float32": "F32"}.get(str(_text(config).get("torch_dtype") or
                                                          config.get("torch_dtype")), "BF16")
    mt = config.get("model_type")
    if mt == "gemma3" and "vision_config" in config:
        ts = decoder(config, "language_model.model.", "language_model.lm_head", dtype)
        ts += siglip("vision_tower.vision_model.", config["vision_config"], dtype)
        H = config["vision_config"]["hidden_size"]
        ts += [("multi_modal_projector.mm_input_projection_weight", dtype, (H, config["text_config"]["hidden_size"])),
               ("multi_modal_projector.mm_soft_emb_norm.weight", dtype, (H,))]
        return ts
    if mt == "llava_next":
        v, t = config["vision_config"], config["text_config"]
        ts = decoder(config, "language_model.model.", "language_model.lm_head", dtype)
        ts += siglip("vision_tower.vision_model.", v | {"model_type": "clip_vision_model"}, dtype)
        ts = [x for x in ts if "post_layernorm" not in x[0]] + [
            ("vision_tower.vision_model.post_layernorm.weight", dtype, (v["hidden_size"],)),
            ("vision_tower.vision_model.post_layernorm.bias", dtype, (v["hidden_size"],))]
        ts += _linear("multi_modal_projector.linear_1", t["hidden_size"], v["hidden_size"], dtype, bias=True)
        ts += _linear("multi_modal_projector.linear_2", t["hidden_size"], t["hidden_size"], dtype, bias=True)
        ts += [("image_newline", dtype, (t["hidden_size"],))]
        return ts
    if mt == "nemotron_h":
        return nemotron_h(config, dtype)
    if mt == "qwen3_vl":
        ts = decoder(config, "model.language_model.", "lm_head", dtype)
        return ts + qwen3_vl_visual(config["vision_config"], dtype)
    if mt == "qwen2_5_vl":
        return decoder(config, "model.", "lm_head", dtype) + qwen25_vl_visual(config["vision_config"],
                                                                             config["hidden_size"], dtype)
    return decoder(config, "model.", "lm_head", dtype)


LINEAR_SUFFIXES = ("q_proj", "k_proj", "v_proj", "o_proj", "qkv_proj", "gate_proj", "up_proj", "down_proj",
                   "gate_up_proj", "q_a_proj", "q_b_proj", "kv_a_proj_with_mqa", "kv_b_proj", "w1", "w2", "w3")


def _is_quantizable(name: str, shape: tuple[int, ...]) -> bool:
    module = name.rsplit(".", 2)[-2] if name.endswith(".weight") else ""
    return (module in LINEAR_SUFFIXES and len(shape) == 2 and "vision" not in name and "visual" not in name
            and "mlp.gate." not in name)


def quantize(tensors: list[T], scheme: str, group: int = 128) -> list[T]:
    """Rewrite the linear weights of a layer stack as ``scheme`` stores them.

    Schemes: ``fp8-block`` (DeepSeek/Qwen3 FP8), ``fp8-modelopt`` (NVIDIA ModelOpt, per-tensor scales),
    ``fp8-channel`` (compressed-tensors FP8 dynamic), ``int8-channel`` (compressed-tensors W8A8), ``w4a16``
    (compressed-tensors pack-quantized), ``gptq``, ``awq``, ``bnb-nf4``.
    """
    out: list[T] = []
    for name, dtype, shape in tensors:
        if not _is_quantizable(name, shape):
            out.append((name, dtype, shape))
            continue
        base = name[: -len(".weight")]
        o, i = shape
        if scheme == "fp8-block":
            out += [(name, "F8_E4M3", shape), (base + ".weight_scale_inv", "F32", (-(-o // 128), -(-i // 128)))]
        elif scheme == "fp8-modelopt":  # NVIDIA ModelOpt FP8: per-tensor weight and input scales (F32 scalars)
            out += [(name, "F8_E4M3", shape), (base + ".weight_scale", "F32", ()), (base + ".input_scale", "F32", ())]
        elif scheme in ("fp8-channel", "int8-channel"):
            out += [(name, "F8_E4M3" if scheme == "fp8-channel" else "I8", shape),
                    (base + ".weight_scale", "BF16", (o, 1))]
        elif scheme == "w4a16":
            out += [(base + ".weight_packed", "I32", (o, i // 8)), (base + ".weight_scale", "BF16", (o, i // group)),
                    (base + ".weight_shape", "I64", (2,))]
        elif scheme == "gptq":
            out += [(base + ".qweight", "I32", (i // 8, o)), (base + ".qzeros", "I32", (i // group, o // 8)),
                    (base + ".scales", "F16", (i // group, o)), (base + ".g_idx", "I32", (i,))]
        elif scheme == "awq":
            out += [(base + ".qweight", "I32", (i, o // 8)), (base + ".qzeros", "I32", (i // group, o // 8)),
                    (base + ".scales", "F16", (i // group, o))]
        elif scheme == "bnb-nf4":
            n = o * i
            blocks = -(-n // 64)
            out += [(name, "U8", (n // 2, 1)), (name + ".absmax", "U8", (blocks,)),
                    (name + ".quant_map", "F32", (16,)), (name + ".nested_absmax", "F32", (-(-blocks // 256),)),
                    (name + ".nested_quant_map", "F32", (256,)),
                    (name + ".quant_state.bitsandbytes__nf4", "U8", (len(b'{"quant_type":"nf4"}') + 100,))]
        else:
            raise ValueError(f"unknown scheme {scheme}")
        if scheme in ("gptq", "awq") and name.endswith(("q_proj.weight", "k_proj.weight", "v_proj.weight")):
            pass
    return out


def total_params(tensors: list[T]) -> int:
    """Elements of all tensors."""
    return sum(math.prod(s) for _, _, s in tensors)
