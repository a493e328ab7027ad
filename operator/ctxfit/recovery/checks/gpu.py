"""Checks for GPU-memory kinds: MambaCacheTooSmall and the bare CUDA OOM (GPUOutOfMemory).

MambaCacheTooSmall (vLLM "max_num_seqs (N) exceeds available Mamba cache blocks (M)"): a hybrid model
keeps one Mamba/linear-attention state block per running sequence (vLLM ``gpu_model_runner``: "Each decode
sequence requires one Mamba cache block"), so max-num-seqs must be at most M. The context is unchanged.

GPUOutOfMemory (a CUDA OOM with no phase line, often all that survives in the termination message): the
numbers decide. ``in use`` is PyTorch's "this process has U memory in use" (torch 1.x:
"A already allocated"), else total - free. With in-use >= ``KV_ALLOCATED_SHARE`` x fraction x total the
engine had already allocated its KV pool (the pool fills the fraction): lower the fraction by at least
the failed allocation (rounded up to 0.01, at least ``MEMORY_STEP``). Far below it the OOM came before the
pool, so no fraction helps, and the weights per GPU (``spec.model.weightsPerGPU``, else the catalog's
checkpoint bytes / (TP x PP)) tell which phase: in use below the weights means loading them (permanent:
more GPUs or a smaller format); at or above them (or weights unknown) means profiling activations, where
fewer sequences help (vLLM's sampler warm-up and dummy runs scale with max-num-seqs,
``gpu_model_runner._dummy_sampler_run``): max-num-seqs is halved, the context unchanged.
Without the numbers: retried unchanged once (like Unknown), quoting the line.

Memory other processes hold (``recovery.oom_numbers``): when the OOM lists other processes
on the GPU, the next fraction is lower by at least what they hold (``otherProcessesBytes`` / total, rounded up to
0.01), whatever the phase, with the context the plan predicts at that fraction (``common.plan_checked``). The same
holds for a CUDA-graph capture OOM that lists them (``memory.check_graph_capture_oom``).
"""

from __future__ import annotations

from ctxfit.api import EffectiveConfig, quantity_to_bytes
from ctxfit.catalog import lookup_model
from ctxfit.recovery.policy import Decision, PolicyContext, permanent, propose
from ctxfit.vocab.kinds import FailureKind

from .common import (
    FRACTION_FLOOR,
    KV_ALLOCATED_SHARE,
    MEMORY_STEP,
    UTILIZATION_FLOOR,
    ceil_fraction,
    gib_text,
    gpu_total_bytes,
    memory_knob,
    number_of,
    plan_checked,
    round_fraction,
    size_text,
)
from .container import retry_unchanged_once

SEQS_CANDIDATES = 3


def check_mamba_cache_too_small(ctx: PolicyContext) -> Decision | None:
    """MambaCacheTooSmall: max-num-seqs -> at most the engine's Mamba block count M (then M/2, M/4)."""
    if ctx.failure.kind is not FailureKind.MAMBA_CACHE_TOO_SMALL:
        return None
    seqs = ctx.current.max_num_seqs
    asked = int(number_of(ctx, "maxNumSeqs") or seqs)
    blocks = number_of(ctx, "availableMambaBlocks")
    if blocks is not None:
        top = min(int(blocks), seqs - 1)
        head = (f"{ctx.engine_name} has {int(blocks)} Mamba cache blocks for max-num-seqs {asked} (one state block "
                "per running sequence)")
    else:
        top = seqs // 2
        head = f"{ctx.engine_name} has fewer Mamba cache blocks than max-num-seqs {asked}"
    if top < 1:
        return permanent("MambaCacheTooSmall", f"{head}; not even one sequence fits: needs more GPU memory for the "
                         "state cache (more GPUs, smaller weights)")
    sizes: list[int] = []
    size = top
    while size >= 1 and len(sizes) < SEQS_CANDIDATES:
        sizes.append(size)
        size //= 2
    candidates = [(ctx.current.model_copy(update={"max_num_seqs": s}),
                   f"{head}; max-num-seqs {seqs} -> {s}, context unchanged") for s in sizes]
    return propose(ctx, "MambaCacheTooSmall", candidates, head)


def _in_use(ctx: PolicyContext) -> tuple[float | None, float | None, str]:
    total = number_of(ctx, "totalBytes")
    used = number_of(ctx, "inUseBytes")
    if used is not None:
        return used, total, "in use by the process"
    free = number_of(ctx, "freeBytes")
    if total and free is not None:
        return total - free, total, "in use (total - free)"
    return None, total, ""


def weights_per_gpu_bytes(ctx: PolicyContext) -> int | None:
    """Weights on one GPU: ``spec.model.weightsPerGPU``, else the catalog's checkpoint / (TP x PP), else None."""
    if ctx.spec.model.weights_per_gpu:
        return quantity_to_bytes(ctx.spec.model.weights_per_gpu)
    entry = lookup_model(ctx.spec.model.name)
    total = entry.weights_total_bytes if entry is not None else None
    if not total:
        return None
    return total // (ctx.spec.parallelism.tensor * ctx.spec.parallelism.pipeline)


