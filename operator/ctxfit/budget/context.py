"""Context-length policy: the ladder of round sizes and the choice between target and fit.

Ladder: ``1024 x {1, 1.5} x 2^k`` = 1024, 1536, 2048, 3072, ..., 131072, 196608, 262144, ...
"""

from __future__ import annotations

from dataclasses import dataclass

LADDER_BASE = 1024
LADDER_MAX = 1 << 27

DEFAULT_HEADROOM = 0.25
"""Fraction of the predicted KV pool kept free when stepping down (docs/field-reports.md deployment 1: 25%)."""
DEFAULT_MINIMUM_CONTEXT = 4096
"""Smallest context worth serving when the spec gives no ``context.minimum`` (planner and recovery)."""


def context_ladder(upper: int = LADDER_MAX) -> list[int]:
    """All ladder sizes <= ``upper``, ascending."""
    sizes: list[int] = []
    power = LADDER_BASE
    while power <= upper:
        sizes.append(power)
        if power * 3 // 2 <= upper:
            sizes.append(power * 3 // 2)
        power *= 2
    return sizes


def ladder_floor(tokens: float) -> int | None:
    """Largest ladder size <= ``tokens``, or None when ``tokens`` < 1024."""
    best: int | None = None
    for size in context_ladder(int(tokens) if tokens >= LADDER_BASE else 0):
        best = size
    return best


def step_down_context(capacity_tokens: int, headroom: float, *, model_max: int | None = None) -> int | None:
    """The ladder size kept after a failure that reported ``capacity_tokens`` fit.

    Returns the largest ladder size <= ``capacity_tokens x (1 - headroom)`` (and <= ``model_max``),
    or None when no ladder size is that small.
    """
    budget = capacity_tokens * (1.0 - headroom)
    if model_max is not None:
        budget = min(budget, model_max)
    return ladder_floor(budget)


@dataclass(frozen=True)
class ContextChoice:
    """Outcome of the context policy.

    Attributes:
        context_length: chosen tokens (0 when nothing fits).
        fits: whether a context >= minimum was found.
        reason: one human sentence explaining the choice.
    """

    context_length: int
    fits: bool
    reason: str


def choose_context(*, target: int, fit: int, headroom: float, minimum: int, model_max: int | None) -> ContextChoice:
    """Pick the context.

    - If ``target`` (capped at ``model_max``) <= ``fit``: use it.
    - Else the largest ladder size <= ``fit x (1 - headroom)`` and <= ``model_max``.
    - Below ``minimum``: does not fit.
    """
    capped_target = min(target, model_max) if model_max else target
    if capped_target <= fit and capped_target >= minimum:
        return ContextChoice(capped_target, True, f"context {capped_target} fits (predicted max {fit})")
    if capped_target <= fit:
        return ContextChoice(0, False, f"context {capped_target} is below context.minimum {minimum}")
    stepped = step_down_context(fit, headroom, model_max=model_max)
    if stepped is None or stepped < minimum:
        return ContextChoice(
            0,
            False,
            f"context {capped_target} does not fit: predicted max {fit} tokens; with {headroom:.0%} headroom "
            f"no ladder size reaches context.minimum {minimum}",
        )
    return ContextChoice(
        stepped,
        True,
        f"context {capped_target} does not fit (predicted max {fit} tokens); chose {stepped} ({headroom:.0%} headroom)",
    )
