"""What the planner adds to its reasons: warnings on a plan that fits, and what would make a target fit that does not
(pure; ``budget.planner``)."""

from __future__ import annotations

import dataclasses

from ctxfit.api import EffectiveConfig, GiB
from ctxfit.engines import BudgetTerms, Engine
from ctxfit.vocab.inputs import PlanInputs

from .context import step_down_context
from .fitting import Goal, Step, fit_pool
from .kv import kv_layout
from .result import Fit

UTILIZATION_CEILING = 0.95
"""Highest gpu-memory-utilization ctxfit suggests (recovery raises in steps up to here)."""
FRACTION_CEILING = 0.95
"""Highest mem-fraction-static ctxfit suggests."""


NEAR_MAX_FRACTION = 0.9
"""A chosen context above this share of the predicted maximum is within the calibration spread."""


def _memory_max_context(fit: Fit) -> int:
    """Largest context the KV pool holds, ignoring the model's position limit (``Fit.max_context_length`` is
    capped at it): the near-maximum warning is about memory, so it uses this bound."""
    return fit.layout.max_context_for(
        fit.pool_bytes, block_size=fit.block_size, in_flight_tokens=fit.in_flight_tokens, limit=1 << 27
    )


def plan_warnings(inputs: PlanInputs, step: Step, engine: Engine) -> list[str]:
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


def _verdict(tokens: int, goal: Goal) -> str:
    """'fits' when ``tokens`` covers the target, else the ladder size it would allow, else 'is not enough'."""
    capped = min(goal.target, goal.model_max) if goal.model_max else goal.target
    if tokens >= capped:
        return "fits"
    stepped = step_down_context(tokens, goal.headroom, model_max=goal.model_max)
    if stepped is not None and stepped >= goal.minimum:
        return f"not the target, but {stepped} would fit"
    return "is not enough"


def target_suggestions(
    inputs: PlanInputs, engine: Engine, effective: EffectiveConfig, goal: Goal, terms: BudgetTerms
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
            tokens = fit_pool(inputs, engine, terms, fp8.kv_cache_dtype).max_context_length
            out.append(f"FP8 KV cache ({fp8.kv_cache_dtype}) would hold {tokens} tokens: {_verdict(tokens, goal)}")
    if effective.gpu_memory_utilization is not None and effective.gpu_memory_utilization < UTILIZATION_CEILING:
        raised = effective.model_copy(update={"gpu_memory_utilization": UTILIZATION_CEILING})
        tokens = fit_pool(inputs, engine, engine.budget(inputs, raised), effective.kv_cache_dtype).max_context_length
        if tokens > 0:  # a raise that still holds nothing is no suggestion
            out.append(f"gpu-memory-utilization {UTILIZATION_CEILING} would hold {tokens} tokens: "
                       f"{_verdict(tokens, goal)}")
    if effective.mem_fraction_static is not None and effective.mem_fraction_static < FRACTION_CEILING:
        raised = effective.model_copy(update={"mem_fraction_static": FRACTION_CEILING})
        tokens = fit_pool(inputs, engine, engine.budget(inputs, raised), effective.kv_cache_dtype).max_context_length
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
    tokens = fit_pool(doubled, engine, engine.budget(doubled, effective), effective.kv_cache_dtype).max_context_length
    out.append(f"twice the GPUs (TP {inputs.tp * 2}) would hold {tokens} tokens: {_verdict(tokens, goal)}")
    halved = dataclasses.replace(inputs, weights_per_gpu_bytes=inputs.weights_per_gpu_bytes // 2)
    tokens = fit_pool(halved, engine, engine.budget(halved, effective), effective.kv_cache_dtype).max_context_length
    out.append(
        f"a weight format half the size ({inputs.weights_per_gpu_bytes / 2 / GiB:.1f} GiB per GPU, e.g. FP8 or "
        f"NVFP4 instead of BF16 or FP8) would hold {tokens} tokens: {_verdict(tokens, goal)}"
    )
    return out
