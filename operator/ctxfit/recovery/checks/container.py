"""Checks on the container and the attempt budget: AttemptsExhausted, HostOOMKilled, StartupProbeTimeout,
SharedMemoryTooSmall, Unknown (the catch-all)."""

from __future__ import annotations

from ctxfit.api import bytes_to_quantity
from ctxfit.recovery.evidence import trim_words
from ctxfit.recovery.limits import MAX_HOST_BYTES, MIN_HOST_BYTES
from ctxfit.recovery.policy import Decision, PolicyContext, check_name, permanent, propose
from ctxfit.vocab.defaults import default_memory_limit_bytes
from ctxfit.vocab.kinds import FailureKind

from .common import (
    HOST_MEMORY_GROWTH,
    MAX_STARTUP_SECONDS,
    SHM_MINIMUM,
    UNKNOWN_BACKOFF_MAX_SECONDS,
    UNKNOWN_BACKOFF_SECONDS,
    number_of,
    round_up_size,
)

EVIDENCE_CHARS = 240
"""Characters of the evidence line quoted in an explanation (whole words)."""


def check_attempts_exhausted(ctx: PolicyContext) -> Decision | None:
    """Bounded attempts: permanent once ``spec.attempts`` starts have failed."""
    if ctx.failed_attempts < ctx.spec.attempts:
        return None
    return permanent(
        "AttemptsExhausted",
        f"{ctx.failed_attempts} failed starts reach spec.attempts ({ctx.spec.attempts}); last failure "
        f"{ctx.failure.kind.value}: {trim_words(ctx.failure.evidence, EVIDENCE_CHARS)}",
    )


def check_host_oom_killed(ctx: PolicyContext) -> Decision | None:
    """HostOOMKilled: memory limit x1.5 (then x2), bounded by the node's allocatable and 64 TiB; never the
    context. A limit below 1 MiB is not a real limit: the fallback (64 GiB) is proposed instead."""
    if ctx.failure.kind is not FailureKind.HOST_OOM_KILLED:
        return None
    limit = ctx.current.memory_limit_bytes
    node = ctx.memory_cap_bytes if ctx.memory_cap_bytes is not None and ctx.memory_cap_bytes > 0 else None
    cap = min(node, MAX_HOST_BYTES) if node is not None else MAX_HOST_BYTES
    # the kernel's kill is a Kubernetes signal ("terminated: reason=OOMKilled"); the engine's own log line (Ray's
    # memory monitor, a failed host mmap) names host memory without a kill
    what = "was OOM-killed" if ctx.failure.evidence.startswith("terminated") else "ran out of host memory"
    head = f"the container {what} at its memory limit {bytes_to_quantity(max(limit, 0))} (host RAM, not GPU)"
    if limit < MIN_HOST_BYTES:
        growths: tuple[float, ...] = ()
        sizes = [min(default_memory_limit_bytes(ctx.spec.gpu.count), cap)]
    else:
        growths = (HOST_MEMORY_GROWTH, 2.0)
        sizes = []
    for growth in growths:
        size = min(round_up_size(int(limit * growth)), cap)
        if size > limit and size not in sizes:
            sizes.append(size)
    sizes = [s for s in sizes if s > limit]
    if not sizes:
        where = (f"the node allocates at most {bytes_to_quantity(cap)}" if node is not None and node <= MAX_HOST_BYTES
                 else f"ctxfit's maximum is {bytes_to_quantity(MAX_HOST_BYTES)}")
        return permanent("HostOOMKilled", f"{head}; {where}: use a node with more memory")
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
    """SharedMemoryTooSmall: /dev/shm >= max(1 GiB, 2 x current, the failed request + what others already hold).

    vLLM's check prints "N MiB required, M MiB free": the rest of the current /dev/shm (current - free) is held by
    other users (NCCL segments, the engine's message queues), so the new size must hold the request on top."""
    if ctx.failure.kind is not FailureKind.SHARED_MEMORY_TOO_SMALL:
        return None
    current = ctx.current.shm_bytes
    request = int(number_of(ctx, "requestedBytes") or 0)
    free_number = ctx.failure.numbers.get("freeBytes")
    free = int(free_number) if isinstance(free_number, int | float) and 0 <= free_number <= current else None
    held = current - free if request and free is not None else 0
    asked = f" (a {request:,}-byte segment failed)" if request else ""
    if held:
        asked = f" ({request:,} bytes required with {free:,} free: others hold {held:,})"
    head = f"/dev/shm of {bytes_to_quantity(current)} is too small{asked}"
    size = min(max(SHM_MINIMUM, 2 * current, round_up_size(request + held) if request else 0), MAX_HOST_BYTES)
    sizes = sorted({s for s in (size, min(2 * size, MAX_HOST_BYTES)) if s > current})
    if not sizes:
        return permanent("SharedMemoryTooSmall", f"{head}; already at ctxfit's maximum "
                         f"{bytes_to_quantity(MAX_HOST_BYTES)}")
    candidates = [(ctx.current.model_copy(update={"shm_bytes": s}), f"{head}; raising it to {bytes_to_quantity(s)}")
                  for s in sizes]
    return propose(ctx, "SharedMemoryTooSmall", candidates, head)


def retry_unchanged_once(ctx: PolicyContext, check: str, what: str) -> Decision:
    """Retry ``current`` unchanged once, with backoff (30 s doubling per failed start, at most 600 s); when it
    already failed once: permanent. Both explanations quote the evidence line (cut at a word boundary)."""
    evidence = trim_words(ctx.failure.evidence, EVIDENCE_CHARS) or "no message"
    if ctx.tried(ctx.current):
        return permanent(check, f"the same configuration already failed before; {what}: {evidence}")
    delay = min(UNKNOWN_BACKOFF_MAX_SECONDS, UNKNOWN_BACKOFF_SECONDS * 2 ** (ctx.failed_attempts - 1))
    return Decision(ctx.current, False, f"{what}: {evidence}; retrying the same configuration once in {delay} s",
                    check_name(check), retry_after_seconds=delay)


def check_unknown(ctx: PolicyContext) -> Decision:
    """Unknown (catch-all): retry the same configuration once, with backoff; then permanent with the line."""
    return retry_unchanged_once(ctx, "Unknown", "unrecognized failure")
