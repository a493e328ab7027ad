"""Can the engines split this model over TP x PP at all? Checked before anything starts (pure).

Each rule is the engine's own, read from its source (vLLM and SGLang share the layer code):

- Query heads: ``num_attention_heads % tp == 0`` (vLLM ``ModelConfig.verify_with_parallel_config``:
  "Total number of attention heads (N) must be divisible by tensor parallel size (T)"; both engines'
  ``QKVParallelLinear``: ``num_heads = divide(total_num_heads, tp_size)``).
- KV heads (GQA/MHA): ``QKVParallelLinear`` replicates KV heads when ``tp >= num_kv_heads``
  (``num_kv_head_replicas = divide(tp, num_kv_heads)``: TP must be a multiple of the KV heads), and
  splits them otherwise (``divide(num_kv_heads, tp)``). MLA has no KV heads to split.
- Vocabulary: ``VocabParallelEmbedding`` pads the vocabulary to a multiple of 64
  (``DEFAULT_VOCAB_PADDING_SIZE``) and splits the padded size with ``divide(padded, tp)``.
- Routed experts: with expert parallelism SGLang requires ``num_experts % ep_size == 0``
  (``FusedMoE.__init__``: ``assert num_experts % self.moe_ep_size == 0``; ep size = TP); vLLM spreads
  the remainder (``determine_expert_map``: "Distribute experts as evenly as possible"). Without EP,
  SGLang splits the expert intermediate size (``assert intermediate_size % self.moe_tp_size == 0``).
- Hybrid layers: Mamba-2 heads and Gated-DeltaNet value heads are split with ``divide(num_heads, tp)``
  (vLLM ``MambaStateShapeCalculator``), Mamba-1 ``d_inner`` with ``divide(intermediate_size, tp)``;
  Mamba-2 groups must divide by TP unless there is one (``MambaMixer2.__init__``: "If tensor parallel
  world size does not divide num_groups, then num_groups must equal 1").
- Layers by PP: neither engine requires divisibility. ``get_pp_indices`` (vLLM
  ``distributed/utils.py``; SGLang copies it) gives each stage ``layers // pp`` and spreads the
  remainder, so a stage is empty only when ``pp > num_hidden_layers``.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

from ctxfit.api import AttentionKind
from ctxfit.engines import get_engine
from ctxfit.vocab.inputs import PlanInputs

VOCAB_PADDING = 64
"""vLLM/SGLang ``vocab_parallel_embedding.DEFAULT_VOCAB_PADDING_SIZE``."""

MAX_SUGGESTED_TP = 64
"""Largest TP size ctxfit suggests (``spec.parallelism.tensor`` allows up to 64)."""


class Split(StrEnum):
    """How the engines split a count over a parallel size (the module docstring gives each rule's source)."""

    DIVIDE = "divide"
    """``divide(count, size)``: the size must divide the count."""
    REPLICATE = "replicate"
    """KV heads: split when ``size < count`` (size divides count), replicated otherwise (count divides size)."""
    ONE_OR_DIVIDE = "one-or-divide"
    """Mamba-2 groups: a single group is replicated, more must divide by the size."""
    PADDED = "padded"
    """Vocabulary: the count padded to a multiple of ``VOCAB_PADDING`` must divide by the size."""
    STAGES = "stages"
    """Layers by PP: every stage needs a layer (``size <= count``), the remainder is spread."""


@dataclass(frozen=True)
class Rule:
    """One divisibility rule: ``count`` must allow ``tp`` (or ``pp``) the way ``split`` says; ``ok(size)`` decides.

    ``what`` names the count in sentences only; no decision reads it.
    """

    what: str
    count: int
    axis: str  # "tp" or "pp"
    split: Split = Split.DIVIDE

    def ok(self, size: int) -> bool:
        """Whether ``size`` satisfies the rule."""
        match self.split:
            case Split.STAGES:
                return size <= self.count
            case Split.REPLICATE:
                return self.count % size == 0 if size < self.count else size % self.count == 0
            case Split.ONE_OR_DIVIDE:
                return self.count == 1 or self.count % size == 0
            case Split.PADDED:
                return -(-self.count // VOCAB_PADDING) * VOCAB_PADDING % size == 0
            case Split.DIVIDE:
                return self.count % size == 0


def rules(inputs: PlanInputs) -> list[Rule]:
    """The divisibility rules that apply to this model and engine (see the module docstring)."""
    arch = inputs.architecture
    spec = inputs.spec
    out: list[Rule] = []
    if arch.num_attention_heads:
        out.append(Rule(f"attention heads ({arch.num_attention_heads})", arch.num_attention_heads, "tp"))
    if arch.attention in (AttentionKind.GQA, AttentionKind.MHA) and arch.num_kv_heads:
        out.append(Rule(f"KV heads ({arch.num_kv_heads})", arch.num_kv_heads, "tp", Split.REPLICATE))
    if inputs.vocab_size:
        out.append(Rule(f"vocabulary ({inputs.vocab_size}, padded to a multiple of {VOCAB_PADDING})",
                        inputs.vocab_size, "tp", Split.PADDED))
    if inputs.moe and get_engine(spec.engine.kind).tp_splits_experts:
        if spec.parallelism.expert:
            out.append(Rule(f"routed experts ({inputs.moe.experts}) over expert parallelism",
                            inputs.moe.experts, "tp"))
        else:
            out.append(Rule(f"expert intermediate size ({inputs.moe.intermediate_size})",
                            inputs.moe.intermediate_size, "tp"))
    hybrid = inputs.hybrid
    if hybrid is not None:
        if hybrid.kind == "mamba1":
            out.append(Rule(f"Mamba inner size ({hybrid.intermediate_size})", hybrid.intermediate_size, "tp"))
        else:
            label = "Mamba heads" if hybrid.kind == "mamba2" else "linear-attention value heads"
            out.append(Rule(f"{label} ({hybrid.num_heads})", hybrid.num_heads, "tp"))
            if hybrid.kind == "mamba2":
                out.append(Rule(f"Mamba groups ({hybrid.n_groups})", hybrid.n_groups, "tp", Split.ONE_OR_DIVIDE))
    layers = inputs.total_layers or arch.num_layers
    if layers:
        out.append(Rule(f"layers ({layers})", layers, "pp", Split.STAGES))
    return out


def _sizes(rule_set: list[Rule], axis: str, upper: int) -> list[int]:
    return [n for n in range(1, upper + 1) if all(r.ok(n) for r in rule_set if r.axis == axis)]


def parallelism_problems(inputs: PlanInputs) -> list[str]:
    """Sentences for each rule the spec's TP/PP breaks, each naming the sizes that would work; [] when fine.

    The suggested TP sizes satisfy every TP rule at once (up to ``MAX_SUGGESTED_TP``); PP sizes every
    PP rule (up to the layer count, capped at 64).
    """
    tp, pp = inputs.tp, inputs.pp
    rule_set = rules(inputs)
    broken = [r for r in rule_set if not r.ok(tp if r.axis == "tp" else pp)]
    if not broken:
        return []
    good_tp = _sizes(rule_set, "tp", MAX_SUGGESTED_TP)
    good_pp = _sizes(rule_set, "pp", MAX_SUGGESTED_TP)
    out = []
    for r in broken:
        if r.axis == "tp":
            out.append(f"parallelism.tensor {tp} cannot split the {r.what}: TP sizes that divide every "
                       f"split of this model are {', '.join(map(str, good_tp))}")
        else:
            out.append(f"parallelism.pipeline {pp} leaves a stage without layers (the model has {r.count} "
                       f"layers): PP sizes up to {max(good_pp)} work (layers need not divide evenly)")
    return out


def dividing_tp_sizes(inputs: PlanInputs, upper: int = MAX_SUGGESTED_TP) -> list[int]:
    """TP sizes (1..upper) that satisfy every TP rule of this model and engine."""
    return _sizes(rules(inputs), "tp", upper)
