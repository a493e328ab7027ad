"""The policy chain: one small check per failure kind (issue 3 table), in order.

Each check takes a ``PolicyContext`` and returns a ``Decision`` when it applies, else None. Checks
list candidate configurations in order of preference, each changing the fewest knobs in the safe
direction; ``propose`` takes the first that has not failed before.

Constants and their sources:
- ``UTILIZATION_CEILING`` / ``FRACTION_CEILING`` 0.95: issue 3 ("raise gpu-memory-utilization in
  steps while <= 0.95"); same value as ``ctxfit.budget.planner``.
- ``MEMORY_STEP`` 0.02 (then 0.01, 0.03): issue 3 (GraphCaptureOOM "lower by 0.01-0.03",
  StaticMemoryTooSmall "+0.02 steps").
- ``FRACTION_MARGIN`` 0.005: "just above" SGLang's minimum viable fraction, rounded up to 0.01.
- ``UTILIZATION_FLOOR`` / ``FRACTION_FLOOR`` 0.50: below half the GPU the plan has failed; stop.
- ``GRAPH_BATCH_FLOOR`` 16: SGLang's own hint "set --cuda-graph-max-bs to a smaller value (e.g., 16)"
  (cuda_graph_runner.py ``CUDA_GRAPH_CAPTURE_FAILED_MSG``).
- ``HOST_MEMORY_GROWTH`` 1.5, ``SHM_MINIMUM`` 1 GiB, startup x2: issue 3 table.
- ``MAX_STARTUP_SECONDS`` 7 days: the ``spec.startup.timeoutSeconds`` bound.
- ``BLOCK_SIZE`` 16 tokens: vLLM ``CacheConfig.DEFAULT_BLOCK_SIZE`` (engine-memory.md A.2), used when
  deriving the capacity from the available KV bytes.
"""

from __future__ import annotations

import math

from ctxfit.api import EffectiveConfig, GiB, MiB, bytes_to_quantity
from ctxfit.api.spec import Architecture
from ctxfit.budget.context import ladder_floor
from ctxfit.budget.kv import KVLayout, kv_dtype_bytes, kv_layout
from ctxfit.catalog import lookup_model

from .kinds import FailureKind
from .policy import Check, Decision, PolicyContext, permanent, propose

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
UNKNOWN_BACKOFF_SECONDS = 30
UNKNOWN_BACKOFF_MAX_SECONDS = 600
SIXTEEN_BIT = ("auto", "bfloat16", "float16", "bf16", "half")


def _gib(n_bytes: float) -> str:
    return f"{n_bytes / GiB:.2f} GiB"


def _size(n_bytes: float) -> str:
    """GiB with 2 decimals from 1 GiB up, else MiB (as torch prints)."""
    return _gib(n_bytes) if n_bytes >= GiB else f"{n_bytes / MiB:.2f} MiB"


def _frac(value: float) -> float:
    return round(value, 3)


def _number(ctx: PolicyContext, name: str) -> float | None:
    value = ctx.failure.numbers.get(name)
    return float(value) if isinstance(value, int | float) and value > 0 else None


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


def _memory_knob(ctx: PolicyContext) -> tuple[str, str, float]:
    """(field, flag, value) of the engine's memory fraction: vLLM utilization, SGLang static fraction."""
    if ctx.current.gpu_memory_utilization is not None:
        return "gpu_memory_utilization", "gpu-memory-utilization", ctx.current.gpu_memory_utilization
    return "mem_fraction_static", "mem-fraction-static", ctx.current.mem_fraction_static or 0.85


def _replan(ctx: PolicyContext, **pin: object) -> tuple[int, str] | None:
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


