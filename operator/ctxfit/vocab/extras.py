"""Resolve ``spec.lora`` and ``spec.speculative`` into the facts the memory models read (pure).

Adapters: rank and target modules from the spec, else the adapter's ``adapter_config.json`` (PEFT ``LoraConfig``:
``r``, ``target_modules``, ``base_model_name_or_path``), given to the planner the way a model's config.json is
(``ctxfit plan --fetch-config``; the operator's Hub resolution is the seam ``resolve_inputs(adapter_configs=...)``).
Drafts: ``spec.speculative.draft.architecture`` / ``weightsPerGPU``, else the catalog, else the draft's config.json
(``draft_config``); an EAGLE head or MTP layer without a geometry is sized as that many of the target's layers.
A mismatch (rank above the cap, a module the model does not have, another base model) raises ``PlanInputError``
naming the adapter.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from ctxfit.api import Architecture, InferenceServerSpec, SpeculativeMethod, quantity_to_bytes
from ctxfit.catalog import lookup_model

from .hfconfig import architecture_from_hf_config
from .lorageometry import EMBEDDING_MODULES, EXPERTS, LoRAGeometry, targets_experts

ATTENTION_MODULES = {"q_proj": "qkv_proj", "k_proj": "qkv_proj", "v_proj": "qkv_proj", "qkv_proj": "qkv_proj",
                     "o_proj": "o_proj"}
MLP_MODULES = {"gate_proj": "gate_up_proj", "up_proj": "gate_up_proj", "gate_up_proj": "gate_up_proj",
               "down_proj": "down_proj"}
PACKED = {**ATTENTION_MODULES, **MLP_MODULES, **EMBEDDING_MODULES}
"""PEFT module names -> the packed modules both engines give LoRA buffers in a dense GQA model (vLLM
``packed_modules_mapping``, SGLang ``lora/utils.py get_normalized_target_modules``); other layer types add their own
(``LoRAGeometry.known``)."""
LINEAR = ("qkv_proj", "o_proj", "gate_up_proj", "down_proj")
"""What vLLM wraps in a dense GQA model when no target modules are given: every linear module of a decoder layer
(``lora/utils.py get_supported_lora_modules``: "In vLLM, all linear layers support LoRA")."""
ALL_LINEAR = "all-linear"


class ExtrasError(ValueError):
    """A LoRA or draft input that cannot be planned; ``field`` is the spec path."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(f"{field}: {message}")
        self.field = field


@dataclass(frozen=True)
class ResolvedLoRA:
    """What the LoRA buffers depend on.

    Attributes:
        slots: adapters the GPU buffers hold (``maxLoras``).
        rank: the rank the buffers are sized for (``maxLoraRank``, before any engine rounding).
        cpu_slots: adapters kept in host memory (``maxCpuLoras``).
        modules: packed modules the adapters change (union), sorted.
        deployment_modules: ``spec.lora.targetModules`` packed, None when unset.
        adapter_bytes: the largest adapter's weights in 16 bits, bytes (host memory per loaded adapter).
        source: where rank and modules came from.
    """

    slots: int
    rank: int
    cpu_slots: int
    modules: tuple[str, ...]
    deployment_modules: tuple[str, ...] | None
    adapter_bytes: int
    source: str


def pack_modules(names: list[str] | None, known: dict[str, str],
                 linear: tuple[str, ...] = LINEAR) -> tuple[str, ...] | None:
    """PEFT module names -> packed module names (unknown names dropped; ``all-linear`` -> every linear module)."""
    if names is None:
        return None
    if ALL_LINEAR in names:
        return linear
    return tuple(sorted({known[n.rsplit(".", 1)[-1]] for n in names if n.rsplit(".", 1)[-1] in known}))


def _pack(names: list[str] | None, owner: str, base: str, geometry: LoRAGeometry) -> tuple[str, ...] | None:
    known = geometry.known
    if names is None:
        return None
    if ALL_LINEAR in names:
        return geometry.linear + ((EXPERTS,) if geometry.experts else ())
    packed: set[str] = set()
    for name in names:
        short = name.rsplit(".", 1)[-1]
        if short not in known:
            raise ExtrasError(owner, f"targets module {name!r}, which {base}'s decoder layers do not have "
                              f"(LoRA modules ctxfit budgets: {', '.join(sorted(known))})")
        packed.add(known[short])
    return tuple(sorted(packed))


