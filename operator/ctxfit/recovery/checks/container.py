"""Checks on the container and the attempt budget: AttemptsExhausted, HostOOMKilled, StartupProbeTimeout,
SharedMemoryTooSmall, Unknown (the catch-all)."""

from __future__ import annotations

from ctxfit.api import bytes_to_quantity
from ctxfit.recovery.kinds import FailureKind
from ctxfit.recovery.policy import Decision, PolicyContext, permanent, propose

from .common import (
    HOST_MEMORY_GROWTH,
    MAX_STARTUP_SECONDS,
    SHM_MINIMUM,
    UNKNOWN_BACKOFF_MAX_SECONDS,
    UNKNOWN_BACKOFF_SECONDS,
    number_of,
    round_up_size,
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


def check_host_oom_killed(ctx: PolicyContext) -> Decision | None:
    """HostOOMKilled: memory limit x1.5 (bounded by the node's allocatable); never the context."""
    if ctx.failure.kind is not FailureKind.HOST_OOM_KILLED:
        return None
    limit = ctx.current.memory_limit_bytes
    cap = ctx.memory_cap_bytes
    head = f"the container was OOM-killed at its memory limit {bytes_to_quantity(limit)} (host RAM, not GPU)"
    sizes: list[int] = []
    for growth in (HOST_MEMORY_GROWTH, 2.0):
        size = round_up_size(int(limit * growth))
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
    request = int(number_of(ctx, "requestedBytes") or 0)
    asked = f" (a {request:,}-byte segment failed)" if request else ""
    head = f"/dev/shm of {bytes_to_quantity(current)} is too small{asked}"
    size = max(SHM_MINIMUM, 2 * current, round_up_size(request) if request else 0)
    candidates = [(ctx.current.model_copy(update={"shm_bytes": s}), f"{head}; raising it to {bytes_to_quantity(s)}")
                  for s in (size, 2 * size)]
    return propose(ctx, "SharedMemoryTooSmall", candidates, head)


def check_unknown(ctx: PolicyContext) -> Decision:
    """Unknown (catch-all): retry the same configuration once, with backoff; then permanent."""
    evidence = ctx.failure.evidence[:200] or "no message"
    if ctx.tried(ctx.current):
        return permanent("Unknown", f"the same configuration already failed; unrecognized failure: {evidence}")
    delay = min(UNKNOWN_BACKOFF_MAX_SECONDS, UNKNOWN_BACKOFF_SECONDS * 2 ** (ctx.failed_attempts - 1))
    return Decision(ctx.current, False, f"unrecognized failure: {evidence}; retrying the same configuration "
                    f"in {delay} s", "Unknown", retry_after_seconds=delay)
