"""The linear modules LoRA can wrap in a model, with their shapes (pure; config.json field names).

The engines give a LoRA buffer to every wrapped linear module of every layer, and (vLLM 0.12+, SGLang 0.5.10+) to the
routed experts of a MoE layer. Which modules a model has depends on its layer types, read from config.json:

- attention, GQA/MHA: ``qkv_proj`` (column, 3 slices: hidden -> (heads + 2 kv_heads) x head_dim), ``o_proj`` (row).
- attention, MLA (DeepSeek-V2/V3, Kimi-K2; vLLM ``deepseek_v2.DeepseekV2MLAAttention``, SGLang
  ``lora/utils.get_default_hidden_dim`` 0.5.12+): with ``q_lora_rank`` a ``fused_qkv_a_proj`` (replicated, 2 slices:
  hidden -> q_lora_rank + kv_lora_rank + qk_rope_head_dim) and ``q_b_proj`` (column: q_lora_rank -> heads x
  (qk_nope + qk_rope)); without it ``q_proj`` (column: hidden -> heads x (qk_nope + qk_rope)) and
  ``kv_a_proj_with_mqa`` (replicated: hidden -> kv_lora_rank + qk_rope); then ``kv_b_proj`` (column: kv_lora_rank ->
  heads x (qk_nope + v_head_dim)) and ``o_proj`` (row: heads x v_head_dim -> hidden).
- MLP: ``gate_up_proj`` (column, 2 slices: hidden -> 2 x intermediate), ``down_proj`` (row). In a MoE layer the
  shared experts are this MLP at ``n_shared_experts x moe_intermediate_size`` (DeepSeek) or
  ``shared_expert_intermediate_size`` (Qwen2-MoE), the router ``gate`` is a replicated linear (hidden -> experts),
  and the routed experts are ``ExpertBlock`` (vLLM ``lora/layers/fused_moe.py FusedMoEWithLoRA``).
- hybrid mixers on their state layers: Mamba-2 ``in_proj`` (column: hidden -> 2 d_inner + 2 n_groups d_state +
  heads) and ``out_proj`` (row: d_inner -> hidden); Mamba-1 ``in_proj`` (2 slices: hidden -> 2 d_inner) and
  ``out_proj``; Gated DeltaNet ``in_proj_qkvz`` (4 slices: hidden -> 2 key_dim + 2 value_dim), ``in_proj_ba``
  (2 slices: hidden -> 2 value heads) and ``out_proj`` (row: value_dim -> hidden); vLLM ``mamba_mixer2.py``,
  ``qwen3_next.py``, SGLang ``lora/utils.py`` stacked ranks. Attention modules sit on the attention layers only;
  Nemotron-H's MLP sits on its ``-`` (and ``E``) layers only.
- ``embed_tokens`` / ``lm_head``: ``[vocab, hidden]`` embedding LoRA (no layers).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ctxfit.catalog import MoE
from ctxfit.catalog.hybrid import HybridState

from .hybridconfig import attention_layer_flags

EMBEDDING_MODULES = {"embed_tokens": "embed_tokens", "lm_head": "lm_head"}
EXPERTS = "experts"
"""The pseudo-module of a MoE layer's routed experts (targeted by ``gate_proj``/``up_proj``/``down_proj``,
``w1``/``w2``/``w3`` or ``experts``)."""


@dataclass(frozen=True)
class LinearModule:
    """One packed linear module: ``inp`` -> ``out`` features, ``slices`` stacked LoRA A matrices, on ``layers``
    layers. ``row``: row parallel (input split by TP); ``replicated``: not split; else column parallel."""

    name: str
    inp: int
    out: int
    slices: int
    layers: int
    row: bool = False
    replicated: bool = False

    def local(self, tp: int) -> tuple[int, int]:
        """(input, output) features on one TP rank."""
        if self.replicated:
            return self.inp, self.out
        return (self.inp // tp, self.out) if self.row else (self.inp, self.out // tp)


@dataclass(frozen=True)
class ExpertBlock:
    """The routed experts of the MoE layers: ``experts`` x (w1, w3: hidden -> intermediate; w2: intermediate ->
    hidden) on ``layers`` layers."""

    experts: int
    hidden: int
    intermediate: int
    layers: int


@dataclass(frozen=True)
class LoRAGeometry:
    """Every module LoRA can wrap in one model (module docstring).

    Attributes:
        hidden: config.json ``hidden_size``.
        vocab: ``vocab_size`` (0 when unknown: no embedding LoRA is sized).
        layers: ``num_hidden_layers``.
        modules: the packed linear modules (one entry per name; the layers that have it).
        experts: the routed experts of the MoE layers, None for a dense model.
        attention: ``gqa`` or ``mla``.
        hybrid: the mixer kind of a hybrid model, None otherwise.
        known: PEFT module names (last path component) -> the packed module they load into.
    """

    hidden: int
    vocab: int
    layers: int
    modules: tuple[LinearModule, ...]
    experts: ExpertBlock | None
    attention: str
    hybrid: str | None
    known: dict[str, str]

    @property
    def linear(self) -> tuple[str, ...]:
        """Every packed linear module name (what vLLM wraps with no target modules), sorted."""
        return tuple(sorted(m.name for m in self.modules))

    def module(self, name: str) -> LinearModule | None:
        """The packed module ``name``, None when the model has none."""
        return next((m for m in self.modules if m.name == name), None)


def _int(config: dict[str, Any], *names: str) -> int:
    for name in names:
        value = config.get(name)
        if isinstance(value, int) and value > 0:
            return value
    return 0


def _attention(config: dict[str, Any], hidden: int, heads: int, kv_heads: int, head_dim: int, mla: bool,
               layers: int) -> tuple[list[LinearModule], dict[str, str]]:
    if not mla:
        q, kv = heads * head_dim, kv_heads * head_dim
        known = {n: "qkv_proj" for n in ("q_proj", "k_proj", "v_proj", "qkv_proj")} | {"o_proj": "o_proj"}
        return [LinearModule("qkv_proj", hidden, q + 2 * kv, 3, layers),
                LinearModule("o_proj", q, hidden, 1, layers, row=True)], known
    q_rank, kv_rank = _int(config, "q_lora_rank"), _int(config, "kv_lora_rank")
    nope, rope, v = _int(config, "qk_nope_head_dim"), _int(config, "qk_rope_head_dim"), _int(config, "v_head_dim")
    if not (kv_rank and nope and rope and v):
        raise ValueError("LoRA on an MLA model is sized from config.json's kv_lora_rank, qk_nope_head_dim, "
                         "qk_rope_head_dim and v_head_dim; resolve the model's config.json (Hub or a directory)")
    qk = heads * (nope + rope)
    modules = [LinearModule("kv_b_proj", kv_rank, heads * (nope + v), 1, layers),
               LinearModule("o_proj", heads * v, hidden, 1, layers, row=True)]
    known = {"kv_b_proj": "kv_b_proj", "o_proj": "o_proj"}
    if q_rank:
        modules += [LinearModule("fused_qkv_a_proj", hidden, q_rank + kv_rank + rope, 2, layers, replicated=True),
                    LinearModule("q_b_proj", q_rank, qk, 1, layers)]
        known |= {"q_a_proj": "fused_qkv_a_proj", "kv_a_proj_with_mqa": "fused_qkv_a_proj",
                  "fused_qkv_a_proj": "fused_qkv_a_proj", "q_b_proj": "q_b_proj"}
    else:
        modules += [LinearModule("q_proj", hidden, qk, 1, layers),
                    LinearModule("kv_a_proj_with_mqa", hidden, kv_rank + rope, 1, layers, replicated=True)]
        known |= {"q_proj": "q_proj", "kv_a_proj_with_mqa": "kv_a_proj_with_mqa"}
    return modules, known


def _mixer(state: HybridState, hidden: int) -> tuple[list[LinearModule], dict[str, str]]:
    n = state.state_layers
    if state.kind == "mamba2":
        inner = state.num_heads * state.head_dim
        width = 2 * inner + 2 * state.n_groups * state.state_size + state.num_heads
        return [LinearModule("in_proj", hidden, width, 1, n),
                LinearModule("out_proj", inner, hidden, 1, n, row=True)], {"in_proj": "in_proj",
                                                                           "out_proj": "out_proj"}
    if state.kind == "mamba1":
        inner = state.intermediate_size
        return [LinearModule("in_proj", hidden, 2 * inner, 2, n),
                LinearModule("out_proj", inner, hidden, 1, n, row=True)], {"in_proj": "in_proj",
                                                                           "out_proj": "out_proj"}
    key_dim, value_dim = state.n_groups * state.key_head_dim, state.num_heads * state.head_dim
    return [LinearModule("in_proj_qkvz", hidden, 2 * key_dim + 2 * value_dim, 4, n),
            LinearModule("in_proj_ba", hidden, 2 * state.num_heads, 2, n),
            LinearModule("out_proj", value_dim, hidden, 1, n, row=True)], {
        "in_proj_qkvz": "in_proj_qkvz", "in_proj_ba": "in_proj_ba", "out_proj": "out_proj"}


def _mlp_layers(config: dict[str, Any], layers: int) -> int:
    pattern = config.get("hybrid_override_pattern")
    if isinstance(pattern, str):
        return sum(1 for c in pattern if c in "-E")
    return layers


def lora_geometry(config: dict[str, Any], *, hidden: int | None, heads: int | None, kv_heads: int | None,
                  head_dim: int | None, intermediate: int | None, vocab: int | None, layers: int | None,
                  mla: bool, moe: MoE | None, hybrid: HybridState | None) -> LoRAGeometry | None:
    """The model's LoRA geometry (module docstring); None when a size it needs is unknown.

    Raises:
        ValueError: an MLA config without its low-rank sizes.
    """
    if not hidden or not layers or not heads or (not mla and not head_dim):
        return None
    flags = attention_layer_flags(config) if hybrid is not None else None
    attention_layers = sum(flags) if flags else (hybrid.total_layers - hybrid.state_layers if hybrid else layers)
    modules, known = _attention(config, hidden, heads, kv_heads or heads, head_dim or 0, mla, attention_layers)
    if hybrid is not None:
        mixer, mixer_known = _mixer(hybrid, hidden)
        modules += mixer
        known |= mixer_known
    mlp_layers = _mlp_layers(config, layers)
    experts = None
    mlp_known = {n: "gate_up_proj" for n in ("gate_proj", "up_proj", "gate_up_proj")} | {"down_proj": "down_proj"}
    if moe is not None:
        dense = min(mlp_layers, _int(config, "first_k_dense_replace") + len(config.get("mlp_only_layers") or ()))
        moe_layers = mlp_layers - dense
        experts = ExpertBlock(moe.experts, hidden, moe.intermediate_size, moe_layers)
        shared = moe.shared_intermediate_size or _int(config, "n_shared_experts") * moe.intermediate_size
        dense_inter = intermediate if dense and intermediate and intermediate != moe.intermediate_size else 0
        if dense_inter or shared:
            # one packed entry: the buffers of the dense layers plus the shared experts of the MoE layers
            width = (dense * dense_inter + moe_layers * shared) // max(1, dense * bool(dense_inter) +
                                                                         moe_layers * bool(shared))
            count = dense * bool(dense_inter) + moe_layers * bool(shared)
            modules += [LinearModule("gate_up_proj", hidden, 2 * width, 2, count),
                        LinearModule("down_proj", width, hidden, 1, count, row=True)]
        modules.append(LinearModule("gate", hidden, moe.experts, 1, moe_layers, replicated=True))
        known |= mlp_known | {"gate": "gate", "w1": EXPERTS, "w2": EXPERTS, "w3": EXPERTS, EXPERTS: EXPERTS}
    elif intermediate:
        modules += [LinearModule("gate_up_proj", hidden, 2 * intermediate, 2, mlp_layers),
                    LinearModule("down_proj", intermediate, hidden, 1, mlp_layers, row=True)]
        known |= mlp_known
    known |= EMBEDDING_MODULES
    return LoRAGeometry(hidden, vocab or 0, layers, tuple(modules), experts, "mla" if mla else "gqa",
                        hybrid.kind if hybrid else None, known)


def targets_experts(geometry: LoRAGeometry, modules: tuple[str, ...]) -> bool:
    """Whether ``modules`` (packed names) reach the routed experts: the MLP names or ``experts`` on a MoE model."""
    return geometry.experts is not None and bool({"gate_up_proj", "down_proj", EXPERTS} & set(modules))