def adapter_bytes(geometry: LoRAGeometry, rank: int, modules: tuple[str, ...]) -> int:
    """An adapter's weights in 16 bits, bytes: rank x (input + output) per module per layer (PEFT lora_A
    ``[r, in]`` and lora_B ``[out, r]``; q/k/v and gate/up each have their own A; each expert its own pair)."""
    total = 0
    for name in modules:
        module = geometry.module(name)
        if module is not None:
            total += rank * (module.slices * module.inp + module.out) * module.layers * 2
        elif name in EMBEDDING_MODULES:
            total += rank * (geometry.vocab + geometry.hidden) * 2
    if targets_experts(geometry, modules) and geometry.experts is not None:
        e = geometry.experts
        total += rank * 3 * (e.hidden + e.intermediate) * e.experts * e.layers * 2
    return total


def resolve_lora(spec: InferenceServerSpec, dims: LoRAGeometry | None,
                 adapter_configs: Mapping[str, Mapping[str, Any]] | None) -> ResolvedLoRA | None:
    """``spec.lora`` resolved (module docstring); None without it.

    Raises:
        ExtrasError: an adapter without a rank, above ``maxLoraRank``, for another base model, or targeting a
            module the model does not have; a model whose sizes are unknown (no config.json).
    """
    lora = spec.lora
    if lora is None:
        return None
    if dims is None:
        raise ExtrasError("spec.lora", f"the LoRA buffers of {spec.model.name} cannot be sized: its hidden size, "
                          "heads, layers (and, for MLA, kv_lora_rank / qk_*_head_dim) are unknown (give a config.json)")
    configs = adapter_configs or {}
    ranks: list[int] = []
    modules: set[str] = set()
    sources: list[str] = []
    for i, adapter in enumerate(lora.adapters):
        where = f"spec.lora.adapters[{i}] ({adapter.name})"
        config = configs.get(adapter.name) or {}
        rank = adapter.rank if adapter.rank is not None else config.get("r")
        if not isinstance(rank, int) or rank < 1:
            raise ExtrasError(where, "rank unknown: set rank or give its adapter_config.json")
        if lora.max_lora_rank is not None and rank > lora.max_lora_rank:
            raise ExtrasError(where, f"rank {rank} is above lora.maxLoraRank {lora.max_lora_rank}")
        base = config.get("base_model_name_or_path")
        if isinstance(base, str) and base.count("/") == 1 and base.lower() != spec.model.name.lower():
            entry = lookup_model(base)
            if entry is None or entry.name.lower() != (lookup_model(spec.model.name) or entry).name.lower():
                raise ExtrasError(where, f"was trained on {base}, not {spec.model.name}")
        targets = adapter.target_modules if adapter.target_modules is not None else config.get("target_modules")
        if isinstance(targets, str):
            targets = [targets]
        packed = _pack(list(targets) if isinstance(targets, list) else None, where, spec.model.name, dims)
        modules.update(packed or dims.linear + ((EXPERTS,) if dims.experts else ()))
        ranks.append(rank)
        sources.append("spec" if adapter.rank is not None else "adapter_config.json")
    deployment = _pack(lora.target_modules, "spec.lora.targetModules", spec.model.name, dims)
    rank = lora.max_lora_rank or max(ranks)
    slots = lora.slots
    biggest = max(adapter_bytes(dims, r, tuple(sorted(modules))) for r in ranks)
    return ResolvedLoRA(slots, rank, lora.max_cpu_loras or slots, tuple(sorted(modules)), deployment, biggest,
                        f"ranks from {', '.join(sorted(set(sources)))}")


def hub_draft(spec: InferenceServerSpec) -> tuple[str, str] | None:
    """(repo, revision) of a draft that must be resolved from the Hub like the target (config.json and the
    safetensors headers): an ``owner/name`` draft not in the catalog whose ``architecture`` or ``weightsPerGPU`` is
    unset; None for no draft, a catalog draft, a path, or a draft the spec describes."""
    draft = spec.speculative.draft if spec.speculative is not None else None
    if draft is None or (draft.architecture is not None and draft.weights_per_gpu is not None):
        return None
    if lookup_model(draft.name) is not None or draft.name.count("/") != 1 or draft.name.startswith(("/", ".")):
        return None
    return draft.name, draft.revision or "main"


