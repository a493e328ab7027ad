"""Status wording rules: a condition's reason and message never disagree, a phase names what happens (pure).

``budget_condition`` and ``failure_phase``; the rules: docs/design/status.md.
"""

from __future__ import annotations

from ctxfit.api import InferenceServerSpec
from ctxfit.api.effective import EffectiveConfig
from ctxfit.api.status import ConditionStatus, Phase, Reason
from ctxfit.budget.planner import Plan


def wanted_context(result: Plan, spec: InferenceServerSpec) -> int:
    """The context the spec asks for, as the planner took it (``budget.planner._target``): ``context.target``, else
    the model's maximum context (never the predicted maximum, which is what fits, not what is wanted)."""
    if spec.context.target is not None:
        return spec.context.target
    if result.model_max_context:
        return result.model_max_context
    return result.context_length  # the planner refuses a spec with neither (PlanInputError)


def below_target(result: Plan, spec: InferenceServerSpec) -> bool:
    """Whether the planned context is below what the spec asks for (the target, else the model's maximum)."""
    return result.context_length < wanted_context(result, spec)


def budget_condition(result: Plan, spec: InferenceServerSpec, headroom: float) -> tuple[ConditionStatus, Reason, str]:
    """The BudgetFits condition (status, reason, message) for a plan (the rules: docs/design/status.md).

    ``headroom`` is the fraction of the KV pool kept free when stepping below the target (for the message).
    """
    if not result.fits:
        return "False", Reason.DOES_NOT_FIT, "; ".join(result.reasons)
    choice = result.choice.reason if result.choice is not None else None
    others = [r for r in result.reasons if r != choice]
    if below_target(result, spec):
        wanted = wanted_context(result, spec)
        capped = min(wanted, result.model_max_context) if result.model_max_context else wanted
        why = (f"{headroom:.0%} of the KV pool kept free" if result.context_length < capped
               else f"the model's maximum context is {result.model_max_context}")
        head = (
            f"context {result.context_length} fits, below the target {wanted} (predicted max "
            f"{result.max_context_length} tokens, {why})"
        )
        return "True", Reason.FITS_BELOW_TARGET, "; ".join([head, *others])
    head = f"context {result.context_length} fits (predicted max {result.max_context_length} tokens)"
    return "True", Reason.FITS, "; ".join([head, *others])


def failure_phase(current: EffectiveConfig, following: EffectiveConfig) -> tuple[Phase, Reason]:
    """Phase and Ready reason while the next attempt waits: Retrying (same configuration) or SteppingDown."""
    if current == following:
        return Phase.RETRYING, Reason.RETRYING
    return Phase.STEPPING_DOWN, Reason.STEPPING_DOWN
