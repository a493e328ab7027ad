"""Checks that move the context: KVCacheTooSmall, ContextExceedsModelLimit, KVCacheDtypeUnsupported.

KVCacheTooSmall below ``context.minimum``: when no ladder size >= the minimum fits the KV capacity the engine
reported, the memory fraction (vLLM gpu-memory-utilization, SGLang mem-fraction-static) rises before the verdict
is permanent. Both engines size the KV pool as fraction x GPU bytes minus what the weights, activations and buffers
hold (vLLM ``gpu_worker.determine_available_memory``, SGLang ``model_runner.profile_max_num_token``), so raising
the fraction by d adds d x GPU bytes to the pool: the step is the bytes the minimum needs with headroom,
(minimum / (1 - headroom) - capacity) x KV bytes per token / GPU bytes, rounded up to 0.01 and capped at 0.95
(``checks.common.UTILIZATION_CEILING``); if even 0.95 holds fewer than ``context.minimum`` tokens: permanent.
"""

from __future__ import annotations

import math

from ctxfit.api import EffectiveConfig
from ctxfit.budget.context import step_down_context
from ctxfit.budget.kv import kv_dtype_bytes
from ctxfit.recovery.evidence import trim_words
from ctxfit.recovery.policy import Decision, PolicyContext, permanent, propose
from ctxfit.vocab.kinds import FailureKind

from .common import (
    BLOCK_SIZE,
    FRACTION_CEILING,
    SIXTEEN_BIT,
    UTILIZATION_CEILING,
    ceil_fraction,
    context_at_most,
    context_steps,
    gib_text,
    gpu_total_bytes,
    layout_for,
    memory_knob,
    number_of,
    plan_checked,
    replan_fit,
    round_fraction,
)

RAISE_CANDIDATES = 3
"""Fractions offered when the minimum needs a higher memory fraction: the sized one and the next 0.01 steps."""


def _kv_capacity(ctx: PolicyContext, requested: int) -> tuple[int | None, str]:
    """Tokens one request may hold per the failure: the engine's estimate, else available / bytes per token."""
    estimate = number_of(ctx, "estimatedMaxContextLength")
    if estimate:
        return int(estimate), f"it estimates {int(estimate)} tokens fit"
    available = number_of(ctx, "availableBytes")
    if available is None:
        return None, "no capacity in the message"
    layout = layout_for(ctx, ctx.current.kv_cache_dtype)
    needed = number_of(ctx, "neededBytes")
    from_message: tuple[int, str] | None = None
    if needed and requested > 0:
        per_token = needed / requested
        fit = int(available / per_token)
        from_message = fit, f"{gib_text(available)} / {per_token:,.0f} B per token (from the message) = {fit} tokens"
    if layout is not None:
        fit = layout.max_context_for(int(available), block_size=BLOCK_SIZE)
        planned = fit, f"{gib_text(available)} / {layout.kv_bytes_per_token:,} B per token = {fit} tokens"
        # the engine's own bytes per token (needed / requested) is what ran; when it says fewer tokens fit than
        # the planned layout, the smaller of the two is the one that cannot fail again
        return from_message if from_message is not None and from_message[0] < planned[0] else planned
    return from_message if from_message is not None else (None, "no bytes per token known")


def check_kv_cache_too_small(ctx: PolicyContext) -> Decision | None:
    """KVCacheTooSmall: context -> ladder size <= capacity x (1 - headroom); below the minimum: permanent."""
    if ctx.failure.kind is not FailureKind.KV_CACHE_TOO_SMALL:
        return None
    requested = int(number_of(ctx, "requestedContextLength") or ctx.current.context_length)
    capacity, basis = _kv_capacity(ctx, requested)
    facts = []
    available, needed = number_of(ctx, "availableBytes"), number_of(ctx, "neededBytes")
    if available:
        facts.append(f"{ctx.engine_name} reported {gib_text(available)} for KV")
    if needed:
        facts.append(f"{requested} tokens need {gib_text(needed)}")
    else:
        facts.append(f"{ctx.engine_name}: {requested} tokens do not fit")
    facts.append(basis)
    head = "; ".join(facts)
    if capacity is None:
        first = context_at_most(min(requested, ctx.current.context_length) * (1.0 - ctx.headroom))
    else:
        first = step_down_context(capacity, ctx.headroom) or context_at_most(capacity * (1.0 - ctx.headroom))
        if (first is None or first < ctx.minimum_context) and capacity >= ctx.minimum_context:
            first = ctx.minimum_context  # fits, with less headroom than asked
    if first is not None and first >= ctx.current.context_length:
        first = context_at_most(ctx.current.context_length - 1)
    ceiling = ctx.context_ceiling
    reason = f"{ctx.headroom:.0%} headroom"
    if first is not None and ceiling is not None and first > ceiling[0]:
        first, reason = ceiling[0], ceiling[1]
    steps = context_steps(ctx, first)
    at = ""
    if not steps and capacity is not None:
        raised = _raise_for_minimum(ctx, capacity, head)
        if isinstance(raised, Decision):
            return raised
        at = raised
    if not steps:
        return permanent(
            "KVCacheTooSmall",
            f"{head}; no context >= context.minimum {ctx.minimum_context} fits "
            f"({ctx.headroom:.0%} headroom){at}: needs more GPU memory for KV (more GPUs, smaller weights, FP8 KV)",
        )
    candidates = [
        (ctx.current.model_copy(update={"context_length": size}),
         f"{head}; stepping down to {size} ({reason if size == first else f'{ctx.headroom:.0%} headroom'})")
        for size in steps
    ]
    return propose(ctx, "KVCacheTooSmall", candidates, head)


