"""What each checkpoint tensor is, by its name: the parallel layer an engine builds for it (pure).

The engines build one module type per Hugging Face module name, the same in every model file (vLLM
``model_executor/models/*.py``, SGLang ``srt/models/*.py``): ``q_proj``/``k_proj``/``v_proj``/``qkv_proj`` ->
``QKVParallelLinear`` (column-parallel, KV heads replicated once TP exceeds them); ``gate_proj``/``up_proj``/
``fc1``/``w1``/``w3`` -> ``MergedColumnParallelLinear``/``ColumnParallelLinear``; ``o_proj``/``down_proj``/
``fc2``/``w2``/``dense``/``out_proj`` -> ``RowParallelLinear`` (input dimension split, bias whole on every rank);
``embed_tokens``/``wte``/``lm_head`` -> ``VocabParallelEmbedding``/``ParallelLMHead`` (rows padded, split);
``mlp.gate`` (router), MLA's ``q_a_proj``/``kv_a_proj_with_mqa``, norms -> ``ReplicatedLinear``/replicated;
``experts.N.*`` or fused ``experts.*`` -> ``FusedMoE`` (split by TP on the intermediate size, or by EP on the
expert count). Tensors of layers at or past ``num_hidden_layers`` (DeepSeek/GLM next-n MTP layers) and ``mtp.*``
are not loaded by default. A tensor whose module name is none of these is, inside a decoder layer, taken as a
parallel linear when it is a matrix and replicated otherwise; outside one, replicated (``Role.UNKNOWN`` marks it
so the estimate can say how many bytes rest on that guess).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from enum import Enum


class Role(Enum):
    """How an engine places a tensor on the tensor-parallel ranks."""

    EMBEDDING = "embedding"  # vocab-parallel input embedding
    LM_HEAD = "lm_head"  # vocab-parallel output head
    QKV = "qkv"  # fused or separate q/k/v: column-parallel, KV part replicated past the KV heads
    KV = "kv"  # k_proj / v_proj alone
    COLUMN = "column"  # column-parallel linear (output dim split): weight, bias, scales all split
    ROW = "row"  # row-parallel linear (input dim split): bias and per-output scales whole
    EXPERT = "expert"  # routed expert (FusedMoE): split by TP (intermediate) or EP (experts)
    REPLICATED = "replicated"  # norms, routers, MLA down-projections, scalars
    UNKNOWN = "unknown"  # no known module name: see ``guess_sharded``


@dataclass(frozen=True)
class TensorRole:
    """The role of one tensor and where it sits.

    Attributes:
        role: the parallel layer type.
        layer: decoder-layer index of the language model, or None (embeddings, head, vision tower).
        expert: routed-expert index for per-expert tensors, else None.
        vision: part of a vision/audio tower or projector (not a language-model layer).
        mtp: a multi-token-prediction / next-n tensor, not loaded by default.
        guess_sharded: for ``UNKNOWN``: True when it is a matrix inside a decoder layer (counted split by TP).
    """

    role: Role
    layer: int | None = None
    expert: int | None = None
    vision: bool = False
    mtp: bool = False
    guess_sharded: bool = False


_LAYER = re.compile(r"(?:^|\.)(?:layers|h|blocks|block|layer|decoder_layers)\.(\d+)\.")
_EXPERT = re.compile(r"\.experts\.(\d+)\.")
_VISION = re.compile(
    r"(^|\.)(vision_tower|vision_model|visual|vision|vit|image_encoder|img_encoder|vision_encoder|mm_projector|"
    r"multi_modal_projector|vision_projection|audio_tower|audio_model|audio|siglip|image_newline|patch_embed|"
    r"embed_vision|vision_embed|vpm|resampler|connector|mlp1|aligner)(\.|$)")
_MTP = re.compile(r"(^|\.)(mtp|mtp_layers|nextn|next_n|eagle|draft)(\.|_|$)")

EMBEDDING_NAMES = frozenset({"embed_tokens", "wte", "word_embeddings", "tok_embeddings", "embed_in", "embedding",
                             "tok_embedding", "token_embedding", "embeddings"})
LM_HEAD_NAMES = frozenset({"lm_head", "embed_out", "output", "head"})
QKV_NAMES = frozenset({"qkv_proj", "query_key_value", "c_attn", "Wqkv", "qkv", "W_pack", "wqkv", "linear_qkv",
                       "in_proj_qkv"})
Q_NAMES = frozenset({"q_proj", "wq", "query", "q_b_proj", "q", "wq_a"})
KV_NAMES = frozenset({"k_proj", "v_proj", "wk", "wv", "key", "value", "k", "v"})
COLUMN_NAMES = frozenset({
    "gate_proj", "up_proj", "gate_up_proj", "fc1", "w1", "w3", "c_fc", "dense_h_to_4h", "fc_in", "kv_b_proj",
    "in_proj", "dt_proj", "conv1d", "linear_fc1", "gate_up", "ffn_up", "c_fc2", "linear_1", "wi", "wi_0", "wi_1",
    "in_proj_z", "in_proj_ba", "in_proj_qkvz", "up", "gate", "linear_q", "linear_k", "linear_v"})
ROW_NAMES = frozenset({
    "o_proj", "down_proj", "fc2", "w2", "c_proj", "dense_4h_to_h", "fc_out", "out_proj", "dense", "wo",
    "linear_proj", "linear_fc2", "proj", "x_proj", "ffn_down", "linear_2", "down", "attn_out"})
REPLICATED_NAMES = frozenset({
    "q_a_proj", "kv_a_proj_with_mqa", "fused_qkv_a_proj", "router", "gate", "shared_expert_gate",
    "e_score_correction_bias", "wk_weights", "weights_proj", "wq_b", "wk", "rotary_emb", "pos_embed",
    "position_embedding", "embed_positions", "wpe", "patch_embedding", "class_embedding", "sinks"})
"""Module names the engines build as replicated (vLLM ``ReplicatedLinear`` / plain parameters): MLA down-projections
(``deepseek_v2.py`` ``DeepseekV2MLAAttention``), MoE routers (``mlp.gate``, ``router``), DSA indexer projections
(``Indexer``: ``wq_b``, ``wk``, ``weights_proj``), Qwen2-MoE ``shared_expert_gate``, attention sinks."""

PARAM_SUFFIXES = frozenset({
    "weight", "bias", "qweight", "qzeros", "scales", "g_idx", "weight_scale", "weight_scale_inv", "input_scale",
    "weight_packed", "weight_shape", "weight_zero_point", "weight_global_scale", "input_global_scale",
    "weight_scale_2", "k_scale", "v_scale", "absmax", "quant_map", "nested_absmax", "nested_quant_map",
    "quant_state", "SCB", "weight_format", "blocks", "output_scale", "perm", "zeros", "g_idx_sort_indices"})


def _module_and_param(name: str) -> tuple[list[str], str]:
    """Split ``a.b.c.weight`` into (["a","b","c"], "weight"); bitsandbytes' ``weight.absmax`` and
    ``weight.quant_state.bitsandbytes__nf4`` keep ``weight`` as the parameter."""
    parts = name.split(".")
    if "weight" in parts[:-1] and parts[-1] != "weight":  # bitsandbytes quant state hangs off .weight
        cut = len(parts) - 1 - parts[::-1].index("weight")
        return parts[:cut], "weight"
    if len(parts) > 1 and parts[-1] in PARAM_SUFFIXES:
        return parts[:-1], parts[-1]
    if len(parts) > 1 and parts[-1].endswith(("_blocks", "_scales", "_bias")) and parts[-2] == "experts":
        return [*parts[:-1], parts[-1].rsplit("_", 1)[0]], parts[-1].rsplit("_", 1)[1]
    return parts, ""


def classify(name: str, *, num_layers: int | None) -> TensorRole:  # noqa: C901 - one rule per role
    """The role of checkpoint tensor ``name``.

    Args:
        name: the safetensors tensor name.
        num_layers: config.json ``num_hidden_layers`` of the language model; tensors of layers at or past it are
            next-n/MTP layers (DeepSeek-V3 ``model.layers.61``), not loaded by default. None: no such check.
    """
    vision = bool(_VISION.search(name))
    layer_match = None if vision else _LAYER.search(name)
    layer = int(layer_match.group(1)) if layer_match else None
    mtp = bool(_MTP.search(name)) and not vision
    if layer is not None and num_layers is not None and layer >= num_layers and not vision:
        mtp = True
    modules, param = _module_and_param(name)
    module = modules[-1] if modules else ""
    expert_match = _EXPERT.search(name)
    expert = int(expert_match.group(1)) if expert_match else None

    def role_of(role: Role, guess: bool = False) -> TensorRole:
        return TensorRole(role, layer=layer, expert=expert, vision=vision, mtp=mtp, guess_sharded=guess)

    in_experts = "experts" in modules and "shared_experts" not in modules and "shared_expert" not in modules
    if in_experts and module not in REPLICATED_NAMES:
        return role_of(Role.EXPERT)
    if module in QKV_NAMES:
        return role_of(Role.QKV)
    if module in KV_NAMES and not (module in ("wk",) and "indexer" in modules):
        return role_of(Role.KV)
    if module in REPLICATED_NAMES and not (module == "gate" and _is_dense_gate(modules)):
        return role_of(Role.REPLICATED)
    if "norm" in module or module.startswith(("ln", "layernorm")) or module.endswith(("_ln", "layernorm")):
        return role_of(Role.REPLICATED)
    if module in EMBEDDING_NAMES and layer is None:
        return role_of(Role.EMBEDDING)
    if module in LM_HEAD_NAMES and layer is None and len(modules) <= 2 and not vision:
        return role_of(Role.LM_HEAD)
    if module in Q_NAMES or module in COLUMN_NAMES:
        return role_of(Role.COLUMN)
    if module in ROW_NAMES:
        return role_of(Role.ROW)
    if re.fullmatch(r"\d+", module) and len(modules) >= 2 and modules[-2] in ("mlp", "proj", "mm_projector"):
        return role_of(Role.COLUMN if module == "0" else Role.ROW)  # nn.Sequential projectors
    matrix_in_layer = (layer is not None or vision) and param in ("weight", "qweight", "weight_packed", "")
    return role_of(Role.UNKNOWN, matrix_in_layer)


def _is_dense_gate(modules: list[str]) -> bool:
    """``gate`` is a router in MoE blocks (``mlp.gate``, ``block_sparse_moe.gate``) but a column-parallel linear
    in a few dense MLPs (``mlp.gate`` + ``mlp.up`` naming): only ``gate`` directly under a ``*mlp``/``*moe``
    block is the router."""
    return len(modules) >= 2 and modules[-2] in ("ffn", "feed_forward_dense")
