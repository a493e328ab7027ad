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
from typing import Any

from ctxfit.api import EffectiveConfig, GiB, InferenceServerSpec
from ctxfit.engines import Engine, get_engine
from ctxfit.engines.flags import sliding_as_full
from ctxfit.engines.weights import checkpoint_weights
from ctxfit.vocab.inputs import PlanInputError, PlanInputs, resolve_inputs
from ctxfit.vocab.modelsource import ModelSource

from .advice import FRACTION_CEILING, UTILIZATION_CEILING, plan_warnings, target_suggestions
from .calibrate import CalibrationTable
from .calibrated import apply_learned_reserve, calibrate_engine
from .capability import capability_problems
from .context import DEFAULT_HEADROOM, DEFAULT_MINIMUM_CONTEXT
from .fitting import Goal, draft_bytes_per_token, fit_pool, lower_fraction_until_slack_holds, plan_step
from .parallel import parallelism_problems
from .result import Fit, Plan
from .verdict import suggestions, weights_problem

__all__ = ["FRACTION_CEILING", "UTILIZATION_CEILING", "Fit", "Plan", "apply_engine_flags", "draft_bytes_per_token",
           "initial_effective", "plan", "replan_context"]


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
    goal = Goal(target=target, minimum=minimum, headroom=headroom, model_max=model_max)

    capability = capability_problems(inputs)
    refusal = parallelism_problems(inputs) + capability
    if refusal:
        return dataclasses.replace(_refused(inputs, engine, effective, [*refusal, *reasons], node_gpus),
                                   capability_refusals=tuple(capability))
    step = plan_step(inputs, engine, effective, goal)
    if inputs.hybrid is not None and step.effective.max_num_seqs < effective.max_num_seqs:
        # fewer sequences also shrink the sampler warm-up: budget once more with the capped value
        capped = plan_step(inputs, engine, effective.model_copy(
            update={"max_num_seqs": step.effective.max_num_seqs}), goal)
        step = dataclasses.replace(capped, rest=[*capped.rest, *[r for r in step.rest if r not in capped.rest]])
    fraction_pinned = spec.memory.mem_fraction_static is not None or bool(pin and pin.get("mem_fraction_static"))
    if step.blocking and step.effective.mem_fraction_static is not None and not fraction_pinned:
        step = lower_fraction_until_slack_holds(inputs, engine, step, goal, reasons)
    reasons.append(step.choice.reason)
    fits = step.choice.fits
    if fits and step.blocking:
        fits = False  # the engine would run out of memory outside the KV pool: say so before starting
        reasons.extend(step.blocking)
        reasons.append("lower mem-fraction-static (or leave it unset and ctxfit picks one that leaves room)")
    elif fits:
        reasons.extend(step.rest)
    if fits:
        reasons.extend(plan_warnings(inputs, step, engine))
    elif suggest:
        too_heavy = weights_problem(inputs, step.terms)
        reasons.extend([too_heavy] if too_heavy else [])
        reasons.extend(target_suggestions(inputs, engine, step.effective, goal, step.terms))
        reasons.extend(suggestions(inputs, step.terms, node_gpus) if too_heavy else [])
    if not fits:  # the cause first (status, the Event, the decision line and the CLI read the same list)
        cause = [step.choice.reason, *(step.blocking if step.blocking else [])]
        reasons = [*cause, *[r for r in reasons if r not in cause]]
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
    fit = fit_pool(inputs, engine, terms, effective.kv_cache_dtype)
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
