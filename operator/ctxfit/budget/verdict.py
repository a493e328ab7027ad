""""Does not fit" and "cannot be split" as verdicts with suggestions, never as input errors (pure).

A spec is refused before any start when the engines could not run it at all:

- its TP/PP layout breaks one of the engines' divisibility rules (``budget.parallel``), or
- the weights on one GPU reach the usable memory (vLLM: CUDA total x gpu-memory-utilization; SGLang:
  mem-fraction-static x total), so no KV cache is left however short the context.

The plan is still computed and printed (KV bytes/token, the per-GPU budget) with suggestions: more
GPUs or nodes (a TP x PP layout the planner accepts, on nodes of the eligible
nodes' GPU count, else 8), a smaller checkpoint (FP8 = 1
byte per parameter instead of 2; INT4 = 1/2 byte), or a TP size that divides the model.
"""

from __future__ import annotations

from ctxfit.api import GiB
from ctxfit.engines import BudgetTerms
from ctxfit.vocab.inputs import PlanInputs

from .parallel import dividing_tp_sizes, parallelism_problems, rules

GPUS_PER_NODE = 8
"""GPUs per node assumed when suggesting a multi-node (TP x PP) layout: the usual HGX/DGX board."""

KV_SHARE_FOR_SUGGESTIONS = 0.2
"""A suggested layout leaves at least this share of the usable memory for KV cache and overheads."""

MAX_SUGGESTED_GPUS = 1024
"""Largest GPU count (TP x PP) a suggestion names."""

CHECKPOINT_FORMATS = (("FP8", 0.5), ("INT4", 0.25))
"""Smaller checkpoints relative to BF16 (2 bytes/parameter): FP8 1 byte, INT4 (e.g. AWQ/GPTQ) 1/2 byte."""


def weights_problem(inputs: PlanInputs, terms: BudgetTerms) -> str | None:
    """A sentence when the weights on one GPU leave no room for a KV cache, else None."""
    if inputs.weights_per_gpu_bytes < terms.usable_bytes:
        return None
    return (
        f"does not fit: {inputs.weights_per_gpu_bytes / GiB:.1f} GiB of weights per GPU ({inputs.weights_source}) "
        f"reach the {terms.usable_bytes / GiB:.1f} GiB the engine may use of the GPU's "
        f"{terms.total_bytes / GiB:.1f} GiB; no KV cache is left"
    )


def _pp_sizes(inputs: PlanInputs, upper: int = MAX_SUGGESTED_GPUS) -> list[int]:
    """Pipeline sizes the planner's own PP rules accept (``budget.parallel.rules``: at most one stage per layer)."""
    pp_rules = [r for r in rules(inputs) if r.axis == "pp"]
    return [p for p in range(1, upper + 1) if all(r.ok(p) for r in pp_rules)]


def _layouts(inputs: PlanInputs, tp_sizes: list[int], per_node: int) -> list[tuple[int, int]]:
    """(TP, PP) layouts the planner accepts, ordered by GPUs then by larger TP: TP divides the model and stays
    within a node of ``per_node`` GPUs, PP <= the layers, and TP x PP fills one node or whole nodes."""
    pp_sizes = _pp_sizes(inputs)
    out = [(tp, pp) for tp in tp_sizes if tp <= per_node for pp in pp_sizes
           if tp * pp <= MAX_SUGGESTED_GPUS and (tp * pp <= per_node or tp * pp % per_node == 0)]
    return sorted(out, key=lambda layout: (layout[0] * layout[1], -layout[0]))


def _layout_for(gpus: int, tp_sizes: list[int], inputs: PlanInputs, per_node: int) -> tuple[int, int] | None:
    """An accepted (TP, PP) layout of exactly ``gpus`` GPUs (``_layouts``), largest TP first."""
    return next((lay for lay in _layouts(inputs, tp_sizes, per_node) if lay[0] * lay[1] == gpus), None)


def _describe(layout: tuple[int, int], per_node: int, assumed: bool) -> str:
    gpus = layout[0] * layout[1]
    nodes = -(-gpus // per_node)
    size = f"{per_node} GPU{'s' if per_node > 1 else ''}{', a node size assumed' if assumed else ''}"
    where = f", {nodes} nodes of {size}" if nodes > 1 else ""
    return f"{gpus} (tensor {layout[0]} x pipeline {layout[1]}{where})"


def suggestions(inputs: PlanInputs, terms: BudgetTerms, gpus_per_node: int | None = None) -> list[str]:
    """What would let this spec start: a dividing layout, enough GPUs, a smaller checkpoint.

    ``gpus_per_node``: GPUs on one eligible node (allocatable ``nvidia.com/gpu``); None assumes ``GPUS_PER_NODE``
    and says so. Only layouts the planner accepts are suggested (``_layouts``); when none holds the weights the
    sentence says so.
    """
    out: list[str] = []
    per_node = gpus_per_node if gpus_per_node and gpus_per_node > 0 else GPUS_PER_NODE
    assumed = not (gpus_per_node and gpus_per_node > 0)
    tp, pp = inputs.tp, inputs.pp
    gpus = tp * pp
    tp_sizes = dividing_tp_sizes(inputs)
    if parallelism_problems(inputs):
        same = _layout_for(gpus, tp_sizes, inputs, per_node)
        if same is not None and same != (tp, pp):
            out.append(f"a layout the model can split on the same {gpus} GPUs: tensor {same[0]} x pipeline {same[1]}")
        smaller = [t for t in tp_sizes if t < tp]
        if smaller:
            out.append(f"a smaller tensor size the model divides by: {max(smaller)} (gpu.count {max(smaller) * pp})")
    weights_total = inputs.weights_per_gpu_bytes * gpus
    budget = terms.usable_bytes * (1 - KV_SHARE_FOR_SUGGESTIONS)
    if weights_total >= budget * gpus:
        larger = [lay for lay in _layouts(inputs, tp_sizes, per_node) if lay[0] * lay[1] > gpus]
        needed = next((lay for lay in larger if weights_total / (lay[0] * lay[1]) < budget), None)
        if needed is not None:
            out.append(f"more GPUs: {_describe(needed, per_node, assumed)} hold "
                       f"{weights_total / (needed[0] * needed[1]) / GiB:.1f} GiB of weights per GPU")
        elif larger:
            most = max(larger, key=lambda lay: lay[0] * lay[1])
            out.append(f"no layout the model can split holds these weights: the largest, "
                       f"{_describe(most, per_node, assumed)}, "
                       f"leaves {weights_total / (most[0] * most[1]) / GiB:.1f} GiB of weights per GPU, above the "
                       f"{budget / GiB:.1f} GiB that leaves room for a KV cache; a smaller checkpoint or larger GPUs")
        else:
            out.append("no layout the model can split on more GPUs than this one exists; a smaller checkpoint or "
                       "larger GPUs")
        for label, factor in CHECKPOINT_FORMATS:
            per_gpu = inputs.weights_per_gpu_bytes * factor
            verdict = "fits with room for KV" if per_gpu < budget else "still too large"
            out.append(
                f"a checkpoint in {label} ({factor:g} x the size of a BF16 one) would be "
                f"{per_gpu / GiB:.1f} GiB per GPU on this layout: {verdict} (if the checkpoint is already "
                f"{label} or smaller, this does not apply)"
            )
    return out