def check_weights_do_not_fit(ctx: PolicyContext) -> Decision | None:
    """WeightsDoNotFit: permanent (more GPUs / TP, or a smaller weight format)."""
    if ctx.failure.kind is not FailureKind.WEIGHTS_DO_NOT_FIT:
        return None
    asked, free = _number(ctx, "requestedBytes"), _number(ctx, "freeBytes")
    detail = f" (tried to allocate {_size(asked)} with {_size(free)} free)" if asked and free else ""
    tp = ctx.spec.parallelism.tensor
    return permanent(
        "WeightsDoNotFit",
        f"{ctx.engine_name} ran out of GPU memory loading the weights{detail}: needs more GPUs "
        f"(tensor parallel above {tp}) or a smaller weight format",
    )


def check_attempts_exhausted(ctx: PolicyContext) -> Decision | None:
    """Bounded attempts: permanent once ``spec.attempts`` starts have failed."""
    if ctx.failed_attempts < ctx.spec.attempts:
        return None
    return permanent(
        "AttemptsExhausted",
        f"{ctx.failed_attempts} failed starts reach spec.attempts ({ctx.spec.attempts}); last failure "
        f"{ctx.failure.kind.value}: {ctx.failure.evidence[:160]}",
    )


def _kv_capacity(ctx: PolicyContext, requested: int) -> tuple[int | None, str]:
    """Tokens one request may hold per the failure: the engine's estimate, else available / bytes per token."""
    estimate = _number(ctx, "estimatedMaxContextLength")
    if estimate:
        return int(estimate), f"it estimates {int(estimate)} tokens fit"
    available = _number(ctx, "availableBytes")
    if available is None:
        return None, "no capacity in the message"
    layout = layout_for(ctx, ctx.current.kv_cache_dtype)
    if layout is not None:
        fit = layout.max_context_for(int(available), block_size=BLOCK_SIZE)
        return fit, f"{_gib(available)} / {layout.kv_bytes_per_token:,} B per token = {fit} tokens"
    needed = _number(ctx, "neededBytes")
    if needed and requested > 0:
        per_token = needed / requested
        fit = int(available / per_token)
        return fit, f"{_gib(available)} / {per_token:,.0f} B per token (from the message) = {fit} tokens"
    return None, "no bytes per token known"


def check_kv_cache_too_small(ctx: PolicyContext) -> Decision | None:
    """KVCacheTooSmall: context -> ladder size <= capacity x (1 - headroom); below the minimum: permanent."""
    if ctx.failure.kind is not FailureKind.KV_CACHE_TOO_SMALL:
        return None
    requested = int(_number(ctx, "requestedContextLength") or ctx.current.context_length)
    capacity, basis = _kv_capacity(ctx, requested)
    facts = []
    available, needed = _number(ctx, "availableBytes"), _number(ctx, "neededBytes")
    if available:
        facts.append(f"{ctx.engine_name} reported {_gib(available)} for KV")
    if needed:
        facts.append(f"{requested} tokens need {_gib(needed)}")
    else:
        facts.append(f"{ctx.engine_name}: {requested} tokens do not fit")
    facts.append(basis)
    head = "; ".join(facts)
    if capacity is None:
        first = context_at_most(min(requested, ctx.current.context_length) * (1.0 - ctx.headroom))
    else:
        first = context_at_most(capacity * (1.0 - ctx.headroom))
        if (first is None or first < ctx.minimum_context) and capacity >= ctx.minimum_context:
            first = ctx.minimum_context  # fits, with less headroom than asked
    if first is not None and first >= ctx.current.context_length:
        first = context_at_most(ctx.current.context_length - 1)
    steps = context_steps(ctx, first)
    if not steps:
        return permanent(
            "KVCacheTooSmall",
            f"{head}; no context >= context.minimum {ctx.minimum_context} fits "
            f"({ctx.headroom:.0%} headroom): needs more GPU memory for KV (more GPUs, smaller weights, FP8 KV)",
        )
    candidates = [
        (ctx.current.model_copy(update={"context_length": size}),
         f"{head}; stepping down to {size} ({ctx.headroom:.0%} headroom)")
        for size in steps
    ]
    return propose(ctx, "KVCacheTooSmall", candidates, head)


