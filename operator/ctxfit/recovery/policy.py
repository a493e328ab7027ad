"""The recovery policy: (spec, current effective config, failure, history) -> next config or a verdict.

Pure: no I/O, no clock (a retry delay is returned, not slept). The decision is an ordered chain of
small checks (``ctxfit.recovery.checks.POLICY_CHAIN``, cert-manager policy-chain style); the first
check that applies decides. The driver then enforces the rules every decision obeys:

- never return a configuration already in ``history`` (only Unknown retries ``current`` once);
- never return a configuration an earlier failure (``history`` or ``current``) rules out: a value that
  failed in one direction bounds that knob for every later proposal (``ctxfit.recovery.bounds``); when
  every candidate of a check is ruled out, another knob moves (``checks.escape``: graph batch, context,
  KV dtype) or the verdict is permanent with the bracketing numbers;
- the context never rises (no rule raises it; after a memory failure it can only fall), and never
  exceeds ``min(the model's maxPositionEmbeddings, spec.context.target)`` (``limits.context_ceiling``):
  a proposal above it is capped there;
- attempts are bounded: after ``spec.attempts`` failed starts (default 5) the verdict is permanent;
- every decision carries a one-line explanation with the numbers.

``history`` holds the attempts *before* ``current`` (the operator appends ``current`` after deciding).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from enum import StrEnum
from functools import cached_property
from typing import Any

from ctxfit.api import EffectiveConfig, EngineKind, InferenceServerSpec
from ctxfit.budget.context import DEFAULT_HEADROOM, DEFAULT_MINIMUM_CONTEXT
from ctxfit.engines import get_engine
from ctxfit.vocab.kinds import DOWNLOAD_KINDS, Failure, FailureKind

from .bounds import Failed, first_ruling
from .limits import context_ceiling
from .wire import FieldError, effective_from_wire, shown_value

Replan = Callable[[InferenceServerSpec, dict[str, Any]], tuple[int, str]]
"""``replan(spec, pin) -> (context length that fits with ``pin`` held, or 0; one-line explanation)``.