@dataclass(frozen=True)
class ResolvedDraft:
    """What speculative decoding adds.

    Attributes:
        method: the method.
        tokens: draft tokens per step (``numSpeculativeTokens``).
        layers: attention layers the draft adds (0 for ngram).
        architecture: the draft's KV geometry, None when it is that many of the target's layers.
        weights_per_gpu_bytes: draft (or MTP) weights on one GPU, bytes.
        source: where the weights and geometry came from.
    """

    method: SpeculativeMethod
    tokens: int
    layers: int
    architecture: Architecture | None
    weights_per_gpu_bytes: int
    source: str


def _config_params(config: Mapping[str, Any]) -> int | None:
    """Parameters of a decoder from config.json: layers x (attention + MLP) + embeddings (+ an untied head)."""
    try:
        hidden = int(config["hidden_size"])
        layers = int(config.get("num_hidden_layers") or 1)
        heads = int(config.get("num_attention_heads") or 1)
        kv = int(config.get("num_key_value_heads") or heads)
        head_dim = int(config.get("head_dim") or hidden // heads)
        inter = int(config.get("intermediate_size") or 4 * hidden)
        vocab = int(config.get("vocab_size") or 0)
    except (KeyError, TypeError, ValueError):
        return None
    per_layer = hidden * (heads + 2 * kv) * head_dim + heads * head_dim * hidden + 3 * hidden * inter
    head = 0 if config.get("tie_word_embeddings") else vocab * hidden
    return layers * per_layer + vocab * hidden + head


def resolve_draft(spec: InferenceServerSpec, target_weights_per_gpu: int, target_layers: int,
                  mtp_layers: int | None, draft_config: Mapping[str, Any] | None,
                  draft_weights: tuple[int, str] | None = None) -> ResolvedDraft | None:
    """``spec.speculative`` resolved (module docstring); None without it.

    Args:
        target_weights_per_gpu: the target's weights on one GPU (MTP layers are estimated as that share of it).
        target_layers: the target's decoder layers.
        mtp_layers: config.json ``num_nextn_predict_layers`` of the target, None when unknown.
        draft_config: the draft's config.json, None when not given.
        draft_weights: (bytes per GPU, source) from the draft's resolved checkpoint (``ctxfit.hub`` +
            ``engines.weights.checkpoint_weights``), None when not resolved.

    Raises:
        ExtrasError: a draft whose weights cannot be estimated.
    """
    speculative = spec.speculative
    if speculative is None:
        return None
    method = speculative.method
    tp = spec.parallelism.tensor
    if method is SpeculativeMethod.NGRAM:
        return ResolvedDraft(method, speculative.num_speculative_tokens, 0, None, 0, "n-gram lookup: no draft")
    if method is SpeculativeMethod.MTP and speculative.draft is None:
        layers = speculative.mtp_layers or mtp_layers or 1
        weights = -(-target_weights_per_gpu * layers // max(1, target_layers))
        return ResolvedDraft(method, speculative.num_speculative_tokens, layers, None, weights,
                             f"{layers} MTP layer(s) ~ {layers}/{target_layers} of the target's weights")
    draft = speculative.draft
    assert draft is not None
    entry = lookup_model(draft.name)
    architecture = draft.architecture or (entry.architecture if entry is not None else None)
    if architecture is None and draft_config is not None:
        try:
            architecture = architecture_from_hf_config(dict(draft_config))
        except ValueError as exc:
            raise ExtrasError("spec.speculative.draft.architecture", f"draft config.json: {exc}") from exc
    if draft.weights_per_gpu is not None:
        weights, source = quantity_to_bytes(draft.weights_per_gpu), "spec.speculative.draft.weightsPerGPU"
    elif draft_weights is not None:
        weights, source = draft_weights
    elif entry is not None and entry.weights_total_bytes is not None:
        weights, source = -(-entry.weights_total_bytes // tp), f"catalog checkpoint of {draft.name} / TP {tp}"
    elif draft_config is not None and _config_params(draft_config) is not None:
        params = _config_params(draft_config) or 0
        weights, source = -(-params * 2 // tp), f"{draft.name} config.json: {params / 1e9:.2f}B params x 2 B / TP {tp}"
    else:
        raise ExtrasError("spec.speculative.draft.weightsPerGPU",
                          f"cannot estimate the weights of {draft.name}; set weightsPerGPU or give its config.json")
    layers = architecture.num_layers if architecture is not None and architecture.num_layers else 1
    if method in (SpeculativeMethod.EAGLE, SpeculativeMethod.EAGLE3) and architecture is None:
        layers = int((draft_config or {}).get("num_hidden_layers") or 1)
    return ResolvedDraft(method, speculative.num_speculative_tokens, layers, architecture, weights, source)