def _raise_for_minimum(ctx: PolicyContext, capacity: int, head: str) -> Decision | str:
    """Raise the memory fraction so ``context.minimum`` fits (module doc), or why that cannot work.

    Args:
        capacity: tokens the engine's KV pool holds at the current fraction (its estimate, or available bytes /
            KV bytes per token).
        head: the facts sentence of the failure.

    Returns:
        A proposal (fraction raised, context at the largest ladder size the raised pool holds with headroom, at
        least the minimum), else the words for the permanent verdict: at the ceiling already, not enough even
        there, or "" without a KV layout or the GPU's size.
    """
    field, flag, value = memory_knob(ctx)
    ceiling = UTILIZATION_CEILING if field == "gpu_memory_utilization" else FRACTION_CEILING
    if value >= ceiling - 1e-9:
        return f" at {flag} {value:g}, ctxfit's ceiling"
    layout = layout_for(ctx, ctx.current.kv_cache_dtype)
    total = gpu_total_bytes(ctx)
    if layout is None or not total:
        return ""
    per_token = layout.kv_bytes_per_token
    minimum = ctx.minimum_context
    wanted = math.ceil(minimum / (1.0 - ctx.headroom))
    missing = max(wanted - capacity, 0) * per_token
    target = min(ceiling, max(ceil_fraction(value + missing / total), round_fraction(value + 0.01)))
    arithmetic = (f"{minimum} tokens with {ctx.headroom:.0%} headroom = {wanted} tokens, {wanted - capacity} more "
                  f"x {per_token:,} B per token = {gib_text(missing)} = {missing / total:.4f} of {gib_text(total)}")
    top = ctx.current.context_length  # the fraction changes, so the same context is a new configuration
    candidates: list[tuple[EffectiveConfig, str]] = []
    fraction = target
    while fraction <= ceiling + 1e-9 and len(candidates) < RAISE_CANDIDATES:
        held = capacity + int((fraction - value) * total / per_token)
        size = context_at_most(held * (1.0 - ctx.headroom))
        if (size is None or size < minimum) and held >= minimum:
            size = minimum  # fits, with less headroom than asked
        if size is not None and size >= minimum:
            size = min(size, top)
            context = f"keeping the context at {size}" if size == top else f"stepping the context down to {size}"
            update: dict[str, object] = {field: fraction, "context_length": size}
            candidates.append((ctx.current.model_copy(update=update),
                               f"{head}; no context >= context.minimum {minimum} fits at {flag} {value:g}: raising "
                               f"it to {fraction:g} and {context} ({arithmetic}; {held} tokens at {fraction:g})"))
        fraction = round_fraction(fraction + 0.01)
    if not candidates:
        held = capacity + int((ceiling - value) * total / per_token)
        return f" at {flag} {value:g}, nor at ctxfit's ceiling {ceiling} ({held} tokens)"
    return propose(ctx, "KVCacheTooSmall", candidates, head)


def check_context_ceiling(ctx: PolicyContext) -> Decision | None:
    """ContextCeiling: permanent when the model's maximum context is below ``spec.context.minimum``
    (every proposal is capped at the ceiling, so none could reach the minimum)."""
    ceiling, minimum = ctx.context_ceiling, ctx.spec.context.minimum
    if ceiling is None or minimum is None or ceiling[0] >= minimum:
        return None
    return permanent("ContextCeiling", f"{ctx.failure.kind.value}: {ceiling[1]} is below context.minimum "
                     f"{minimum}: lower context.minimum or choose another model")


