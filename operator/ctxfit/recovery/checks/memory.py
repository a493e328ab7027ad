"""Checks that move the engine's memory knobs: WeightsDoNotFit, NoKVCacheMemory, StaticMemoryTooSmall,
GraphCaptureOOM, SamplerWarmupOOM, InsufficientFreeGPUMemory.

Steps sized in bytes: when the engine finds no KV memory although the plan predicted
room (NoKVCacheMemory, StaticMemoryTooSmall), the next fraction adds at least the KV the target context
needs, KV bytes per token (``ctxfit.budget.kv.kv_layout``, per GPU) x context tokens / GPU bytes, beyond
the failing point (the fraction that failed, or SGLang's "minimum viable" fraction when printed), rounded
up to 0.01 and capped by the ceiling (0.95). Without a KV layout or the GPU's size: fixed steps (0.02).
Lower steps down to failing point + 0.01 follow as fallbacks, for when history rules the higher ones out.

SGLang's fraction is of the memory free at weight load and must hold the weights as well
as the pool (``engines/sglang/memory.py``), so the sized fraction is at least (weights per GPU + the context's KV)
/ free-at-load as the plan computes them (a fraction of 0.2 failing under weights of 0.24 of the GPU goes above
0.24 + KV, not to 0.2 + KV); and with a planner the fraction is stepped up by 0.01 until the plan predicts the
context fits there (the engine's fixed reserve: CUDA context, communicators, the slack SGLang allocates outside
the pool). Every proposal is then passed through ``common.plan_checked``: a fallback fraction the plan predicts
too small for the context carries the context the plan predicts there, or is dropped."""

from __future__ import annotations

import math

from ctxfit.api import EffectiveConfig, GiB
from ctxfit.engines import get_engine
from ctxfit.recovery.policy import Decision, PolicyContext, permanent, propose
from ctxfit.vocab.inputs import resolve_inputs
from ctxfit.vocab.kinds import FailureKind

from .common import (
    FRACTION_CEILING,
    FRACTION_FLOOR,
    FRACTION_MARGIN,
    GRAPH_BATCH_FLOOR,
    MEMORY_STEP,
    UTILIZATION_CEILING,
    UTILIZATION_FLOOR,
    ceil_fraction,
    gib_text,
    gpu_total_bytes,
    layout_for,
    memory_knob,
    number_of,
    plan_checked,
    plan_predicts,
    replan_fit,
    round_fraction,
    size_text,
)
from .gpu import free_others_memory, weights_per_gpu_bytes


def check_weights_do_not_fit(ctx: PolicyContext) -> Decision | None:
    """WeightsDoNotFit: permanent (more GPUs / TP, or a smaller weight format)."""
    if ctx.failure.kind is not FailureKind.WEIGHTS_DO_NOT_FIT:
        return None
    asked, free = number_of(ctx, "requestedBytes"), number_of(ctx, "freeBytes")
    detail = f" (tried to allocate {size_text(asked)} with {size_text(free)} free)" if asked and free else ""
    tp = ctx.spec.parallelism.tensor
    return permanent(
        "WeightsDoNotFit",
        f"{ctx.engine_name} ran out of GPU memory loading the weights{detail}: needs more GPUs "
        f"(tensor parallel above {tp}) or a smaller weight format",
    )


MAX_FRACTION_CANDIDATES = 12
"""Fractions offered from the sized target down to the failing point + 0.01."""
MAX_PLAN_STEPS = 40
"""0.01 steps the sized fraction may climb until the plan predicts the context fits there."""


def _free_at_load(ctx: PolicyContext) -> int | None:
    """Free memory at weight load that the engine's fraction multiplies (SGLang mem-fraction-static), bytes, as the
    plan computes it (``Engine.free_at_load_bytes``); None where the fraction is of the GPU total (vLLM)."""
    try:
        inputs = resolve_inputs(ctx.spec)
    except ValueError:
        return None
    return get_engine(ctx.engine).free_at_load_bytes(inputs)


def _weights_term(ctx: PolicyContext, kv: int) -> tuple[float, str] | None:
    """Where the fraction is of the memory free at load (SGLang): the fraction weights + ``kv`` take of it, and the
    arithmetic; else None."""
    free = _free_at_load(ctx)
    if not free:
        return None
    weights = weights_per_gpu_bytes(ctx)
    if not weights:
        return None
    share = (weights + kv) / free
    return share, (f"weights {gib_text(weights)} + KV {gib_text(kv)} = {share:.4f} of the {gib_text(free)} free at "
                   "weight load")


def _plan_stepped(ctx: PolicyContext, field: str, target: float, ceiling: float) -> tuple[float, int]:
    """``target`` raised in 0.01 steps until the plan predicts the current context fits there (or the ceiling)."""
    steps = 0
    while target < ceiling - 1e-9 and steps < MAX_PLAN_STEPS:
        predicted = plan_predicts(ctx, ctx.current.model_copy(update={field: target}))
        if predicted is None or predicted[0] >= ctx.current.context_length:
            break
        target, steps = round_fraction(target + 0.01), steps + 1
    return target, steps