def _before_the_pool(ctx: PolicyContext, facts: str, used: float) -> Decision:
    """A bare OOM far below the KV pool line: loading (permanent) or profiling (fewer sequences)."""
    weights = weights_per_gpu_bytes(ctx)
    if weights is not None and used < weights:
        return permanent("GPUOutOfMemory", f"{facts}: far below it and below the weights ({gib_text(weights)} per "
                         "GPU), so the OOM came while loading the weights: needs more GPUs (tensor parallel) or a "
                         "smaller weight format")
    phase = (f"above the weights ({gib_text(weights)} per GPU), so the OOM came while profiling activations"
             if weights is not None else "so the OOM came while loading the weights or profiling activations "
             "(weights per GPU unknown)")
    head = f"{facts}: far below it, the KV pool was not allocated yet; {phase}"
    seqs = ctx.current.max_num_seqs
    if seqs <= 1:
        return permanent("GPUOutOfMemory", f"{head}; max-num-seqs is already 1: needs more GPUs or a smaller "
                         "weight format")
    sizes = [s for s in (seqs // 2, seqs // 4) if s >= 1]
    candidates = [(ctx.current.model_copy(update={"max_num_seqs": s}),
                   f"{head}; lowering {memory_knob(ctx)[1]} cannot help, fewer sequences shrink the activations: "
                   f"max-num-seqs {seqs} -> {s}") for s in sizes]
    return propose(ctx, "GPUOutOfMemory", candidates, head)


def free_others_memory(ctx: PolicyContext, check: str) -> Decision | None:
    """Lower the memory fraction by at least what other processes hold on the GPU; None when the OOM lists none."""
    others = number_of(ctx, "otherProcessesBytes")
    total = number_of(ctx, "totalBytes") or gpu_total_bytes(ctx)
    if not others or not total:
        return None
    field, flag, value = memory_knob(ctx)
    floor = UTILIZATION_FLOOR if field == "gpu_memory_utilization" else FRACTION_FLOOR
    step = max(MEMORY_STEP, ceil_fraction(others / total))
    head = (f"CUDA out of memory with {gib_text(others)} held by other processes on the GPU ({others / total:.4f} "
            f"of {gib_text(total)})")
    candidates: list[tuple[EffectiveConfig, str]] = []
    for extra in (0.0, 0.01, 0.02):
        lowered = round_fraction(value - step - extra)
        if lowered < floor:
            break
        config, note = plan_checked(ctx, ctx.current.model_copy(update={field: lowered}))
        if config is not None:
            candidates.append((config, f"{head}; lowering {flag} from {value:g} to {lowered:g} leaves that memory "
                               f"to them{note}"))
    if not candidates:
        return permanent(check, f"{head}; {flag} {value:g} - {step:g} is below ctxfit's floor {floor} or leaves no "
                         "context the plan predicts fits: free the GPU or schedule the server elsewhere")
    return propose(ctx, check, candidates, head)


def check_gpu_out_of_memory(ctx: PolicyContext) -> Decision | None:
    """GPUOutOfMemory: lower the memory fraction by what other processes hold when the OOM lists them, or when the
    KV pool was already allocated; else loading (permanent) or profiling (halve max-num-seqs); without numbers retry
    once unchanged (see the module doc)."""
    if ctx.failure.kind is not FailureKind.GPU_OUT_OF_MEMORY:
        return None
    others = free_others_memory(ctx, "GPUOutOfMemory")
    if others is not None:
        return others
    used, total, how = _in_use(ctx)
    field, flag, value = memory_knob(ctx)
    if used is None or not total:
        return retry_unchanged_once(ctx, "GPUOutOfMemory", "CUDA out of memory without the numbers to place it")
    asked = number_of(ctx, "requestedBytes") or 0.0
    pool_line = value * total
    facts = (f"CUDA out of memory allocating {size_text(asked)} with {gib_text(used)} {how} of {gib_text(total)}; "
             f"{flag} {value:g} x {gib_text(total)} = {gib_text(pool_line)}")
    if used < KV_ALLOCATED_SHARE * pool_line:
        return _before_the_pool(ctx, facts, used)
    floor = UTILIZATION_FLOOR if field == "gpu_memory_utilization" else FRACTION_FLOOR
    step = max(MEMORY_STEP, ceil_fraction(asked / total))
    head = f"{facts}: the KV pool was already allocated (at least {KV_ALLOCATED_SHARE:.0%} of it in use)"
    candidates: list[tuple[EffectiveConfig, str]] = []
    for extra in (0.0, 0.01, 0.02):
        lowered = round_fraction(value - step - extra)
        if lowered >= floor:
            candidates.append((ctx.current.model_copy(update={field: lowered}),
                               f"{head}; lowering {flag} from {value:g} to {lowered:g} (by at least the "
                               f"{size_text(asked)} that failed)"))
    return propose(ctx, "GPUOutOfMemory", candidates, f"{head}; {flag} is at its floor {floor}")
