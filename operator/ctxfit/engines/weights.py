"""Per-GPU weight bytes from a checkpoint's tensor shapes, with an engine's sharding rules (pure).

Every tensor is placed as the engine's parallel layers place it (roles: ``ctxfit.vocab.tensorroles``):

- vocab-parallel embedding / LM head: rows padded to ``vocab_padding`` (64 in both engines:
  ``DEFAULT_VOCAB_PADDING_SIZE`` in vLLM ``model_executor/layers/vocab_parallel_embedding.py`` and SGLang
  ``srt/layers/vocab_parallel_embedding.py``; ``pad_vocab_size``), then ``padded / TP`` rows per rank; a tied head
  (``tie_word_embeddings``) is the embedding itself (vLLM ``llama.py``: ``lm_head.tie_weights(embed_tokens)``, the
  loader skips ``lm_head.``), except that under PP the last stage holds its own copy;
- column-parallel: every non-scalar tensor / TP; QKV: the query part / TP and the KV part / min(TP, KV heads)
  (``QKVParallelLinear``: one KV head per rank, replicated, once TP >= KV heads);
- row-parallel: weights and input-dimension scales / TP; bias and per-output-channel scales whole;
- routed experts (``FusedMoE``, vLLM ``fused_moe/layer.py``): without EP, all experts with the intermediate size /
  TP (vLLM flattens TP across DP for experts: ``FusedMoEParallelConfig.flatten_tp_across_dp_and_pcp``); with EP,
  whole experts, the busiest rank holding ceil(E / EP) (``determine_expert_map``);
- replicated tensors (norms, routers, MLA down-projections) whole on every rank;
- PP: decoder layers split by the engine's partition function; embeddings on the first stage, the final norm and
  the head on the last; the busiest stage is the result;
- tensors the engine does not load by default (next-n / MTP layers) are left out.

Dtypes: unquantized float tensors are loaded in the serving dtype (``--dtype``; ``auto`` = config ``torch_dtype``,
float32 configs downcast to bfloat16: vLLM ``config/model.py::_resolve_auto_dtype``); quantized tensors and their
scales at their stored size. In-flight quantization (``--quantization fp8``: 1 byte per linear weight element;
``bitsandbytes``: NF4 with double-quantized absmax, 0.5 + 1/64 + 4/16384 bytes) applies to the linear weights only.
"""

from __future__ import annotations

import dataclasses
import weakref
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from ctxfit.api import InferenceServerSpec
from ctxfit.vocab.checkpoint import Checkpoint, TensorGroup, checkpoint_format, is_quantized
from ctxfit.vocab.safetensors import FLOAT_DTYPES
from ctxfit.vocab.tensorroles import ROW_NAMES, Role, TensorRole, classify

SCALE_PARAMS = frozenset({
    "weight_scale", "weight_scale_inv", "input_scale", "scales", "qzeros", "g_idx", "weight_zero_point",
    "weight_global_scale", "input_global_scale", "weight_scale_2", "k_scale", "v_scale", "absmax", "quant_map",
    "nested_absmax", "nested_quant_map", "SCB", "zeros", "output_scale", "weight_shape", "perm"})
"""Quantization side tensors: kept at their stored dtype and size (the engines create them in that dtype)."""

INFLIGHT_BYTES_PER_ELEMENT = {"fp8": 1.0, "fbgemm_fp8": 1.0, "ptpc_fp8": 1.0, "bitsandbytes": 0.5 + 1 / 64 + 4 / 16384,
                              "bitsandbytes-8bit": 1.0, "int8": 1.0, "experts_int8": 1.0}
"""Bytes per linear-weight element after in-flight quantization of an unquantized checkpoint (vLLM
``Fp8LinearMethod.process_weights_after_loading``; ``BitsAndBytesModelLoader`` NF4 blocksize 64, compressed
statistics)."""

SERVE_DTYPE_BYTES = {"auto": 2, "half": 2, "float16": 2, "bfloat16": 2, "float": 4, "float32": 4}

FP32_PARAMS = frozenset({"e_score_correction_bias", "expert_bias", "A_log"})
"""Float parameters the engines create in float32 whatever ``--dtype`` is: the MoE routers' correction bias (vLLM
0.19 ``deepseek_v2.py``, ``glm4_moe.py``, ``nemotron_h.py``, ``minimax_m2.py``, ``ernie45_moe.py``,
``lfm2_moe.py``, ``exaone_moe.py``: ``e_score_correction_bias``; ``bailing_moe.py``, ``afmoe.py``: ``expert_bias``;
SGLang 0.4.10+ ``deepseek_v2.py``) and Mamba2's ``A`` (``layers/mamba/mamba_mixer2.py``, loaded from ``A_log``)."""


