"""One budgeting step of the planner: the KV pool a budget leaves and the context it holds (``fit_pool``), and one
configuration budgeted, fitted and its context chosen (``plan_step``) (pure; ``budget.planner`` runs the steps)."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from ctxfit.api import EffectiveConfig
from ctxfit.engines import BudgetTerms, Engine
from ctxfit.vocab.inputs import PlanInputs

from .context import ContextChoice, choose_context
from .hybrid import max_sequences, split_pool, state_bytes_per_sequence
from .kv import KVLayout, kv_layout
from .result import Fit


def draft_bytes_per_token(inputs: PlanInputs, engine: Engine, target: KVLayout, kv_cache_dtype: str) -> int:
    """KV bytes per token per GPU the draft's attention layers add: its own geometry (vLLM's drafter layers get
    their own KV specs) or, where the engine assumes it or the draft has none, the target's per-layer bytes times
    the draft's layers (SGLang ``pool_configurator``: "assumes the draft shares the target's per-layer KV size")."""
    draft = inputs.draft
    if draft is None or not draft.layers:
        return 0
    if draft.architecture is not None and engine.draft_own_geometry(inputs):
        own = kv_layout(draft.architecture, tensor_parallel=inputs.tp, kv_cache_dtype=kv_cache_dtype)
        return own.kv_bytes_per_token
    stage_layers = -(-(inputs.architecture.num_layers or 1) // inputs.pp)
    return target.kv_bytes_per_token * draft.layers // max(1, stage_layers)


def fit_pool(inputs: PlanInputs, engine: Engine, terms: BudgetTerms, kv_cache_dtype: str) -> Fit:
    """The KV pool ``terms`` leave for requests (minus the engine's null blocks and, for hybrid models, one running
    sequence's state), bytes, and the longest context it holds (block-rounded, capped at the model's maximum)."""
    sizing = engine.sizing_dtype(inputs, kv_cache_dtype)
    layout = kv_layout(
        inputs.architecture,
        tensor_parallel=inputs.tp,
        pipeline_parallel=inputs.pp,
        kv_cache_dtype=sizing,
    )
    if inputs.draft is not None and engine.draft_pool_in_budget(inputs):
        extra = draft_bytes_per_token(inputs, engine, layout, sizing)
        layout = dataclasses.replace(layout, full_bytes_per_token=layout.full_bytes_per_token + extra)
    block = engine.block_size(inputs)
    pool = terms.kv_cache_bytes - engine.null_blocks(inputs) * block * layout.kv_bytes_per_token
    if inputs.hybrid is not None:  # the state of one running sequence comes out of the token pool
        per_seq = state_bytes_per_sequence(inputs.hybrid, tp=inputs.tp, pp=inputs.pp)
        split = split_pool(inputs.spec.engine.kind, pool, per_seq)
        pool = split.kv_pool_bytes - (per_seq if not split.state_pool_bytes else 0)
    in_flight = engine.in_flight_tokens(inputs)
    limit = inputs.model_max_context or (1 << 27)
    max_len = layout.max_context_for(pool, block_size=block, in_flight_tokens=in_flight, limit=limit)
    return Fit(layout, pool, max_len, block, in_flight)


@dataclass(frozen=True)
class Goal:
    """What the context is chosen against: target, minimum, headroom and the model's maximum, tokens."""

    target: int
    minimum: int
    headroom: float
    model_max: int | None


@dataclass(frozen=True)
class Step:
    """One configuration planned: its context choice, fit, effective config, budget, problems and concurrency."""

    choice: ContextChoice
    fit: Fit
    effective: EffectiveConfig
    terms: BudgetTerms
    rest: list[str]
    blocking: list[str]
    concurrency: float


def plan_step(inputs: PlanInputs, engine: Engine, effective: EffectiveConfig, goal: Goal) -> Step:
    """Budget, fit and context choice for one effective configuration."""
    terms = engine.budget(inputs, effective)
    fit = fit_pool(inputs, engine, terms, effective.kv_cache_dtype)
    capped_target = min(goal.target, goal.model_max) if goal.model_max else goal.target
    fit_tokens = fit.max_context_length
    if capped_target > fit_tokens and fit.pool_bytes >= fit.layout.request_bytes(
        capped_target, block_size=fit.block_size, in_flight_tokens=fit.in_flight_tokens
    ):
        fit_tokens = capped_target  # the block-rounded maximum sits just below an unrounded target that fits
    choice = choose_context(
        target=goal.target, fit=fit_tokens, headroom=goal.headroom, minimum=goal.minimum, model_max=goal.model_max
    )
    chosen = effective.model_copy(update={"context_length": choice.context_length})
    pool_tokens = max(0, fit.pool_bytes // max(1, fit.layout.kv_bytes_per_token))
    chosen = engine.finalize(inputs, chosen, pool_tokens)
    chosen, hybrid_note = _cap_sequences(inputs, chosen, terms, fit)
    terms = _with_draft_pool(inputs, engine, engine.budget(inputs, chosen), fit, pool_tokens, chosen.kv_cache_dtype)
    rest = engine.check_rest(inputs, chosen, terms) if choice.fits else []
    blocking = engine.rest_blocking(inputs, chosen, terms) if choice.fits else []
    concurrency = 0.0
    if choice.context_length > 0 and fit.pool_bytes > 0:
        one = fit.layout.request_bytes(
            choice.context_length, block_size=fit.block_size, in_flight_tokens=fit.in_flight_tokens
        )
        concurrency = min(fit.pool_bytes / one, float(chosen.max_num_seqs))
    if hybrid_note and choice.fits:
        rest = [*rest, hybrid_note]
    return Step(choice, fit, chosen, terms, rest, blocking, concurrency)


def _with_draft_pool(inputs: PlanInputs, engine: Engine, terms: BudgetTerms, fit: Fit, pool_tokens: int,
                     kv_cache_dtype: str) -> BudgetTerms:
    """Where the draft's KV pool is sized after the target's (SGLang before 0.5.14: ``draft_runner_cache_size``
    tokens of the draft's layers, ``model_runner.init_memory_pool``), it must fit outside the budget: add it as an
    outside extra term."""
    if inputs.draft is None or not inputs.draft.layers or engine.draft_pool_in_budget(inputs):
        return terms
    from ctxfit.engines.extras import ExtraTerm

    per_token = draft_bytes_per_token(inputs, engine, fit.layout, engine.sizing_dtype(inputs, kv_cache_dtype))
    pool = per_token * pool_tokens
    term = ExtraTerm("draft KV pool", pool, False,
                     f"{pool_tokens} tokens x {per_token} B of the draft's {inputs.draft.layers} layer(s), allocated "
                     "after the target's pool")
    return dataclasses.replace(terms, outside_bytes=terms.outside_bytes + pool, extras=(*terms.extras, term))


def _cap_sequences(
    inputs: PlanInputs, effective: EffectiveConfig, terms: BudgetTerms, fit: Fit
) -> tuple[EffectiveConfig, str]:
    """Hybrid models: max-num-seqs at most what the state pool holds next to one full request."""
    if inputs.hybrid is None or effective.context_length <= 0:
        return effective, ""
    per_seq = state_bytes_per_sequence(inputs.hybrid, tp=inputs.tp, pp=inputs.pp)
    pool = terms.kv_cache_bytes - fit.block_size * fit.layout.kv_bytes_per_token
    split = split_pool(inputs.spec.engine.kind, pool, per_seq)
    one = fit.layout.request_bytes(effective.context_length, block_size=fit.block_size,
                                   in_flight_tokens=fit.in_flight_tokens)
    cap = max_sequences(split, one_request_bytes=one)
    if effective.max_num_seqs <= cap:
        return effective, ""
    note = (f"max-num-seqs {effective.max_num_seqs} -> {cap}: each running sequence keeps "
            f"{per_seq / 2**20:.1f} MiB of {inputs.hybrid.kind} state on this GPU "
            f"({inputs.hybrid.state_layers} state layers), and the pool holds {cap} next to one "
            f"{effective.context_length}-token request")
    return effective.model_copy(update={"max_num_seqs": cap}), note


FRACTION_STEP = 0.01
FRACTION_FLOOR = 0.5
"""ctxfit lowers an unset SGLang mem-fraction-static in 0.01 steps, not below 0.5, until the slack holds."""


def lower_fraction_until_slack_holds(
    inputs: PlanInputs, engine: Engine, step: Step, goal: Goal, reasons: list[str]
) -> Step:
    """SGLang with the default fraction: trade KV pool for slack until activations, graphs and req_to_token fit."""
    assert step.effective.mem_fraction_static is not None
    start = step.effective.mem_fraction_static
    fraction = start
    while step.blocking and fraction - FRACTION_STEP >= FRACTION_FLOOR:
        fraction = round(fraction - FRACTION_STEP, 3)
        step = plan_step(inputs, engine, step.effective.model_copy(update={"mem_fraction_static": fraction}), goal)
    if fraction != start:
        reasons.append(
            f"lowered mem-fraction-static from {start} to {fraction} so the 1 - fraction slack holds CUDA graphs, "
            "buffers and req_to_token"
        )
    return step
