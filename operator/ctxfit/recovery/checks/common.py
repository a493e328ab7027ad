"""Shared pieces of the policy checks: limits (with their sources) and small helpers.

- ``UTILIZATION_CEILING`` / ``FRACTION_CEILING`` 0.95 ("raise gpu-memory-utilization in
  steps while <= 0.95"); same value as ``ctxfit.budget.planner``.
- ``MEMORY_STEP`` 0.02 (then 0.01, 0.03): GraphCaptureOOM "lower by 0.01-0.03",
  StaticMemoryTooSmall "+0.02 steps".
- ``FRACTION_MARGIN`` 0.005: "just above" SGLang's minimum viable fraction, rounded up to 0.01.
- ``UTILIZATION_FLOOR`` / ``FRACTION_FLOOR`` 0.50: below half the GPU the plan has failed; stop.
- ``GRAPH_BATCH_FLOOR`` 16: SGLang's own hint "set --cuda-graph-max-bs to a smaller value (e.g., 16)"
  (cuda_graph_runner.py ``CUDA_GRAPH_CAPTURE_FAILED_MSG``).
- ``HOST_MEMORY_GROWTH`` 1.5, ``SHM_MINIMUM`` 1 GiB, startup x2: the recovery table.
- ``MAX_STARTUP_SECONDS`` 7 days: the ``spec.startup.timeoutSeconds`` bound.
- ``KV_ALLOCATED_SHARE`` 0.9: a bare CUDA OOM with the process holding at least 90% of fraction x total
  happened after the KV pool was allocated (vLLM sizes the pool so that weights + activations + KV =
  utilization x total, ``gpu_worker.determine_available_memory``; SGLang's pool is fraction x total minus
  weights, ``model_runner.profile_max_num_token``); the 10% leaves room for allocator fragmentation and
  CUDA-graph pools. Below it the process had not yet allocated the pool: loading or profiling.
- ``BLOCK_SIZE`` 16 tokens: vLLM ``CacheConfig.DEFAULT_BLOCK_SIZE`` (docs/engine-memory.md A.2), used when
  deriving the capacity from the available KV bytes.
"""

from __future__ import annotations

import math

from ctxfit.api import EffectiveConfig, GiB, MiB, quantity_to_bytes
from ctxfit.api.model import Architecture
from ctxfit.budget.context import ladder_floor
from ctxfit.budget.kv import KVLayout, kv_layout
from ctxfit.catalog import lookup_gpu, lookup_model
from ctxfit.recovery.limits import plausible_number
from ctxfit.recovery.policy import PolicyContext

UTILIZATION_CEILING = 0.95
FRACTION_CEILING = 0.95
UTILIZATION_FLOOR = 0.50
FRACTION_FLOOR = 0.50
MEMORY_STEP = 0.02
FRACTION_MARGIN = 0.005
GRAPH_BATCH_FLOOR = 16
HOST_MEMORY_GROWTH = 1.5
SHM_MINIMUM = 1 * GiB
MAX_STARTUP_SECONDS = 7 * 24 * 3600
BLOCK_SIZE = 16
CONTEXT_CANDIDATES = 4
"""Ladder sizes offered below the preferred one when the preferred one already failed."""
KV_ALLOCATED_SHARE = 0.9
UNKNOWN_BACKOFF_SECONDS = 30
UNKNOWN_BACKOFF_MAX_SECONDS = 600
SIXTEEN_BIT = ("auto", "bfloat16", "float16", "bf16", "half")


def gib_text(n_bytes: float) -> str:
    """Bytes as "11.70 GiB"."""
    return f"{n_bytes / GiB:.2f} GiB"


def size_text(n_bytes: float) -> str:
    """GiB with 2 decimals from 1 GiB up, else MiB (as torch prints)."""
    return gib_text(n_bytes) if n_bytes >= GiB else f"{n_bytes / MiB:.2f} MiB"


def round_fraction(value: float) -> float:
    """A fraction as flags carry it (3 decimals), so configurations compare equal."""
    return round(value, 3)


def number_of(ctx: PolicyContext, name: str) -> float | None:
    """A positive, plausible number the failure carries, else None (absurd values count as missing)."""
    value = ctx.failure.numbers.get(name)
    if not plausible_number(name, value) or not isinstance(value, int | float) or value <= 0:
        return None
    return float(value)


def architecture(ctx: PolicyContext) -> Architecture | None:
    """``spec.model.architecture``, else the catalog's entry for ``spec.model.name``, else None."""
    if ctx.spec.model.architecture is not None:
        return ctx.spec.model.architecture
    entry = lookup_model(ctx.spec.model.name)
    return entry.architecture if entry is not None else None


def layout_for(ctx: PolicyContext, kv_cache_dtype: str) -> KVLayout | None:
    """KV layout per GPU at ``kv_cache_dtype`` under the spec's TP/PP, None when not sizable."""
    arch = architecture(ctx)
    if arch is None:
        return None
    try:
        return kv_layout(arch, tensor_parallel=ctx.spec.parallelism.tensor,
                         pipeline_parallel=ctx.spec.parallelism.pipeline, kv_cache_dtype=kv_cache_dtype)
    except ValueError:
        return None