@dataclass(frozen=True)
class ShardingRules:
    """What differs between engines.

    Attributes:
        engine: ``vllm`` or ``sglang``.
        vocab_padding: embedding rows are padded to a multiple of this before the TP split.
        partition: (num_layers, pp) -> layers per stage.
        experts_tp_across_dp: experts are split over TP x DP (vLLM) rather than TP.
        rope_cache: the engine keeps a [max_position, rotary_dim] cos/sin buffer in the serving dtype.
        mxfp4_padding: (hidden multiple, intermediate-per-rank multiple) MXFP4 expert weights are padded to, or None.
        source: file and function the rules come from.
    """

    engine: str
    vocab_padding: int
    partition: Callable[[int, int], list[int]]
    experts_tp_across_dp: bool
    rope_cache: bool
    source: str
    mxfp4_padding: tuple[int, int] | None = None


@dataclass(frozen=True)
class Layout:
    """tensor / pipeline / data parallel sizes and expert parallelism on or off."""

    tp: int = 1
    pp: int = 1
    dp: int = 1
    ep: bool = False


@dataclass(frozen=True)
class ModelShape:
    """The config.json numbers sharding needs (language model: ``text_config`` for multimodal models)."""

    num_layers: int | None
    num_heads: int | None
    num_kv_heads: int | None
    head_dim: int | None
    vocab_size: int | None
    tie_word_embeddings: bool | None
    max_position: int | None
    rotary_dim: int | None
    num_experts: int | None
    torch_dtype: str | None

    @classmethod
    def from_config(cls, config: dict[str, Any]) -> ModelShape:
        """From a config.json dict (top level or ``text_config``/``llm_config``/``language_config``)."""
        text = language_config(config)
        heads = _int(text, "num_attention_heads", "n_head", "num_heads")
        kv = _int(text, "num_key_value_heads", "multi_query_group_num", "num_kv_heads", "n_head_kv") or heads
        if text.get("multi_query") is True and not text.get("num_kv_heads"):
            kv = 1
        hidden = _int(text, "hidden_size", "n_embd", "d_model")
        head_dim = _int(text, "head_dim") or (hidden // heads if hidden and heads else None)
        rotary = _int(text, "qk_rope_head_dim")
        if rotary is None and head_dim:
            factor = text.get("partial_rotary_factor", 1.0)
            rotary = int(head_dim * factor) if isinstance(factor, int | float) and 0 < factor <= 1 else head_dim
        tie = text.get("tie_word_embeddings", config.get("tie_word_embeddings"))
        experts = _int(text, "n_routed_experts", "num_local_experts", "num_experts", "moe_num_experts")
        dtype = text.get("torch_dtype") or text.get("dtype") or config.get("torch_dtype") or config.get("dtype")
        from ctxfit.vocab.hfconfig import derived_max_model_len

        return cls(num_layers=_int(text, "num_hidden_layers", "n_layer", "num_layers"), num_heads=heads,
                   num_kv_heads=kv, head_dim=head_dim, vocab_size=_int(text, "vocab_size", "padded_vocab_size"),
                   tie_word_embeddings=tie if isinstance(tie, bool) else None,
                   max_position=derived_max_model_len(text), rotary_dim=rotary,
                   num_experts=experts, torch_dtype=str(dtype) if isinstance(dtype, str) else None)


def language_config(config: dict[str, Any]) -> dict[str, Any]:
    """The language model's config: ``text_config`` / ``llm_config`` / ``language_config`` / ``thinker_config
    .text_config`` of multimodal configs (merged over nothing: vLLM reads ``get_text_config()``), else the config."""
    for key in ("text_config", "llm_config", "language_config"):
        if isinstance(config.get(key), dict):
            return dict(config[key])
    thinker = config.get("thinker_config")
    if isinstance(thinker, dict) and isinstance(thinker.get("text_config"), dict):
        return dict(thinker["text_config"])
    return config


def _int(config: dict[str, Any], *keys: str) -> int | None:
    for key in keys:
        value = config.get(key)
        if isinstance(value, int) and not isinstance(value, bool) and value > 0:
            return value
    return None


@dataclass(frozen=True)
class WeightEstimate:
    """Weights of the busiest GPU and how they were found.

    Attributes:
        per_gpu_bytes: bytes on the busiest GPU (max over pipeline stages).
        stage_bytes: per pipeline stage, bytes per GPU.
        checkpoint_bytes: stored tensor bytes (all files).
        skipped_bytes: stored bytes the engine does not load (MTP / next-n layers).
        guessed_bytes: stored bytes of tensors of no known role (placed by the matrix-in-a-layer rule).
        buffers_bytes: non-parameter buffers counted (rotary cos/sin cache).
        source: one line for the plan's reasons.
    """

    per_gpu_bytes: int
    stage_bytes: tuple[int, ...]
    checkpoint_bytes: int
    skipped_bytes: int = 0
    guessed_bytes: int = 0
    buffers_bytes: int = 0
    source: str = ""
    notes: tuple[str, ...] = field(default_factory=tuple)


def _serve_bytes(group: TensorGroup, param: str, serve: int, quantized: bool, inflight: float | None,
                 role: TensorRole) -> float:
    """Bytes per element of a group as loaded."""
    stored = group.instance_bytes / max(1, _numel(group.shape))
    if group.dtype not in FLOAT_DTYPES:
        return stored  # packed ints, fp8, fp4, uint8 blocks: as stored
    if param in SCALE_PARAMS or (quantized and param not in ("weight", "bias", "")):
        return stored
    if group.example().rsplit(".", 1)[-1] in FP32_PARAMS:
        return 4.0
    linear = role.role in (Role.QKV, Role.KV, Role.COLUMN, Role.ROW, Role.EXPERT) or role.guess_sharded
    if inflight is not None and linear and param == "weight" and len(group.shape) >= 2:
        return inflight
    return float(serve)


def _numel(shape: tuple[int, ...]) -> int:
    n = 1
    for d in shape:
        n *= d
    return n


def _param(name: str) -> str:
    from ctxfit.vocab.tensorroles import _module_and_param

    return _module_and_param(name)[1]


def _module(name: str) -> str:
    from ctxfit.vocab.tensorroles import _module_and_param

    modules = _module_and_param(name)[0]
    return modules[-1] if modules else ""


def per_rank_fraction(group: TensorGroup,  # noqa: C901 - one rule per tensor role
                      role: TensorRole, shape: ModelShape, layout: Layout,
                      rules: ShardingRules) -> float:
    """The fraction of one instance of ``group`` that the busiest TP/EP rank holds."""
    tp = layout.tp
    numel = _numel(group.shape)
    name = group.example()
    param = _param(name)
    if numel <= 1 or (tp == 1 and not (role.role is Role.EXPERT and layout.ep)):
        if role.role in (Role.EMBEDDING, Role.LM_HEAD) and group.shape:
            rows = group.shape[0]
            return _pad(rows, rules.vocab_padding) / rows
        return 1.0
    r = role.role
    if r in (Role.EMBEDDING, Role.LM_HEAD):
        rows = group.shape[0]
        return _pad(rows, rules.vocab_padding) / tp / rows
    if r is Role.REPLICATED or (r is Role.UNKNOWN and not role.guess_sharded):
        return 1.0
    if r is Role.EXPERT:
        experts = shape.num_experts or (group.shape[0] if len(group.shape) >= 3 else None)
        if layout.ep:
            ep = tp * (layout.dp if rules.experts_tp_across_dp else 1)
            if not experts or ep <= 1:
                return 1.0
            return -(-experts // ep) / experts
        split = tp * (layout.dp if rules.experts_tp_across_dp else 1)
        if param == "bias" and _module(name) in ROW_NAMES:
            return 1.0
        return 1.0 / split
    if param == "g_idx" or param == "perm":
        return 1.0 / tp if r is Role.ROW else 1.0
    if r is Role.ROW:
        if param == "bias" or len(group.shape) == 1 or (len(group.shape) == 2 and 1 in group.shape):
            return 1.0
        return 1.0 / tp
    if r is Role.KV and not role.vision:
        return 1.0 / min(tp, shape.num_kv_heads or tp)
    if r is Role.QKV and not role.vision and shape.num_heads and shape.num_kv_heads:
        q, kv = shape.num_heads, 2 * shape.num_kv_heads
        return q / (q + kv) / tp + kv / (q + kv) / min(tp, shape.num_kv_heads)
    return 1.0 / tp  # column-parallel, QKV without head counts, guessed linear


def _pad(rows: int, padding: int) -> int:
    return -(-rows // padding) * padding


def estimate_weights(checkpoint: Checkpoint,  # noqa: C901 - to split
                     config: dict[str, Any], layout: Layout, rules: ShardingRules, *,
                     dtype: str = "auto", inflight_quantization: str | None = None) -> WeightEstimate:
    """Per-GPU weight bytes of ``checkpoint`` served with ``layout`` under ``rules``.

    Args:
        checkpoint: tensor groups from the safetensors headers (must have groups).
        config: config.json dict.
        layout: TP / PP / DP / EP.
        rules: the engine's rules (``ctxfit.engines.vllm.weights.rules``, ``...sglang.weights.rules``).
        dtype: the engine's ``--dtype`` (``auto`` reads ``torch_dtype``; float32 configs serve in bfloat16).
        inflight_quantization: ``--quantization`` of an unquantized checkpoint (``fp8``, ``bitsandbytes``), else None.

    Raises:
        ValueError: a checkpoint without tensors (use its file sizes instead).
    """
    if not checkpoint.groups:
        raise ValueError("the checkpoint has no safetensors tensors")
    shape = ModelShape.from_config(config)
    if shape.tie_word_embeddings is None:  # not in config.json: tied exactly when the checkpoint stores no head
        heads = [g for g in checkpoint.groups
                 if classify(g.example(), num_layers=shape.num_layers).role is Role.LM_HEAD]
        shape = dataclasses.replace(shape, tie_word_embeddings=not heads)
    serve = SERVE_DTYPE_BYTES.get(dtype.lower(), 2)
    quantized = is_quantized(config, checkpoint)
    inflight = INFLIGHT_BYTES_PER_ELEMENT.get(inflight_quantization or "") if not quantized else None
    num_layers = shape.num_layers
    mxfp4 = _mxfp4_factor(config, layout, rules) if checkpoint_format(config, checkpoint) == "mxfp4" else None
    stages = rules.partition(num_layers, layout.pp) if num_layers and layout.pp > 1 else [num_layers or 0]
    bounds: list[int] = []
    total = 0
    for n in stages:
        total += n
        bounds.append(total)
    stage_bytes = [0.0] * len(stages)
    skipped = guessed = 0
    tied_embedding = 0.0
    for group in checkpoint.groups:
        role = classify(group.example(), num_layers=num_layers)
        if role.mtp:
            skipped += group.nbytes
            continue
        if role.role is Role.LM_HEAD and shape.tie_word_embeddings:
            continue
        if role.role is Role.UNKNOWN:
            guessed += group.nbytes
        param = _param(group.example())
        per_element = _serve_bytes(group, param, serve, quantized, inflight, role)
        instance = per_element * _numel(group.shape) * per_rank_fraction(group, role, shape, layout, rules)
        if role.role is Role.EXPERT and mxfp4 is not None:
            instance *= mxfp4
        if role.role is Role.EMBEDDING and shape.tie_word_embeddings:
            tied_embedding = instance * group.count
        if group.layers and not role.vision and role.layer is not None:
            for layer in group.layers:
                stage_bytes[_stage_of(layer, bounds)] += instance * group.per_layer
        elif role.role is Role.LM_HEAD or (role.role is Role.REPLICATED and not role.vision and _is_final_norm(group)):
            stage_bytes[-1] += instance * group.count
        else:
            stage_bytes[0] += instance * group.count
    if shape.tie_word_embeddings and len(stages) > 1 and tied_embedding:
        stage_bytes[-1] += tied_embedding  # the last stage builds its own head from the tied embedding
    buffers = 0
    if rules.rope_cache and shape.max_position and shape.rotary_dim:
        buffers = shape.max_position * shape.rotary_dim * serve
        stage_bytes = [b + buffers for b in stage_bytes]
    per_stage = tuple(round(b) for b in stage_bytes)
    notes: list[str] = []
    if skipped:
        notes.append(f"{skipped / 2**30:.2f} GiB of MTP/next-n tensors not loaded")
    if guessed:
        notes.append(f"{guessed / 2**30:.2f} GiB of tensors of no known module name placed by shape")
    where = f"TP {layout.tp}" + (f" x PP {layout.pp}" if layout.pp > 1 else "") + (" EP" if layout.ep else "")
    source = (f"checkpoint tensors ({checkpoint.tensor_bytes / 2**30:.2f} GiB stored) sharded as {rules.engine} "
              f"loads them at {where}" + (f"; {'; '.join(notes)}" if notes else ""))
    return WeightEstimate(per_gpu_bytes=max(per_stage), stage_bytes=per_stage,
                          checkpoint_bytes=checkpoint.tensor_bytes, skipped_bytes=skipped, guessed_bytes=guessed,
                          buffers_bytes=buffers, source=source, notes=tuple(notes))


def _stage_of(layer: int, bounds: list[int]) -> int:
    for i, end in enumerate(bounds):
        if layer < end:
            return i
    return len(bounds) - 1


def _is_final_norm(group: TensorGroup) -> bool:
    """The language model's final norm (``model.norm``, ``transformer.ln_f``): a replicated tensor outside the layers
    that sits on the last stage."""
    parts = group.pattern.split(".")
    return not group.layers and len(parts) >= 2 and ("norm" in parts[-2] or parts[-2] == "ln_f")


def _mxfp4_factor(config: dict[str, Any], layout: Layout, rules: ShardingRules) -> float | None:
    """Growth of MXFP4 expert tensors from the engine's padding of hidden and per-rank intermediate sizes."""
    if rules.mxfp4_padding is None:
        return None
    text = language_config(config)
    hidden, inter = _int(text, "hidden_size"), _int(text, "intermediate_size", "moe_intermediate_size")
    if not hidden or not inter:
        return None
    per_rank = inter // (layout.tp * (layout.dp if rules.experts_tp_across_dp else 1)) if not layout.ep else inter
    h_pad, i_pad = rules.mxfp4_padding
    return (_pad(hidden, h_pad) / hidden) * (_pad(max(1, per_rank), i_pad) / max(1, per_rank))


def rules_for(kind: str) -> ShardingRules:
    """The sharding rules of engine ``kind`` (``vllm`` or ``sglang``)."""
    if kind == "sglang":
        from .sglang.weights import RULES as SGLANG

        return SGLANG
    from .vllm.weights import RULES as VLLM

    return VLLM


def _flag(args: list[str], name: str) -> str | None:
    for i, arg in enumerate(args):
        if arg == name and i + 1 < len(args):
            return args[i + 1].lower()
        if arg.startswith(name + "="):
            return arg.split("=", 1)[1].lower()
    return None


def checkpoint_weights(spec: InferenceServerSpec, checkpoint: Checkpoint | None,
                       config: dict[str, Any]) -> tuple[int, str] | None:
    """(bytes on the busiest GPU, source line) for ``spec`` served from ``checkpoint``; None without a checkpoint.

    ``engine.args`` ``--dtype`` and ``--quantization`` (in-flight, on an unquantized checkpoint) are honoured. A
    checkpoint without safetensors (``fallback``) gives its file bytes / (TP x PP) and says so.
    """
    if checkpoint is None:
        return None
    p = spec.parallelism
    if not checkpoint.groups:
        if not checkpoint.file_bytes:
            return None
        shards = p.tensor * p.pipeline
        return (-(-checkpoint.file_bytes // shards),
                f"{checkpoint.fallback or 'no safetensors'}: file sizes {checkpoint.file_bytes / 2**30:.2f} GiB / "
                f"(TP x PP = {shards}), not the engine's sharding")
    args = list(spec.engine.args)
    layout = Layout(tp=p.tensor, pp=p.pipeline, dp=p.data, ep=p.expert)
    kind, dtype = spec.engine.kind.value, _flag(args, "--dtype") or "auto"
    inflight = _flag(args, "--quantization") or _flag(args, "-q")
    memo = _memo_of(checkpoint)
    key = (id(config), layout, kind, dtype, inflight)
    hit = memo.get(key)
    if hit is not None and hit[0] is config:
        return hit[1]
    est = estimate_weights(checkpoint, config, layout, rules_for(kind), dtype=dtype, inflight_quantization=inflight)
    if len(memo) >= _MEMO_PER_CHECKPOINT:
        memo.clear()
    memo[key] = (config, (est.per_gpu_bytes, est.source))
    return est.per_gpu_bytes, est.source


_MEMO_PER_CHECKPOINT = 64
_MEMO: dict[int, dict[tuple[Any, ...], tuple[dict[str, Any], tuple[int, str]]]] = {}
"""``checkpoint_weights`` answers per live ``Checkpoint`` (by identity; dropped with it): every server of a
resolution shares its ``ModelSource``, and each plan and re-plan asks for the same layouts again."""


def _memo_of(checkpoint: Checkpoint) -> dict[tuple[Any, ...], tuple[dict[str, Any], tuple[int, str]]]:
    ident = id(checkpoint)
    memo = _MEMO.get(ident)
    if memo is None:
        memo = _MEMO[ident] = {}
        weakref.finalize(checkpoint, _MEMO.pop, ident, None)
    return memo
