"""When history leaves a GPU-memory check no room on its own knob: move another knob, or stop with both numbers.

The rule: "when two failures bracket a knob with no room left, change another knob (graph batch size,
context, KV dtype) or stop permanently with both numbers". Called by ``ctxfit.recovery.policy.propose``
when every candidate of a check repeats a failed configuration or is ruled out by an earlier failure
(``ctxfit.recovery.bounds``). Starting from the check's preferred configuration, in order:

1. halve the CUDA-graph max batch size (not below ``GRAPH_BATCH_FLOOR`` 16, SGLang's own hint): CUDA graphs
   are the memory the engines take outside the KV pool (vLLM ``capture_model``, SGLang ``CudaGraphRunner``);
2. one context ladder step down (not below ``context.minimum``): less KV per request;
3. an 8-bit KV cache (fp8) when the cache is 16-bit, the GPU is known to have FP8 (compute capability >= 8.9,
   ``ctxfit.catalog`` GPU products; Triton's fp8e4nv needs SM 8.9) and no KV dtype failed before.

Each escape must itself be untried and not ruled out. With none left the verdict is permanent and names
the bracketing values (the highest that failed as too low, the lowest that failed as too high).
"""

from __future__ import annotations

from collections.abc import Sequence

from ctxfit.api import EffectiveConfig
from ctxfit.catalog import lookup_gpu
from ctxfit.recovery.bounds import FRACTION, bracket, describe
from ctxfit.recovery.policy import Decision, PolicyContext, check_name, permanent
from ctxfit.vocab.kinds import FailureKind

from .common import GRAPH_BATCH_FLOOR, SIXTEEN_BIT, context_at_most, memory_knob

ESCAPE_KINDS = frozenset({
    FailureKind.NO_KV_CACHE_MEMORY,
    FailureKind.STATIC_MEMORY_TOO_SMALL,
    FailureKind.GRAPH_CAPTURE_OOM,
    FailureKind.GPU_OUT_OF_MEMORY,
    FailureKind.INSUFFICIENT_FREE_GPU_MEMORY,
})
"""Kinds whose checks move the engine's memory fraction: when it is bracketed, another knob may move."""
FP8_COMPUTE_CAPABILITY = (8, 9)


def _fp8_capable(ctx: PolicyContext) -> bool:
    product = lookup_gpu(ctx.spec.gpu.product)
    if product is None or product.compute_capability < FP8_COMPUTE_CAPABILITY:
        return False
    return not any(a.failure is FailureKind.KV_CACHE_DTYPE_UNSUPPORTED for a in ctx.history)


def escape_candidates(ctx: PolicyContext, base: EffectiveConfig) -> list[tuple[EffectiveConfig, str]]:
    """Configurations that change one other knob of ``base`` (see the module doc), in order."""
    out: list[tuple[EffectiveConfig, str]] = []
    batch = base.cuda_graph_max_batch_size
    if batch > GRAPH_BATCH_FLOOR:
        smaller = max(GRAPH_BATCH_FLOOR, batch // 2)
        out.append((base.model_copy(update={"cuda_graph_max_batch_size": smaller}),
                    f"halving the CUDA-graph max batch size from {batch} to {smaller}"))
    step = context_at_most(min(base.context_length, ctx.current.context_length) - 1)
    if step is not None and step >= ctx.minimum_context:
        out.append((base.model_copy(update={"context_length": step}),
                    f"lowering the context from {ctx.current.context_length} to {step}"))
    if base.kv_cache_dtype in SIXTEEN_BIT and _fp8_capable(ctx):
        out.append((base.model_copy(update={"kv_cache_dtype": "fp8"}),
                    f"using an fp8 KV cache instead of {base.kv_cache_dtype} (half the KV bytes per token)"))
    return out


def bracket_text(ctx: PolicyContext) -> str:
    """"<flag> A failed with K1 (too low) and B failed with K2 (too high)", or "" when not bracketed."""
    _field, flag, _value = memory_knob(ctx)
    low, high = bracket(ctx.failed, FRACTION)
    if low is None or high is None:
        return ""
    return (f"{describe(low, FRACTION, flag)} (too low) and {describe(high, FRACTION, flag)} (too high): "
            "no room left between them")


def escape(ctx: PolicyContext, check: str, candidates: Sequence[tuple[EffectiveConfig, str]],
           exhausted: str) -> Decision:
    """Another knob from the check's preferred configuration, else permanent with the bracket's numbers."""
    bracketed = bracket_text(ctx)
    base = candidates[0][0] if candidates else ctx.current
    why = candidates[0][1] if candidates else exhausted
    for config, change in escape_candidates(ctx, base) + (escape_candidates(ctx, ctx.current) if candidates else []):
        config, note = ctx.capped(config)
        if config == ctx.current or ctx.tried(config) or ctx.ruled_out(config) is not None:
            continue
        if config.context_length > ctx.current.context_length:
            continue
        head = bracketed or "every step on the memory fraction already failed or is ruled out by an earlier failure"
        return Decision(config, False, f"{why}; but {head}, so {change}{note}", check_name(check))
    if bracketed:
        return permanent(check, f"{exhausted}; {bracketed}; and no other knob (graph batch, context, KV dtype) "
                         "is left")
    if candidates:
        return permanent(check, f"{exhausted}; every next step already failed or is ruled out by an earlier "
                         f"failure ({candidates[0][1]})")
    return permanent(check, exhausted)