def context_at_most(tokens: float) -> int | None:
    """Largest ladder size <= ``tokens``; below the ladder (1024) a multiple of 16; None below 16."""
    size = ladder_floor(tokens)
    if size is not None:
        return size
    whole = int(tokens) // BLOCK_SIZE * BLOCK_SIZE if tokens >= BLOCK_SIZE else 0
    return whole if whole >= BLOCK_SIZE else None


def context_steps(ctx: PolicyContext, first: int | None) -> list[int]:
    """``first`` and the ladder sizes below it, each < the current context and >= the minimum."""
    out: list[int] = []
    size = first
    while size is not None and size >= ctx.minimum_context and len(out) < CONTEXT_CANDIDATES:
        if size < ctx.current.context_length:
            out.append(size)
        size = context_at_most(size - 1)
    return out


def memory_knob(ctx: PolicyContext) -> tuple[str, str, float]:
    """(field, flag, value) of the engine's memory fraction: vLLM utilization, SGLang static fraction."""
    if ctx.current.gpu_memory_utilization is not None:
        return "gpu_memory_utilization", "gpu-memory-utilization", ctx.current.gpu_memory_utilization
    return "mem_fraction_static", "mem-fraction-static", ctx.current.mem_fraction_static or 0.85


def replan_fit(ctx: PolicyContext, **pin: object) -> tuple[int, str] | None:
    """Ask the injected planner for the context that fits with ``pin`` (other knobs held), or None."""
    if ctx.replan is None:
        return None
    held: dict[str, object] = {k: v for k, v in ctx.current.model_dump().items() if v is not None}
    held.update(pin)
    try:
        fit, why = ctx.replan(ctx.spec, held)
    except (ValueError, LookupError, ArithmeticError):
        return None
    return int(fit), " ".join(str(why).split())


def plan_predicts(ctx: PolicyContext, config: EffectiveConfig) -> tuple[int, str] | None:
    """(context the injected planner predicts ``config`` holds, its reason), None without a planner.

    Every knob of ``config`` is pinned and its context is the target, so the context comes back unchanged when the
    plan predicts it fits (``budget.context.choose_context``), lower (a ladder size with headroom) when it predicts
    less, 0 when not even the ladder's floor fits or the slack cannot hold what the engine allocates outside the
    pool (SGLang). ``context.minimum`` is left out: this asks what fits, not whether it is still worth serving.
    """
    if ctx.replan is None:
        return None
    spec = ctx.spec.model_copy(update={"context": ctx.spec.context.model_copy(update={"minimum": None})})
    pin: dict[str, object] = {k: v for k, v in config.model_dump().items() if v is not None}
    try:
        fit, why = ctx.replan(spec, pin)
    except (ValueError, LookupError, ArithmeticError):
        return None
    return int(fit), " ".join(str(why).split())


def plan_checked(ctx: PolicyContext, config: EffectiveConfig) -> tuple[EffectiveConfig | None, str]:
    """``config`` as far as the plan predicts it runs (a proposal is never one the plan itself predicts
    to fail the same way): unchanged when the plan predicts its context fits (or there is no planner); with the
    context lowered to what the plan predicts when that is still >= the minimum context; None (with the plan's
    reason) when the plan predicts not even the minimum fits."""
    predicted = plan_predicts(ctx, config)
    if predicted is None or predicted[0] >= config.context_length:
        return config, ""
    tokens, why = predicted
    if tokens < ctx.minimum_context:
        return None, f"the plan predicts no context >= {ctx.minimum_context} fits there ({why})"
    return (config.model_copy(update={"context_length": tokens}),
            f"; context {config.context_length} -> {tokens}, which the plan predicts fits there ({why})")


def round_up_size(n_bytes: int) -> int:
    """Bytes rounded up to a whole GiB (from 1 GiB up) or MiB, so quantities print short."""
    unit = GiB if n_bytes >= GiB else MiB
    return -(-n_bytes // unit) * unit




def gpu_total_bytes(ctx: PolicyContext) -> int | None:
    """Memory of one GPU in bytes: the failure's "total capacity" (cudaMemGetInfo), else ``spec.gpu.memory``,
    else the catalog's product (NVML), else None."""
    total = number_of(ctx, "totalBytes")
    if total:
        return int(total)
    if ctx.spec.gpu.memory:
        return quantity_to_bytes(ctx.spec.gpu.memory)
    product = lookup_gpu(ctx.spec.gpu.product)
    return product.total_bytes if product is not None else None


def ceil_fraction(value: float) -> float:
    """``value`` rounded up to the next 0.01 (flags carry two decimals of a fraction step)."""
    return math.ceil(round(value * 100, 6)) / 100
