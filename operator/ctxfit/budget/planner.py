"""The planner: spec (+ node GPU facts) -> per-GPU budget, predicted max context, chosen context, flags.

Pure: no I/O. ``plan`` raises ``PlanInputError`` only for input it cannot read (a field the user wrote);
a plan that does not fit is a normal result (``Plan.fits`` False with ``reasons``), and so is a spec the
engines could not run at all (a TP/PP layout the model cannot be split by, weights larger than the
GPU, a GPU whose compute capability the engine cannot run the model on: ``budget.verdict``,
``budget.capability``). Hybrid models: the KV pool is shared with (vLLM) or split from (SGLang) the
recurrent state, and max-num-seqs is capped so every running sequence's state fits (``budget.hybrid``).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from ctxfit.api import EffectiveConfig, GiB, InferenceServerSpec
from ctxfit.engines import BudgetTerms, Engine, get_engine
from ctxfit.engines.flags import sliding_as_full
from ctxfit.engines.weights import checkpoint_weights
from ctxfit.vocab.inputs import PlanInputError, PlanInputs, resolve_inputs
from ctxfit.vocab.modelsource import ModelSource

from .calibrate import CalibrationTable, apply_learned_reserve, calibrate_engine
from .capability import capability_problems
from .context import DEFAULT_HEADROOM, DEFAULT_MINIMUM_CONTEXT, ContextChoice, choose_context, step_down_context
from .hybrid import max_sequences, split_pool, state_bytes_per_sequence
from .kv import KVLayout, kv_layout
from .parallel import parallelism_problems
from .result import Fit, Plan

__all__ = ["FRACTION_CEILING", "UTILIZATION_CEILING", "Fit", "Plan", "initial_effective", "plan", "replan_context"]
from .verdict import suggestions, weights_problem

UTILIZATION_CEILING = 0.95
"""Highest gpu-memory-utilization ctxfit suggests (recovery raises in steps up to here)."""
FRACTION_CEILING = 0.95
"""Highest mem-fraction-static ctxfit suggests."""


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


def _fit(inputs: PlanInputs, engine: Engine, terms: BudgetTerms, kv_cache_dtype: str) -> Fit:
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


def _apply_pin(effective: EffectiveConfig, pin: dict[str, Any] | None) -> EffectiveConfig:
    if not pin:
        return effective
    update = {k: v for k, v in pin.items() if k != "context_length" and v is not None}
    unknown = set(update) - set(EffectiveConfig.model_fields)
    if unknown:
        raise ValueError(f"unknown effective fields pinned: {sorted(unknown)}")
    return effective.model_copy(update=update)


def _target(inputs: PlanInputs, pin: dict[str, Any] | None) -> int:
    if pin and pin.get("context_length"):
        return int(pin["context_length"])
    if inputs.spec.context.target:
        return inputs.spec.context.target
    if inputs.model_max_context:
        return inputs.model_max_context
    raise PlanInputError("spec.context.target", "required when the model's maximum context is unknown")


def plan(  # noqa: C901 - the planner's steps in order; to split with the any-model work
    spec: InferenceServerSpec,
    *,
    node_product: str | None = None,
    node_gpu_memory_mib: int | None = None,
    node_compute_capability: tuple[int, int] | None = None,
    node_gpus: int | None = None,
    hf_config: dict[str, Any] | None = None,
    adapter_configs: Mapping[str, Mapping[str, Any]] | None = None,
    draft_config: Mapping[str, Any] | None = None,
    draft_model: ModelSource | None = None,
    pin: dict[str, Any] | None = None,
    model: ModelSource | None = None,
    default_headroom: float = DEFAULT_HEADROOM,
    suggest: bool = True,
    calibration: CalibrationTable | None = None,
) -> Plan:
    """Plan one replica of ``spec``.

    Args:
        spec: validated InferenceServer spec.
        node_product, node_gpu_memory_mib, node_compute_capability: what the node's GFD labels say.
        node_gpus: GPUs on one eligible node (allocatable ``nvidia.com/gpu``), for "more GPUs" suggestions.
        hf_config: a config.json dict, used when the spec has no architecture.
        adapter_configs: adapter name -> its adapter_config.json (LoRA rank and modules when the spec omits them).
        draft_config: the speculative draft's config.json (its geometry and weights when the spec omits them).
        draft_model: the draft resolved like the target (``ctxfit.hub``): its config stands for ``draft_config`` and
            its checkpoint gives the draft's weights per GPU with the engine's sharding rules.
        model: a resolved model (``ctxfit.hub``): its config stands for ``hf_config`` and its checkpoint's tensors
            give the weights per GPU with the engine's sharding rules (``ctxfit.engines.weights``); spec fields win.
        pin: effective fields (snake_case) to hold fixed, e.g. ``{"kv_cache_dtype": "auto"}``;
            ``context_length`` replaces the target.
        default_headroom: headroom when ``spec.context.headroom`` is unset.
        suggest: compute "what would make it fit" when it does not fit.
        calibration: observed-minus-predicted KV residuals; the most specific matching entry shifts
            the KV pool (``ctxfit.budget.calibrate``) and the reasons say so.

    Raises:
        PlanInputError: unknown GPU/model without the needed fields (never for "does not fit": weights
            larger than the GPU and layouts the model cannot be split by are plans with ``fits`` False).
    """
    if model is not None and hf_config is None:
        hf_config = model.config
    from_checkpoint = None
    if model is not None and spec.model.weights_per_gpu is None:
        from_checkpoint = checkpoint_weights(spec, model.checkpoint, model.config)
        if from_checkpoint is not None:
            from_checkpoint = (from_checkpoint[0], f"{from_checkpoint[1]} ({model.describe()})")
    inputs = resolve_inputs(
        spec,
        checkpoint_weights=from_checkpoint,
        node_product=node_product,
        node_gpu_memory_mib=node_gpu_memory_mib,
        node_compute_capability=node_compute_capability,
        hf_config=hf_config,
        adapter_configs=adapter_configs,
        draft_config=draft_model.config if draft_model is not None and draft_config is None else draft_config,
        draft_weights=checkpoint_weights(spec, draft_model.checkpoint, draft_model.config)
        if draft_model is not None else None,
    )
    inputs, reserve_reason = apply_learned_reserve(inputs, calibration)
    inputs, flag_notes = apply_engine_flags(get_engine(spec.engine.kind), inputs)
    engine, calibration_key, correction = calibrate_engine(get_engine(spec.engine.kind), inputs, calibration)
    reasons: list[str] = [correction.reason] if correction is not None else []
    reasons += [reserve_reason] if reserve_reason else []
    reasons.extend(flag_notes)
    if model is not None:
        arch_from = "spec.model.architecture" if spec.model.architecture is not None else "config.json"
        reasons.append(f"model resolved from {model.describe()} ({model.weight_format}): architecture from "
                       f"{arch_from}, weights from {inputs.weights_source}")
    if inputs.compute_capability is None:
        reasons.append("GPU compute capability unknown (product not in the catalog): KV dtype support not checked")
    requested_dtype = str((pin or {}).get("kv_cache_dtype") or spec.memory.kv_cache_dtype)
    decision = engine.resolve_kv_dtype(inputs, requested_dtype)
    if decision.reason:
        reasons.append(decision.reason)
    effective = engine.default_effective(inputs, kv_cache_dtype=decision.kv_cache_dtype)
    effective = _apply_pin(effective, pin)
    effective = effective.model_copy(update={"kv_cache_dtype": decision.kv_cache_dtype})

    headroom = spec.context.headroom if spec.context.headroom is not None else default_headroom
    target = _target(inputs, pin)
    model_max = inputs.model_max_context
    minimum = spec.context.minimum or min(DEFAULT_MINIMUM_CONTEXT, target)
    if model_max and minimum > model_max:
        raise PlanInputError("spec.context.minimum", f"{minimum} is above the model's maximum context {model_max}")
    if model_max and target > model_max:
        reasons.append(f"context.target {target} exceeds the model's maximum {model_max}; capped at {model_max}")
    goal = _Goal(target=target, minimum=minimum, headroom=headroom, model_max=model_max)

    capability = capability_problems(inputs)
    refusal = parallelism_problems(inputs) + capability
    if refusal:
        return dataclasses.replace(_refused(inputs, engine, effective, [*reasons, *refusal], node_gpus),
                                   capability_refusals=tuple(capability))
    step = _plan_step(inputs, engine, effective, goal)
    if inputs.hybrid is not None and step.effective.max_num_seqs < effective.max_num_seqs:
        # fewer sequences also shrink the sampler warm-up: budget once more with the capped value
        capped = _plan_step(inputs, engine, effective.model_copy(
            update={"max_num_seqs": step.effective.max_num_seqs}), goal)
        step = dataclasses.replace(capped, rest=[*capped.rest, *[r for r in step.rest if r not in capped.rest]])
    fraction_pinned = spec.memory.mem_fraction_static is not None or bool(pin and pin.get("mem_fraction_static"))
    if step.blocking and step.effective.mem_fraction_static is not None and not fraction_pinned:
        step = _lower_fraction_until_slack_holds(inputs, engine, step, goal, reasons)
    reasons.append(step.choice.reason)
    fits = step.choice.fits
    if fits and step.blocking:
        fits = False  # the engine would run out of memory outside the KV pool: say so before starting
        reasons.extend(step.blocking)
        reasons.append("lower mem-fraction-static (or leave it unset and ctxfit picks one that leaves room)")
    elif fits:
        reasons.extend(step.rest)
    if fits:
        reasons.extend(_warnings(inputs, step, engine))
    elif suggest:
        too_heavy = weights_problem(inputs, step.terms)
        reasons.extend([too_heavy] if too_heavy else [])
        reasons.extend(_suggestions(inputs, engine, step.effective, goal, step.terms))
        reasons.extend(suggestions(inputs, step.terms, node_gpus) if too_heavy else [])
    return Plan(
        fits=fits,
        context_length=step.choice.context_length if fits else 0,
        max_context_length=step.fit.max_context_length,
        kv_bytes_per_token=step.fit.layout.kv_bytes_per_token,
        per_gpu=step.terms,
        kv_pool_bytes=step.fit.pool_bytes,
        concurrency=step.concurrency,
        effective=step.effective,
        engine_command=tuple(engine.command),
        engine_args=engine.engine_args(spec, step.effective) if fits else [],
        reasons=reasons,
        model_max_context=model_max,
        target_fits=fits and step.choice.context_length >= (min(target, model_max) if model_max else target),
        calibration_key=calibration_key.text(),
        calibration_bytes=correction.offset_bytes if correction is not None else 0,
        choice=step.choice,
    )


def apply_engine_flags(engine: Engine, inputs: PlanInputs) -> tuple[PlanInputs, list[str]]:
    """``inputs`` as the flags of ``spec.engine.args`` change them (``engines.flags``), with a note per flag.

    Weights kept in host memory (``--cpu-offload-gb``) leave the GPU; sliding-window layers the engine keeps at full
    length are budgeted as full attention. Flags in no parser ctxfit read are named in a note.

    Raises:
        PlanInputError: ``spec.engine.args`` sets a flag that is managed, refused, or conditional and not allowed
            (the message names the flag and the spec field to use), or the spec asks for a flag the engine version
            does not have (the field is the one that asks).
    """
    refused = engine.flag_refusals(inputs.spec) + engine.feature_problems(inputs)
    if refused:
        field = refused[0][0]
        raise PlanInputError(field, "; ".join(m for f, m in refused if f == field))
    effects = engine.flag_effects(inputs)
    notes = list(effects.notes)
    if effects.offload_weights_bytes:
        on_gpu = max(0, inputs.weights_per_gpu_bytes - effects.offload_weights_bytes)
        inputs = dataclasses.replace(
            inputs, weights_per_gpu_bytes=on_gpu, loaded_weights_per_gpu_bytes=inputs.weights_per_gpu_bytes,
            weights_source=f"{inputs.weights_source} - {effects.offload_weights_bytes / GiB:.2f} GiB --cpu-offload-gb")
    if effects.sliding_as_full:
        inputs = dataclasses.replace(inputs, architecture=sliding_as_full(inputs.architecture))
    strange = engine.unknown_flags(inputs.spec)
    if strange:
        notes.append(f"engine.args: {', '.join(strange)} is in no {inputs.spec.engine.kind.value} version ctxfit read; "
                     "its memory effect is not planned")
    return inputs, notes


def _refused(inputs: PlanInputs, engine: Engine, effective: EffectiveConfig, reasons: list[str],
             node_gpus: int | None = None) -> Plan:
    """The plan of a spec the engines could not start (``budget.verdict``): full budget, no context."""
    terms = engine.budget(inputs, effective)
    fit = _fit(inputs, engine, terms, effective.kv_cache_dtype)
    return Plan(
        fits=False,
        context_length=0,
        max_context_length=fit.max_context_length,
        kv_bytes_per_token=fit.layout.kv_bytes_per_token,
        per_gpu=terms,
        kv_pool_bytes=max(0, fit.pool_bytes),
        concurrency=0.0,
        effective=effective,
        engine_command=tuple(engine.command),
        engine_args=[],
        reasons=[*reasons, *suggestions(inputs, terms, node_gpus)],
        model_max_context=inputs.model_max_context,
    )


@dataclass(frozen=True)
class _Goal:
    target: int
    minimum: int
    headroom: float
    model_max: int | None


@dataclass(frozen=True)
class _Step:
    choice: ContextChoice
    fit: Fit
    effective: EffectiveConfig
    terms: BudgetTerms
    rest: list[str]
    blocking: list[str]
    concurrency: float


def _plan_step(inputs: PlanInputs, engine: Engine, effective: EffectiveConfig, goal: _Goal) -> _Step:
    """Budget, fit and context choice for one effective configuration."""
    terms = engine.budget(inputs, effective)
    fit = _fit(inputs, engine, terms, effective.kv_cache_dtype)
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
    return _Step(choice, fit, chosen, terms, rest, blocking, concurrency)


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


def _lower_fraction_until_slack_holds(
    inputs: PlanInputs, engine: Engine, step: _Step, goal: _Goal, reasons: list[str]
) -> _Step:
    """SGLang with the default fraction: trade KV pool for slack until activations, graphs and req_to_token fit."""
    assert step.effective.mem_fraction_static is not None
    start = step.effective.mem_fraction_static
    fraction = start
    while step.blocking and fraction - FRACTION_STEP >= FRACTION_FLOOR:
        fraction = round(fraction - FRACTION_STEP, 3)
        step = _plan_step(inputs, engine, step.effective.model_copy(update={"mem_fraction_static": fraction}), goal)
    if fraction != start:
        reasons.append(
            f"lowered mem-fraction-static from {start} to {fraction} so the 1 - fraction slack holds CUDA graphs, "
            "buffers and req_to_token"
        )
    return step


NEAR_MAX_FRACTION = 0.9
"""A chosen context above this share of the predicted maximum is within the calibration spread."""


def _memory_max_context(fit: Fit) -> int:
    """Largest context the KV pool holds, ignoring the model's position limit (``Fit.max_context_length`` is
    capped at it): the near-maximum warning is about memory, so it uses this bound."""
    return fit.layout.max_context_for(
        fit.pool_bytes, block_size=fit.block_size, in_flight_tokens=fit.in_flight_tokens, limit=1 << 27
    )


def _warnings(inputs: PlanInputs, step: _Step, engine: Engine) -> list[str]:
    """Warnings on a plan that fits: near the predicted maximum, user args overriding managed flags."""
    out: list[str] = []
    memory_max = _memory_max_context(step.fit)
    if step.choice.context_length > NEAR_MAX_FRACTION * memory_max:
        out.append(
            f"context {step.choice.context_length} is within {1 - NEAR_MAX_FRACTION:.0%} of the predicted maximum "
            f"{memory_max}: the engine may find less (calibration spread, bench/overhead_fit.py); "
            "ctxfit steps down if it does"
        )
    managed = set(
        engine.engine_args(
            inputs.spec.model_copy(update={"engine": inputs.spec.engine.model_copy(update={"args": []})}),
            step.effective,
        )
    )
    overridden = sorted({a for a in inputs.spec.engine.args if a.startswith("--") and a.split("=")[0] in managed})
    if overridden:
        out.append(
            f"engine.args sets {', '.join(overridden)}, which ctxfit manages; the engine takes the last value, so "
            "the plan may not describe what runs"
        )
    return out


def _verdict(tokens: int, goal: _Goal) -> str:
    """'fits' when ``tokens`` covers the target, else the ladder size it would allow, else 'is not enough'."""
    capped = min(goal.target, goal.model_max) if goal.model_max else goal.target
    if tokens >= capped:
        return "fits"
    stepped = step_down_context(tokens, goal.headroom, model_max=goal.model_max)
    if stepped is not None and stepped >= goal.minimum:
        return f"not the target, but {stepped} would fit"
    return "is not enough"


def _suggestions(
    inputs: PlanInputs, engine: Engine, effective: EffectiveConfig, goal: _Goal, terms: BudgetTerms
) -> list[str]:
    """What would make the target fit: FP8 KV, a higher utilization/fraction, twice the GPUs, smaller weights."""
    out: list[str] = []
    target = goal.target
    per_token = kv_layout(
        inputs.architecture,
        tensor_parallel=inputs.tp,
        pipeline_parallel=inputs.pp,
        kv_cache_dtype=engine.sizing_dtype(inputs, effective.kv_cache_dtype),
    ).kv_bytes_per_token
    out.append(
        f"{target} tokens need {target * per_token / GiB:.2f} GiB of KV per GPU ({per_token:,} B/token); the "
        f"predicted pool is {max(terms.kv_cache_bytes, 0) / GiB:.2f} GiB (weights {terms.weights_bytes / GiB:.2f} "
        f"GiB of {terms.total_bytes / GiB:.2f} GiB)"
    )
    if effective.kv_cache_dtype in ("auto", "bfloat16", "float16"):
        fp8 = engine.resolve_kv_dtype(inputs, "fp8")
        if fp8.kv_cache_dtype == "auto":
            out.append(f"FP8 KV cache is not an option here: {fp8.reason}")
        else:
            tokens = _fit(inputs, engine, terms, fp8.kv_cache_dtype).max_context_length
            out.append(f"FP8 KV cache ({fp8.kv_cache_dtype}) would hold {tokens} tokens: {_verdict(tokens, goal)}")
    if effective.gpu_memory_utilization is not None and effective.gpu_memory_utilization < UTILIZATION_CEILING:
        raised = effective.model_copy(update={"gpu_memory_utilization": UTILIZATION_CEILING})
        tokens = _fit(inputs, engine, engine.budget(inputs, raised), effective.kv_cache_dtype).max_context_length
        if tokens > 0:  # a raise that still holds nothing is no suggestion
            out.append(f"gpu-memory-utilization {UTILIZATION_CEILING} would hold {tokens} tokens: "
                       f"{_verdict(tokens, goal)}")
    if effective.mem_fraction_static is not None and effective.mem_fraction_static < FRACTION_CEILING:
        raised = effective.model_copy(update={"mem_fraction_static": FRACTION_CEILING})
        tokens = _fit(inputs, engine, engine.budget(inputs, raised), effective.kv_cache_dtype).max_context_length
        if tokens > 0:
            out.append(f"mem-fraction-static {FRACTION_CEILING} would hold {tokens} tokens: {_verdict(tokens, goal)}")
    spec = inputs.spec
    doubled_spec = spec.model_copy(
        update={
            "gpu": spec.gpu.model_copy(update={"count": spec.gpu.count * 2}),
            "parallelism": spec.parallelism.model_copy(update={"tensor": spec.parallelism.tensor * 2}),
        }
    )
    doubled = dataclasses.replace(inputs, spec=doubled_spec, weights_per_gpu_bytes=inputs.weights_per_gpu_bytes // 2)
    tokens = _fit(doubled, engine, engine.budget(doubled, effective), effective.kv_cache_dtype).max_context_length
    out.append(f"twice the GPUs (TP {inputs.tp * 2}) would hold {tokens} tokens: {_verdict(tokens, goal)}")
    halved = dataclasses.replace(inputs, weights_per_gpu_bytes=inputs.weights_per_gpu_bytes // 2)
    tokens = _fit(halved, engine, engine.budget(halved, effective), effective.kv_cache_dtype).max_context_length
    out.append(
        f"a weight format half the size ({inputs.weights_per_gpu_bytes / 2 / GiB:.1f} GiB per GPU, e.g. FP8 or "
        f"NVFP4 instead of BF16 or FP8) would hold {tokens} tokens: {_verdict(tokens, goal)}"
    )
    return out


def initial_effective(spec: InferenceServerSpec, **node: Any) -> EffectiveConfig:
    """The effective configuration the planner would start with (for ``ctxfit diagnose``/the operator).

    Raises:
        PlanInputError: as ``plan``.
    """
    return plan(spec, suggest=False, **node).effective


def replan_context(spec: InferenceServerSpec, pin: dict[str, Any]) -> tuple[int, str]:
    """Context that fits with ``pin`` held (e.g. ``{"kv_cache_dtype": "auto", "context_length": 262144}``).

    Returns:
        (context length, or 0 when nothing fits; one-line explanation).

    Raises:
        PlanInputError: as ``plan``.
    """
    result = plan(spec, pin=pin, suggest=False)
    return result.context_length, result.reasons[-1] if result.reasons else ""