def sized_raise(ctx: PolicyContext, failing: float, ceiling: float) -> tuple[list[float], str]:
    """Fractions to try above ``failing`` (best first) and the arithmetic behind the first one (see module doc)."""
    layout = layout_for(ctx, ctx.current.kv_cache_dtype)
    total = gpu_total_bytes(ctx)
    tokens = ctx.current.context_length
    field = memory_knob(ctx)[0]
    if layout is not None and total:
        kv = layout.kv_bytes_per_token * tokens
        needed = failing + kv / total
        target = max(ceil_fraction(needed), round_fraction(failing + 0.01))
        arithmetic = (f"{tokens} tokens x {layout.kv_bytes_per_token:,} B per token = {gib_text(kv)} of KV = "
                      f"{kv / total:.4f} of {gib_text(total)}; {failing:g} + {kv / total:.4f} = {needed:.4f}")
        weights = _weights_term(ctx, kv)
        if weights is not None and ceil_fraction(weights[0]) > target:
            target = ceil_fraction(weights[0])
            arithmetic += f"; {weights[1]}"
    else:
        target = ceil_fraction(failing + MEMORY_STEP)
        arithmetic = f"KV bytes per token or GPU size unknown: {failing:g} + {MEMORY_STEP}"
    if target > ceiling + 1e-9:
        target = ceiling
        arithmetic += f", capped at ctxfit's ceiling {ceiling}"
    target, steps = _plan_stepped(ctx, field, target, ceiling)
    if steps:
        arithmetic += f"; the plan first predicts {tokens} tokens fit at {target:g}"
    values: list[float] = []
    value = round_fraction(target)
    while value > failing + 1e-9 and len(values) < MAX_FRACTION_CANDIDATES:
        values.append(value)
        value = round_fraction(value - 0.01)
    return values, arithmetic


def raise_candidates(ctx: PolicyContext, field: str, head: str, raised: list[float],
                     arithmetic: str) -> list[tuple[EffectiveConfig, str]]:
    """The raised fractions as candidates, each as far as the plan predicts it runs (``common.plan_checked``)."""
    out: list[tuple[EffectiveConfig, str]] = []
    for i, v in enumerate(raised):
        why = (f"{head}; raising it to {v:g} ({arithmetic})" if i == 0 else f"{head}; raising it to {v:g} (the sized "
               f"step {raised[0]:g} already failed or is ruled out by an earlier failure)")
        config, note = plan_checked(ctx, ctx.current.model_copy(update={field: v}))
        if config is not None:
            out.append((config, why + note))
    return out


def check_no_kv_cache_memory(ctx: PolicyContext) -> Decision | None:
    """NoKVCacheMemory: raise the memory fraction by the target context's KV bytes (capped at 0.95), else
    permanent."""
    if ctx.failure.kind is not FailureKind.NO_KV_CACHE_MEMORY:
        return None
    field, flag, value = memory_knob(ctx)
    ceiling = UTILIZATION_CEILING if field == "gpu_memory_utilization" else FRACTION_CEILING
    head = f"{ctx.engine_name} found no memory for KV cache blocks at {flag} {value:g}"
    if value >= ceiling - 1e-9:
        return permanent("NoKVCacheMemory", f"{head} (ctxfit's ceiling is {ceiling}): weights and activations "
                         "leave no KV memory: needs more GPUs or a smaller weight format")
    raised, arithmetic = sized_raise(ctx, value, ceiling)
    return propose(ctx, "NoKVCacheMemory", raise_candidates(ctx, field, head, raised, arithmetic), head)


def check_static_memory_too_small(ctx: PolicyContext) -> Decision | None:
    """StaticMemoryTooSmall: the fraction beyond SGLang's minimum viable one (else the fraction that failed) by
    the target context's KV bytes, capped at 0.95; a minimum at or above the ceiling: permanent. When history
    rules every fraction out, another knob moves (``checks.escape``)."""
    if ctx.failure.kind is not FailureKind.STATIC_MEMORY_TOO_SMALL:
        return None
    field, flag, value = memory_knob(ctx)
    minimum = number_of(ctx, "minimumMemFractionStatic")
    if minimum:
        failing = max(value, minimum + FRACTION_MARGIN)
        head = f"{ctx.engine_name}: the loaded weights need {flag} above {minimum:g} (was {value:g})"
    else:
        failing = value
        head = f"{ctx.engine_name}: not enough memory for the KV pool at {flag} {value:g}"
    if round_fraction(failing + 0.01) > FRACTION_CEILING + 1e-9:
        return permanent("StaticMemoryTooSmall", f"{head}; {round_fraction(failing + 0.01):g} is above ctxfit's "
                         f"ceiling {FRACTION_CEILING}: needs more GPUs or a smaller weight format")
    raised, arithmetic = sized_raise(ctx, failing, FRACTION_CEILING)
    return propose(ctx, "StaticMemoryTooSmall", raise_candidates(ctx, field, head, raised, arithmetic), head)