def check_context_exceeds_model_limit(ctx: PolicyContext) -> Decision | None:
    """ContextExceedsModelLimit: context -> the derived maximum M (or the ladder size below it)."""
    if ctx.failure.kind is not FailureKind.CONTEXT_EXCEEDS_MODEL_LIMIT:
        return None
    limits = [v for v in (_number(ctx, "derivedMaxContextLength"), _number(ctx, "modelMaxLength")) if v]
    requested = int(_number(ctx, "requestedContextLength") or ctx.current.context_length)
    if limits:
        limit = int(min(limits))
        head = f"{ctx.engine_name}: the model supports at most {limit} tokens, {requested} were asked"
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


def check_no_kv_cache_memory(ctx: PolicyContext) -> Decision | None:
    """NoKVCacheMemory: raise the memory fraction in steps while <= 0.95, else permanent."""
    if ctx.failure.kind is not FailureKind.NO_KV_CACHE_MEMORY:
        return None
    field, flag, value = _memory_knob(ctx)
    ceiling = UTILIZATION_CEILING if field == "gpu_memory_utilization" else FRACTION_CEILING
    head = f"{ctx.engine_name} found no memory for KV cache blocks at {flag} {value:g}"
    if value >= ceiling - 1e-9:
        return permanent("NoKVCacheMemory", f"{head} (ctxfit's ceiling is {ceiling}): weights and activations "
                         "leave no KV memory: needs more GPUs or a smaller weight format")
    raised = sorted({_frac(min(value + step, ceiling)) for step in (MEMORY_STEP, 0.01, 0.03)} - {_frac(value)},
                    key=lambda v: abs(v - value - MEMORY_STEP))
    candidates = [(ctx.current.model_copy(update={field: v}), f"{head}; raising it to {v:g}")
                  for v in raised if v > value]
    return propose(ctx, "NoKVCacheMemory", candidates, head)


def check_static_memory_too_small(ctx: PolicyContext) -> Decision | None:
    """StaticMemoryTooSmall: fraction just above SGLang's minimum (or +0.02); if that repeats a failed
    configuration, lower the context at that fraction; above 0.95 or below the minimum context: permanent."""
    if ctx.failure.kind is not FailureKind.STATIC_MEMORY_TOO_SMALL:
        return None
    field, flag, value = _memory_knob(ctx)
    minimum = _number(ctx, "minimumMemFractionStatic")
    if minimum:
        target = math.ceil(round((minimum + FRACTION_MARGIN) * 100, 6)) / 100
        head = f"{ctx.engine_name}: the loaded weights need {flag} above {minimum:g} (was {value:g})"
    else:
        target = value + MEMORY_STEP
        head = f"{ctx.engine_name}: not enough memory for the KV pool at {flag} {value:g}"
    target = _frac(max(target, value + 0.01))
    if target > FRACTION_CEILING + 1e-9:
        return permanent("StaticMemoryTooSmall", f"{head}; {target:g} is above ctxfit's ceiling {FRACTION_CEILING}: "
                         "needs more GPUs or a smaller weight format")
    at_target = ctx.current.model_copy(update={field: target})
    candidates = [(at_target, f"{head}; raising it to {target:g}")]
    if not minimum and _frac(value + 0.01) < target:
        candidates.append((ctx.current.model_copy(update={field: _frac(value + 0.01)}),
                           f"{head}; raising it to {_frac(value + 0.01):g}"))
    candidates += [
        (at_target.model_copy(update={"context_length": size}),
         f"{head}; {flag} {target:g} already failed, so also lowering the context to {size}")
        for size in context_steps(ctx, context_at_most(ctx.current.context_length - 1))
    ]
    return propose(ctx, "StaticMemoryTooSmall", candidates, head)