def check_context_exceeds_model_limit(ctx: PolicyContext) -> Decision | None:
    """ContextExceedsModelLimit: context -> the derived maximum M (or the ladder size below it)."""
    if ctx.failure.kind is not FailureKind.CONTEXT_EXCEEDS_MODEL_LIMIT:
        return None
    limits = [v for v in (number_of(ctx, "derivedMaxContextLength"), number_of(ctx, "modelMaxLength")) if v]
    requested = int(number_of(ctx, "requestedContextLength") or ctx.current.context_length)
    ceiling = ctx.context_ceiling
    if limits:
        limit = int(min(limits))
        head = f"{ctx.engine_name}: the model supports at most {limit} tokens, {requested} were asked"
        if ceiling is not None and ceiling[0] < limit:
            limit = ceiling[0]
            head = f"{head}; {ceiling[1]}"
        sizes = [limit] if limit < ctx.current.context_length else []
        sizes += context_steps(ctx, context_at_most(limit - 1))
    else:
        head = f"{ctx.engine_name}: {requested} tokens exceed the model's maximum"
        sizes = context_steps(ctx, context_at_most(ctx.current.context_length - 1))
    sizes = [s for s in sizes if s >= ctx.minimum_context]
    if not sizes:
        return permanent("ContextExceedsModelLimit",
                         f"{head}; below context.minimum {ctx.minimum_context}: choose another model")
    candidates = [(ctx.current.model_copy(update={"context_length": s}), f"{head}; using {s}") for s in sizes]
    return propose(ctx, "ContextExceedsModelLimit", candidates, head)


def _dtype_bytes(kv_cache_dtype: str) -> float:
    try:
        return float(kv_dtype_bytes(kv_cache_dtype))
    except ValueError:
        return 0.5 if "4" in kv_cache_dtype else 1.0  # nvfp4/int4 variants; else assume 1 byte (conservative)


E4M3_DTYPES = ("fp8", "fp8_e4m3")
"""KV dtypes stored as FP8 E4M3 (Triton's fp8e4nv): a GPU without it may still have E5M2 (fp8e5)."""


def _e5m2_candidate(ctx: PolicyContext, head: str) -> list[tuple[EffectiveConfig, str]]:
    """fp8_e5m2 at the same context when the message names fp8e5 among the GPU's FP8 types (the
    dtype the GPU supports comes before a 16-bit cache and its shorter context), as far as the plan predicts."""
    if not ctx.failure.numbers.get("fp8E5m2Supported") or ctx.current.kv_cache_dtype not in E4M3_DTYPES:
        return []
    config, note = plan_checked(ctx, ctx.current.model_copy(update={"kv_cache_dtype": "fp8_e5m2"}))
    if config is None:
        return []
    return [(config, f"{head}; the GPU supports FP8 E5M2 (fp8e5): using fp8_e5m2, the same 1 byte per element, "
             f"context {config.context_length}{note}")]


def check_kv_cache_dtype_unsupported(ctx: PolicyContext) -> Decision | None:
    """KVCacheDtypeUnsupported: fp8_e5m2 when the message says the GPU has it, else KV dtype -> auto (16-bit),
    context re-planned for the larger bytes/token."""
    if ctx.failure.kind is not FailureKind.KV_CACHE_DTYPE_UNSUPPORTED:
        return None
    old = ctx.current.kv_cache_dtype
    head = f"{ctx.engine_name} cannot run a {old} KV cache on this GPU"
    if old in SIXTEEN_BIT:
        return permanent("KVCacheDtypeUnsupported", f"{ctx.engine_name} rejects the KV cache dtype {old}, which "
                         f"is already 16-bit: {trim_words(ctx.failure.evidence, 200)}")
    e5m2 = _e5m2_candidate(ctx, head)
    if e5m2 and ctx.first_untried(e5m2) is not None:
        return propose(ctx, "KVCacheDtypeUnsupported", e5m2, head)
    context = ctx.current.context_length
    fit = replan_fit(ctx, kv_cache_dtype="auto", context_length=context)
    if fit is not None:
        if fit[0] < ctx.minimum_context:
            return permanent("KVCacheDtypeUnsupported",
                             f"{head}; with a 16-bit cache nothing >= context.minimum fits ({fit[1]})")
        new_context = min(fit[0], context)
        basis = f"re-planned: {fit[1]}"
    else:
        old_layout, new_layout = layout_for(ctx, old), layout_for(ctx, "auto")
        if old_layout is not None and new_layout is not None:
            ratio = new_layout.kv_bytes_per_token / old_layout.kv_bytes_per_token
            basis = (f"{old_layout.kv_bytes_per_token:,} -> {new_layout.kv_bytes_per_token:,} B per token")
        else:
            ratio = 2.0 / _dtype_bytes(old)
            basis = f"{ratio:g}x the bytes per token"
        scaled = context_at_most(context / max(ratio, 1.0))
        if scaled is None or scaled < ctx.minimum_context:
            return permanent("KVCacheDtypeUnsupported",
                             f"{head}; at 16 bits ({basis}) {context} tokens shrink below context.minimum "
                             f"{ctx.minimum_context}")
        new_context = min(scaled, context)
    update: dict[str, object] = {"kv_cache_dtype": "auto", "context_length": new_context}
    candidates = [(ctx.current.model_copy(update=update),
                   f"{head}; using auto (16-bit) with context {new_context} ({basis})")]
    return propose(ctx, "KVCacheDtypeUnsupported", candidates, head)