``pin`` holds ``EffectiveConfig`` field names (snake_case) to keep fixed, plus ``context_length`` as the
target (``ctxfit.budget.planner.replan_context``). It may raise ``ValueError`` (e.g. an unknown model);
the policy then falls back to its own arithmetic."""



@dataclass(frozen=True)
class FailedAttempt:
    """One earlier failed start: the configuration that ran and how it failed."""

    config: EffectiveConfig
    failure: FailureKind

    @classmethod
    def from_wire(cls, data: Mapping[Any, Any], *, defaults: EffectiveConfig | None = None,
                  engine: EngineKind | None = None) -> FailedAttempt:
        """Read ``{<EffectiveConfig wire fields>..., failure: <kind>}``; missing fields come from ``defaults``.

        Fields are checked with the spec's bounds (``ctxfit.recovery.wire``); ``engine`` also checks that
        the engine's memory fraction is set and the other engine's is not.

        Raises:
            FieldError (a ValueError, message ``<field>: <problem>``): no or unknown failure kind, an
            unknown field, a bad value, or a missing field without ``defaults``.
        """
        if data.get("failure") is None:
            raise FieldError("failure", "required (the failure kind of this attempt)")
        try:
            kind = FailureKind(str(data["failure"]))
        except ValueError:
            allowed = ", ".join(k.value for k in FailureKind)
            raise FieldError("failure", f"{shown_value(data['failure'])} is not one of {allowed}") from None
        config = effective_from_wire(data, defaults=defaults, engine=engine, extra=("failure",))
        return cls(config, kind)


class CheckName(StrEnum):
    """The policy chain's own checks (``Decision.check``); every other check is named as the failure kind it
    handles (a ``FailureKind``)."""

    ATTEMPTS_EXHAUSTED = "AttemptsExhausted"
    CONTEXT_CEILING = "ContextCeiling"
    NONE = "none"


def check_name(text: str) -> CheckName | FailureKind:
    """``text`` as a check: a chain check or a failure kind. Raises ``ValueError`` for anything else."""
    try:
        return CheckName(text)
    except ValueError:
        return FailureKind(text)


@dataclass(frozen=True)
class Decision:
    """What to do after a failure.

    Attributes:
        next: the whole configuration to start next (None when permanent).
        permanent: no configuration change can fix it (or attempts are exhausted): say so, stop.
        explanation: one line with the numbers.
        check: the policy check that decided (a stable reason for conditions and Events).
        retry_after_seconds: how long to wait before the next start (0: at once).
    """

    next: EffectiveConfig | None
    permanent: bool
    explanation: str
    check: CheckName | FailureKind
    retry_after_seconds: int = 0


@dataclass(frozen=True)
class PolicyContext:
    """Everything a check reads. Built by ``decide``."""

    spec: InferenceServerSpec
    current: EffectiveConfig
    failure: Failure
    history: tuple[FailedAttempt, ...]
    replan: Replan | None
    memory_cap_bytes: int | None

    @property
    def engine(self) -> EngineKind:
        """The server's engine."""
        return self.spec.engine.kind

    @property
    def engine_name(self) -> str:
        """"vLLM" or "SGLang" (for explanations; ``Engine.display_name``)."""
        return get_engine(self.engine).display_name

    @property
    def headroom(self) -> float:
        """KV headroom fraction: ``spec.context.headroom`` or ``DEFAULT_HEADROOM``."""
        h = self.spec.context.headroom
        return DEFAULT_HEADROOM if h is None else h

    @property
    def minimum_context(self) -> int:
        """``spec.context.minimum``, else ``DEFAULT_MINIMUM_CONTEXT`` (never above the current context)."""
        if self.spec.context.minimum is not None:
            return self.spec.context.minimum
        return min(DEFAULT_MINIMUM_CONTEXT, self.current.context_length)

    @cached_property
    def context_ceiling(self) -> tuple[int, str] | None:
        """``(tokens, what)``: the highest context any proposal may carry (``limits.context_ceiling``)."""
        return context_ceiling(self.spec)

    def capped(self, config: EffectiveConfig) -> tuple[EffectiveConfig, str]:
        """``config`` with its context lowered to the ceiling when above it, and a note saying so."""
        ceiling = self.context_ceiling
        if ceiling is None or config.context_length <= ceiling[0]:
            return config, ""
        return (config.model_copy(update={"context_length": ceiling[0]}),
                f"; context capped at {ceiling[1]}")

    @property
    def failed_attempts(self) -> int:
        """Failed starts so far, ``current`` included."""
        return len(self.history) + 1

    def tried(self, config: EffectiveConfig) -> bool:
        """Whether ``config`` already failed (is in ``history``)."""
        return any(a.config == config for a in self.history)

    @cached_property
    def failed(self) -> tuple[Failed, ...]:
        """Every failed start so far as bounds, ``current`` included (``ctxfit.recovery.bounds``)."""
        return (*tuple(Failed(a.config, a.failure) for a in self.history), Failed(self.current, self.failure.kind))

    def ruled_out(self, config: EffectiveConfig) -> Failed | None:
        """The earlier failure that rules ``config`` out (at or beyond it on all its kind's knobs), else None."""
        return first_ruling(config, self.failed)

    def first_untried(self, candidates: Iterable[tuple[EffectiveConfig, str]]) -> tuple[EffectiveConfig, str] | None:
        """The first candidate that differs from ``current``, is not in history and keeps the context."""
        for proposed, why in candidates:
            config, note = self.capped(proposed)
            if config == self.current or self.tried(config) or self.ruled_out(config) is not None:
                continue
            if config.context_length > self.current.context_length:
                continue
            return config, why + note
        return None


