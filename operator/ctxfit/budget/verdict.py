""""Does not fit" and "cannot be split" as verdicts with suggestions, never as input errors (pure).

A spec is refused before any start when the engines could not run it at all:

- its TP/PP layout breaks one of the engines' divisibility rules (``budget.parallel``), or
- the weights on one GPU reach the usable memory (vLLM: CUDA total x gpu-memory-utilization; SGLang:
  mem-fraction-static x total), so no KV cache is left however short the context.

The plan is still computed and printed (KV bytes/token, the per-GPU budget) with suggestions: more
GPUs or nodes (a TP x PP layout the model can split, 8 GPUs per node), a smaller checkpoint (FP8 = 1
byte per parameter instead of 2; INT4 = 1/2 byte), or a TP size that divides the model.
"""

from __future__ import annotations

from ctxfit.api import GiB
from ctxfit.engines import BudgetTerms
from ctxfit.vocab.inputs import PlanInputs

from .parallel import dividing_tp_sizes, parallelism_problems

GPUS_PER_NODE = 8
"""GPUs per node assumed when suggesting a multi-node (TP x PP) layout: the usual HGX/DGX board."""

KV_SHARE_FOR_SUGGESTIONS = 0.2
"""A suggested layout leaves at least this share of the usable memory for KV cache and overheads."""

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


def _layout_for(gpus: int, tp_sizes: list[int]) -> tuple[int, int] | None:
    """A (TP, PP) layout of exactly ``gpus`` GPUs: TP within a node and dividing the model, PP across nodes."""
    for tp in sorted((t for t in tp_sizes if t <= GPUS_PER_NODE), reverse=True):
        if gpus % tp == 0:
            return tp, gpus // tp
    return None


def suggestions(inputs: PlanInputs, terms: BudgetTerms) -> list[str]:
    """What would let this spec start: a dividing layout, enough GPUs, a smaller checkpoint."""
    out: list[str] = []
    tp, pp = inputs.tp, inputs.pp
    gpus = tp * pp
    tp_sizes = dividing_tp_sizes(inputs)
    if parallelism_problems(inputs):
        same = _layout_for(gpus, tp_sizes)
        if same is not None and same != (tp, pp):
            out.append(f"a layout the model can split on the same {gpus} GPUs: tensor {same[0]} x pipeline {same[1]}")
        smaller = [t for t in tp_sizes if t < tp]
        if smaller:
            out.append(f"a smaller tensor size the model divides by: {max(smaller)} (gpu.count {max(smaller) * pp})")
    weights_total = inputs.weights_per_gpu_bytes * gpus
    budget = terms.usable_bytes * (1 - KV_SHARE_FOR_SUGGESTIONS)
    if weights_total >= budget * gpus:
        step = GPUS_PER_NODE if gpus >= GPUS_PER_NODE else 1  # whole nodes once a node is full
        needed = next((n for n in range(step * (gpus // step + 1), 1025, step) if weights_total / n < budget
                       and _layout_for(n, tp_sizes) is not None), None)
        if needed is not None:
            layout = _layout_for(needed, tp_sizes)
            assert layout is not None
            nodes = -(-needed // GPUS_PER_NODE)
            out.append(
                f"more GPUs: {needed} (tensor {layout[0]} x pipeline {layout[1]}"
                f"{f', {nodes} nodes of {GPUS_PER_NODE}' if nodes > 1 else ''}) hold "
                f"{weights_total / needed / GiB:.1f} GiB of weights per GPU"
            )
        for label, factor in CHECKPOINT_FORMATS:
            per_gpu = inputs.weights_per_gpu_bytes * factor
            verdict = "fits with room for KV" if per_gpu < budget else "still too large"
            out.append(
                f"a checkpoint in {label} ({factor:g} x the size of a BF16 one) would be "
                f"{per_gpu / GiB:.1f} GiB per GPU on this layout: {verdict} (if the checkpoint is already "
                f"{label} or smaller, this does not apply)"
            )
    return out