def check_graph_capture_oom(ctx: PolicyContext) -> Decision | None:
    """GraphCaptureOOM: SGLang halves cuda-graph-max-bs (down to 16), then lowers the fraction; vLLM lowers
    gpu-memory-utilization by 0.02 (0.01, 0.03). The context is unchanged."""
    if ctx.failure.kind is not FailureKind.GRAPH_CAPTURE_OOM:
        return None
    others = free_others_memory(ctx, "GraphCaptureOOM")
    if others is not None:
        return others
    asked, free = number_of(ctx, "requestedBytes"), number_of(ctx, "freeBytes")
    detail = f" (tried to allocate {size_text(asked)}, {size_text(free)} free)" if asked and free else ""
    head = f"{ctx.engine_name} ran out of GPU memory capturing CUDA graphs{detail}"
    field, flag, value = memory_knob(ctx)
    floor = UTILIZATION_FLOOR if field == "gpu_memory_utilization" else FRACTION_FLOOR
    lowered = [
        (ctx.current.model_copy(update={field: round_fraction(value - step)}),
         f"{head}; lowering {flag} from {value:g} to {round_fraction(value - step):g}")
        for step in (MEMORY_STEP, 0.01, 0.03)
        if round_fraction(value - step) >= floor
    ]
    batch = ctx.current.cuda_graph_max_batch_size
    halved: list[tuple[EffectiveConfig, str]] = []
    if batch > GRAPH_BATCH_FLOOR:
        smaller = max(GRAPH_BATCH_FLOOR, batch // 2)
        halved = [(ctx.current.model_copy(update={"cuda_graph_max_batch_size": smaller}),
                   f"{head}; halving the CUDA-graph max batch size from {batch} to {smaller}")]
    candidates = halved + lowered if field == "mem_fraction_static" else lowered + halved
    return propose(ctx, "GraphCaptureOOM", candidates,
                   f"{head}; {flag} is at its floor {floor} and the graph batch at {batch}")


def check_sampler_warmup_oom(ctx: PolicyContext) -> Decision | None:
    """SamplerWarmupOOM: halve max-num-seqs (from the warm-up's request count when smaller)."""
    if ctx.failure.kind is not FailureKind.SAMPLER_WARMUP_OOM:
        return None
    seqs = ctx.current.max_num_seqs
    dummy = number_of(ctx, "dummyRequests")
    base = min(seqs, int(dummy)) if dummy else seqs
    head = f"{ctx.engine_name} ran out of GPU memory warming up the sampler with {base} requests"
    if base <= 1:
        return permanent("SamplerWarmupOOM", f"{head}; max-num-seqs is already 1")
    sizes: list[int] = []
    size = base // 2
    while size >= 1 and len(sizes) < 3:
        sizes.append(size)
        size //= 2
    candidates = [(ctx.current.model_copy(update={"max_num_seqs": s}), f"{head}; max-num-seqs {seqs} -> {s}")
                  for s in sizes]
    return propose(ctx, "SamplerWarmupOOM", candidates, head)


def check_insufficient_free_gpu_memory(ctx: PolicyContext) -> Decision | None:
    """InsufficientFreeGPUMemory: utilization <= free/total if the plan still fits there, else permanent."""
    if ctx.failure.kind is not FailureKind.INSUFFICIENT_FREE_GPU_MEMORY:
        return None
    free, total = number_of(ctx, "freeBytes"), number_of(ctx, "totalBytes")
    util = ctx.current.gpu_memory_utilization
    shown = f"{free / GiB:.2f}/{total / GiB:.2f} GiB" if free and total else "less than asked"
    head = f"another process holds GPU memory: {shown} free"
    if util is None:
        return permanent("InsufficientFreeGPUMemory", f"{head}; free the GPU or schedule elsewhere")
    target = math.floor(free / total * 100 + 1e-9) / 100 if free and total else util - 0.05
    target = round_fraction(min(target, util - 0.01))
    if target < UTILIZATION_FLOOR:
        return permanent("InsufficientFreeGPUMemory",
                         f"{head}; {target:g} is below ctxfit's floor {UTILIZATION_FLOOR}: free the GPU")
    context = ctx.current.context_length
    fit = replan_fit(ctx, gpu_memory_utilization=target, context_length=context)
    note = ""
    if fit is not None:
        if fit[0] < ctx.minimum_context:
            return permanent("InsufficientFreeGPUMemory",
                             f"{head}; at gpu-memory-utilization {target:g} the plan no longer fits ({fit[1]})")
        if fit[0] < context:
            context, note = fit[0], f" and the context to {fit[0]}"
    update: dict[str, object] = {"gpu_memory_utilization": target, "context_length": context}
    candidates = [(ctx.current.model_copy(update=update),
                   f"{head}; lowering gpu-memory-utilization from {util:g} to {target:g}{note}")]
    return propose(ctx, "InsufficientFreeGPUMemory", candidates, head)