Check = Callable[[PolicyContext], Decision | None]
"""One link of the chain: a Decision when it applies, else None."""


def propose(ctx: PolicyContext, check: str, candidates: Sequence[tuple[EffectiveConfig, str]],
            exhausted: str) -> Decision:
    """Decision for the first untried candidate; permanent with ``exhausted`` + why when none is left.
    ``check``: a ``CheckName`` or ``FailureKind`` value (raises ``ValueError`` otherwise)."""
    name = check_name(check)
    chosen = ctx.first_untried(candidates)
    if chosen is not None:
        return Decision(chosen[0], False, chosen[1], name)
    from .checks.escape import ESCAPE_KINDS, escape

    if ctx.failure.kind in ESCAPE_KINDS:
        return escape(ctx, name, candidates, exhausted)
    if candidates:
        return Decision(None, True, f"{exhausted}; every next step already failed ({candidates[0][1]})", name)
    return Decision(None, True, exhausted, name)


def permanent(check: str, explanation: str) -> Decision:
    """A permanent verdict; ``check``: a ``CheckName`` or ``FailureKind`` value (raises ``ValueError`` otherwise)."""
    return Decision(None, True, explanation, check_name(check))


def changed_knobs(before: EffectiveConfig, after: EffectiveConfig) -> tuple[str, ...]:
    """Wire names of the fields that differ between two configurations, in wire order."""
    a, b = before.to_wire(), after.to_wire()
    return tuple(k for k in a if a[k] != b[k])


def _guard(ctx: PolicyContext, decision: Decision) -> Decision:
    """Enforce the driver's invariants on a check's decision (defensive: checks already obey them)."""
    decision = replace(decision, explanation=" ".join(decision.explanation.split()))
    nxt = decision.next
    if decision.permanent or nxt is None:
        return Decision(None, True, decision.explanation, decision.check)
    if nxt.context_length > ctx.current.context_length:
        return permanent(decision.check, f"{decision.explanation}; but the context may not rise after a failure")
    nxt, note = ctx.capped(nxt)
    decision = replace(decision, next=nxt, explanation=decision.explanation + note)
    if ctx.tried(nxt):
        return permanent(decision.check, f"{decision.explanation}; but that configuration already failed")
    ruling = ctx.ruled_out(nxt) if nxt != ctx.current else None
    if ruling is not None:
        return permanent(decision.check, f"{decision.explanation}; but an earlier {ruling.kind.value} rules that "
                         "configuration out")
    return decision


def decide(
    spec: InferenceServerSpec,
    current: EffectiveConfig,
    failure: Failure,
    history: Sequence[FailedAttempt] = (),
    *,
    replan: Replan | None = None,
    memory_cap_bytes: int | None = None,
) -> Decision:
    """The next configuration after ``failure`` of ``current``, or a permanent verdict.

    Args:
        spec: the server's spec (intent: headroom, minimum context, attempts, engine).
        current: the configuration that just failed.
        failure: the classifier's diagnosis.
        history: earlier failed attempts, oldest first, ``current`` not included.
        replan: the planner's re-plan (``Replan``) for KVCacheDtypeUnsupported and
            InsufficientFreeGPUMemory; None falls back to bytes-per-token arithmetic.
        memory_cap_bytes: the node's allocatable memory; HostOOMKilled never raises the limit above it.

    Returns:
        A ``Decision``. Never raises for any failure kind.
    """
    from .checks import POLICY_CHAIN

    ctx = PolicyContext(spec, current, failure, tuple(history), replan, memory_cap_bytes)
    if failure.kind in DOWNLOAD_KINDS:  # not an engine configuration: never a step-down (recovery.download)
        from .download import decide_download

        return decide_download(ctx)
    for _name, check in POLICY_CHAIN:
        decision = check(ctx)
        if decision is not None:
            return _guard(ctx, decision)
    return permanent("none", f"no policy for {failure.kind.value}")  # unreachable: the chain ends in a catch-all