def check_graph_capture_oom(ctx: PolicyContext) -> Decision | None:
    """GraphCaptureOOM: SGLang halves cuda-graph-max-bs (down to 16), then lowers the fraction; vLLM lowers
    gpu-memory-utilization by 0.02 (0.01, 0.03). The context is unchanged."""
    if ctx.failure.kind is not FailureKind.GRAPH_CAPTURE_OOM:
        return None
    asked, free = _number(ctx, "requestedBytes"), _number(ctx, "freeBytes")
    detail = f" (tried to allocate {_size(asked)}, {_size(free)} free)" if asked and free else ""
    head = f"{ctx.engine_name} ran out of GPU memory capturing CUDA graphs{detail}"
    field, flag, value = _memory_knob(ctx)
    floor = UTILIZATION_FLOOR if field == "gpu_memory_utilization" else FRACTION_FLOOR
    lowered = [
        (ctx.current.model_copy(update={field: _frac(value - step)}),
         f"{head}; lowering {flag} from {value:g} to {_frac(value - step):g}")
        for step in (MEMORY_STEP, 0.01, 0.03)
        if _frac(value - step) >= floor
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
    dummy = _number(ctx, "dummyRequests")
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
    free, total = _number(ctx, "freeBytes"), _number(ctx, "totalBytes")
    util = ctx.current.gpu_memory_utilization
    shown = f"{free / GiB:.2f}/{total / GiB:.2f} GiB" if free and total else "less than asked"
    head = f"another process holds GPU memory: {shown} free"
    if util is None:
        return permanent("InsufficientFreeGPUMemory", f"{head}; free the GPU or schedule elsewhere")
    target = math.floor(free / total * 100 + 1e-9) / 100 if free and total else util - 0.05
    target = _frac(min(target, util - 0.01))
    if target < UTILIZATION_FLOOR:
        return permanent("InsufficientFreeGPUMemory",
                         f"{head}; {target:g} is below ctxfit's floor {UTILIZATION_FLOOR}: free the GPU")
    context = ctx.current.context_length
    fit = _replan(ctx, gpu_memory_utilization=target, context_length=context)
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


def _round_up(n_bytes: int) -> int:
    unit = GiB if n_bytes >= GiB else MiB
    return -(-n_bytes // unit) * unit


def check_host_oom_killed(ctx: PolicyContext) -> Decision | None:
    """HostOOMKilled: memory limit x1.5 (bounded by the node's allocatable); never the context."""
    if ctx.failure.kind is not FailureKind.HOST_OOM_KILLED:
        return None
    limit = ctx.current.memory_limit_bytes
    cap = ctx.memory_cap_bytes
    head = f"the container was OOM-killed at its memory limit {bytes_to_quantity(limit)} (host RAM, not GPU)"
    sizes: list[int] = []
    for growth in (HOST_MEMORY_GROWTH, 2.0):
        size = _round_up(int(limit * growth))
        if cap is not None:
            size = min(size, cap)
        if size > limit and size not in sizes:
            sizes.append(size)
    if not sizes:
        return permanent("HostOOMKilled", f"{head}; the node allocates at most {bytes_to_quantity(cap or limit)}: "
                         "use a node with more memory")
    candidates = [(ctx.current.model_copy(update={"memory_limit_bytes": s}),
                   f"{head}; raising it to {bytes_to_quantity(s)}") for s in sizes]
    return propose(ctx, "HostOOMKilled", candidates, head)


def check_startup_probe_timeout(ctx: PolicyContext) -> Decision | None:
    """StartupProbeTimeout: at least double startup.timeoutSeconds (up to 7 days)."""
    if ctx.failure.kind is not FailureKind.STARTUP_PROBE_TIMEOUT:
        return None
    seconds = ctx.current.startup_timeout_seconds
    head = f"the startup probe gave up after {seconds} s while the engine was still starting"
    sizes = sorted({min(MAX_STARTUP_SECONDS, seconds * f) for f in (2, 4)} - {seconds})
    sizes = [s for s in sizes if s > seconds]
    if not sizes:
        return permanent("StartupProbeTimeout", f"{head}; already at the {MAX_STARTUP_SECONDS} s maximum")
    candidates = [(ctx.current.model_copy(update={"startup_timeout_seconds": s}), f"{head}; allowing {s} s")
                  for s in sizes]
    return propose(ctx, "StartupProbeTimeout", candidates, head)


def check_shared_memory_too_small(ctx: PolicyContext) -> Decision | None:
    """SharedMemoryTooSmall: /dev/shm >= max(1 GiB, 2 x current, the failed request)."""
    if ctx.failure.kind is not FailureKind.SHARED_MEMORY_TOO_SMALL:
        return None
    current = ctx.current.shm_bytes
    request = int(_number(ctx, "requestedBytes") or 0)
    asked = f" (a {request:,}-byte segment failed)" if request else ""
    head = f"/dev/shm of {bytes_to_quantity(current)} is too small{asked}"
    size = max(SHM_MINIMUM, 2 * current, _round_up(request) if request else 0)
    candidates = [(ctx.current.model_copy(update={"shm_bytes": s}), f"{head}; raising it to {bytes_to_quantity(s)}")
                  for s in (size, 2 * size)]
    return propose(ctx, "SharedMemoryTooSmall", candidates, head)


def _dtype_bytes(kv_cache_dtype: str) -> float:
    try:
        return float(kv_dtype_bytes(kv_cache_dtype))
    except ValueError:
        return 0.5 if "4" in kv_cache_dtype else 1.0  # nvfp4/int4 variants; else assume 1 byte (conservative)


def check_kv_cache_dtype_unsupported(ctx: PolicyContext) -> Decision | None:
    """KVCacheDtypeUnsupported: KV dtype -> auto (16-bit), context re-planned for the larger bytes/token."""
    if ctx.failure.kind is not FailureKind.KV_CACHE_DTYPE_UNSUPPORTED:
        return None
    old = ctx.current.kv_cache_dtype
    head = f"{ctx.engine_name} cannot run a {old} KV cache on this GPU"
    if old in SIXTEEN_BIT:
        return permanent("KVCacheDtypeUnsupported", f"{ctx.engine_name} rejects the KV cache dtype {old}, which "
                         f"is already 16-bit: {ctx.failure.evidence[:160]}")
    context = ctx.current.context_length
    fit = _replan(ctx, kv_cache_dtype="auto", context_length=context)
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


def check_unknown(ctx: PolicyContext) -> Decision:
    """Unknown (catch-all): retry the same configuration once, with backoff; then permanent."""
    evidence = ctx.failure.evidence[:200] or "no message"
    if ctx.tried(ctx.current):
        return permanent("Unknown", f"the same configuration already failed; unrecognized failure: {evidence}")
    delay = min(UNKNOWN_BACKOFF_MAX_SECONDS, UNKNOWN_BACKOFF_SECONDS * 2 ** (ctx.failed_attempts - 1))
    return Decision(ctx.current, False, f"unrecognized failure: {evidence}; retrying the same configuration "
                    f"in {delay} s", "Unknown", retry_after_seconds=delay)


POLICY_CHAIN: tuple[tuple[str, Check], ...] = (
    ("WeightsDoNotFit", check_weights_do_not_fit),
    ("AttemptsExhausted", check_attempts_exhausted),
    ("KVCacheTooSmall", check_kv_cache_too_small),
    ("ContextExceedsModelLimit", check_context_exceeds_model_limit),
    ("NoKVCacheMemory", check_no_kv_cache_memory),
    ("StaticMemoryTooSmall", check_static_memory_too_small),
    ("GraphCaptureOOM", check_graph_capture_oom),
    ("SamplerWarmupOOM", check_sampler_warmup_oom),
    ("InsufficientFreeGPUMemory", check_insufficient_free_gpu_memory),
    ("HostOOMKilled", check_host_oom_killed),
    ("StartupProbeTimeout", check_startup_probe_timeout),
    ("SharedMemoryTooSmall", check_shared_memory_too_small),
    ("KVCacheDtypeUnsupported", check_kv_cache_dtype_unsupported),
    ("Unknown", check_unknown),
)
"""The chain, in order: permanent kinds, the attempt bound, then one check per kind, Unknown last."""
