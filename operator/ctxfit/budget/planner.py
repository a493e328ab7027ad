"""The planner: spec (+ node GPU facts) -> per-GPU budget, predicted max context, chosen context, flags.

Pure: no I/O. ``plan`` raises ``PlanInputError`` for input it cannot work with; a plan that does not
fit is a normal result (``Plan.fits`` False with ``reasons``).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

from ctxfit.api import EffectiveConfig, GiB, InferenceServerSpec
from ctxfit.engines import BudgetTerms, Engine, get_engine

from .context import DEFAULT_HEADROOM, DEFAULT_MINIMUM_CONTEXT, choose_context
from .inputs import PlanInputError, PlanInputs, resolve_inputs
from .kv import KVLayout, kv_layout

UTILIZATION_CEILING = 0.95
"""Highest gpu-memory-utilization ctxfit suggests (recovery raises in steps up to here)."""
FRACTION_CEILING = 0.95
"""Highest mem-fraction-static ctxfit suggests."""


@dataclass(frozen=True)
class Fit:
    """KV capacity of one configuration: layout, pool, the largest context one request can have."""

    layout: KVLayout
    pool_bytes: int
    max_context_length: int
    block_size: int
    in_flight_tokens: int


@dataclass(frozen=True)
class Plan:
    """The planner's answer for one spec.

    Attributes:
        fits: a context >= the minimum fits.
        context_length: chosen tokens (0 when it does not fit).
        max_context_length: predicted largest context (capped at the model maximum).
        kv_bytes_per_token: KV bytes per token per GPU at the effective dtype.
        per_gpu: budget terms in bytes.
        kv_pool_bytes: bytes available to requests (KV pool minus reserved blocks).
        concurrency: how many requests of ``context_length`` tokens fit at once.
        effective: the configuration to run.
        engine_command: program (``vllm serve`` / ``python3 -m sglang.launch_server``).
        engine_args: flags, each flag and value a separate item.
        reasons: human sentences (choice, fallbacks, warnings, what would make it fit).
    """

    fits: bool
    context_length: int
    max_context_length: int
    kv_bytes_per_token: int
    per_gpu: BudgetTerms
    kv_pool_bytes: int
    concurrency: float
    effective: EffectiveConfig
    engine_command: tuple[str, ...]
    engine_args: list[str]
    reasons: list[str]
    model_max_context: int | None

    def to_json(self) -> dict[str, Any]:
        """The ``ctxfit plan -o json`` document (stable keys; see issue 2)."""
        t = self.per_gpu
        return {
            "fits": self.fits,
            "contextLength": self.context_length,
            "maxContextLength": self.max_context_length,
            "kvBytesPerToken": self.kv_bytes_per_token,
            "perGPU": {
                "totalBytes": t.total_bytes,
                "usableBytes": t.usable_bytes,
                "weightsBytes": t.weights_bytes,
                "activationBytes": t.activation_bytes,
                "cudaGraphBytes": t.cuda_graph_bytes,
                "otherBytes": t.other_bytes,
                "kvCacheBytes": t.kv_cache_bytes,
            },
            "kvPoolBytes": self.kv_pool_bytes,
            "concurrency": round(self.concurrency, 2),
            "engineCommand": list(self.engine_command),
            "engineArgs": list(self.engine_args),
            "effective": self.effective.to_wire(),
            "reasons": list(self.reasons),
        }


def _fit(inputs: PlanInputs, engine: Engine, terms: BudgetTerms, kv_cache_dtype: str) -> Fit:
    layout = kv_layout(
        inputs.architecture,
        tensor_parallel=inputs.tp,
        pipeline_parallel=inputs.pp,
        kv_cache_dtype=engine.sizing_dtype(inputs, kv_cache_dtype),
    )
    block = engine.block_size(inputs)
    pool = terms.kv_cache_bytes - engine.null_blocks(inputs) * block * layout.kv_bytes_per_token
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


def plan(
    spec: InferenceServerSpec,
    *,
    node_product: str | None = None,
    node_gpu_memory_mib: int | None = None,
    node_compute_capability: tuple[int, int] | None = None,
    hf_config: dict[str, Any] | None = None,
    pin: dict[str, Any] | None = None,
    default_headroom: float = DEFAULT_HEADROOM,
    suggest: bool = True,
) -> Plan:
    """Plan one replica of ``spec``.

    Args:
        spec: validated InferenceServer spec.
        node_product, node_gpu_memory_mib, node_compute_capability: what the node's GFD labels say.
        hf_config: a config.json dict, used when the spec has no architecture.
        pin: effective fields (snake_case) to hold fixed, e.g. ``{"kv_cache_dtype": "auto"}``;
            ``context_length`` replaces the target.
        default_headroom: headroom when ``spec.context.headroom`` is unset.
        suggest: compute "what would make it fit" when it does not fit.

    Raises:
        PlanInputError: unknown GPU/model without the needed fields, impossible weights.
    """
    inputs = resolve_inputs(
        spec,
        node_product=node_product,
        node_gpu_memory_mib=node_gpu_memory_mib,
        node_compute_capability=node_compute_capability,
        hf_config=hf_config,
    )
    engine = get_engine(spec.engine.kind)
    reasons: list[str] = []
    requested_dtype = str((pin or {}).get("kv_cache_dtype") or spec.memory.kv_cache_dtype)
    decision = engine.resolve_kv_dtype(inputs, requested_dtype)
    if decision.reason:
        reasons.append(decision.reason)
    effective = engine.default_effective(inputs, kv_cache_dtype=decision.kv_cache_dtype)
    effective = _apply_pin(effective, pin)
    effective = effective.model_copy(update={"kv_cache_dtype": decision.kv_cache_dtype})
    terms = engine.budget(inputs, effective)
    fit = _fit(inputs, engine, terms, effective.kv_cache_dtype)

    headroom = spec.context.headroom if spec.context.headroom is not None else default_headroom
    target = _target(inputs, pin)
    minimum = spec.context.minimum or min(DEFAULT_MINIMUM_CONTEXT, target)
    model_max = inputs.model_max_context
    if model_max and target > model_max:
        reasons.append(f"context.target {target} exceeds the model's maximum {model_max}; capped at {model_max}")
    capped_target = min(target, model_max) if model_max else target
    fit_tokens = fit.max_context_length
    if capped_target > fit_tokens and fit.pool_bytes >= fit.layout.request_bytes(
        capped_target, block_size=fit.block_size, in_flight_tokens=fit.in_flight_tokens
    ):
        fit_tokens = capped_target  # the block-rounded maximum sits just below an unrounded target that fits
    choice = choose_context(
        target=target, fit=fit_tokens, headroom=headroom, minimum=minimum, model_max=model_max
    )
    reasons.append(choice.reason)
    effective = effective.model_copy(update={"context_length": choice.context_length})
    pool_tokens = fit.pool_bytes // max(1, fit.layout.kv_bytes_per_token)
    effective = engine.finalize(inputs, effective, max(0, pool_tokens))
    terms = engine.budget(inputs, effective)
    fits = choice.fits
    if fits:
        reasons.extend(engine.check_rest(inputs, effective, terms))
    elif suggest:
        reasons.extend(_suggestions(inputs, engine, effective, target, terms))
    concurrency = 0.0
    if choice.context_length > 0 and fit.pool_bytes > 0:
        one = fit.layout.request_bytes(
            choice.context_length, block_size=fit.block_size, in_flight_tokens=fit.in_flight_tokens
        )
        concurrency = fit.pool_bytes / one
    return Plan(
        fits=fits,
        context_length=choice.context_length,
        max_context_length=fit.max_context_length,
        kv_bytes_per_token=fit.layout.kv_bytes_per_token,
        per_gpu=terms,
        kv_pool_bytes=fit.pool_bytes,
        concurrency=concurrency,
        effective=effective,
        engine_command=tuple(engine.command),
        engine_args=engine.engine_args(spec, effective) if fits else [],
        reasons=reasons,
        model_max_context=model_max,
    )


def _suggestions(
    inputs: PlanInputs, engine: Engine, effective: EffectiveConfig, target: int, terms: BudgetTerms
) -> list[str]:
    """What would make ``target`` fit: FP8 KV, a higher utilization/fraction, more GPUs, smaller weights."""
    out: list[str] = []
    per_token = kv_layout(
        inputs.architecture,
        tensor_parallel=inputs.tp,
        pipeline_parallel=inputs.pp,
        kv_cache_dtype=engine.sizing_dtype(inputs, effective.kv_cache_dtype),
    ).kv_bytes_per_token
    need = target * per_token
    out.append(
        f"{target} tokens need {need / GiB:.2f} GiB of KV per GPU ({per_token:,} B/token); the predicted pool is "
        f"{max(terms.kv_cache_bytes, 0) / GiB:.2f} GiB (weights {terms.weights_bytes / GiB:.2f} GiB of "
        f"{terms.total_bytes / GiB:.2f} GiB)"
    )
    if effective.kv_cache_dtype in ("auto", "bfloat16", "float16"):
        fp8 = engine.resolve_kv_dtype(inputs, "fp8")
        if fp8.kv_cache_dtype == "auto":
            out.append(f"FP8 KV cache is not an option here: {fp8.reason}")
        else:
            fit = _fit(inputs, engine, terms, fp8.kv_cache_dtype)
            verdict = "fits" if fit.max_context_length >= target else "is not enough"
            out.append(f"FP8 KV cache ({fp8.kv_cache_dtype}) would hold {fit.max_context_length} tokens: {verdict}")
    if effective.gpu_memory_utilization is not None and effective.gpu_memory_utilization < UTILIZATION_CEILING:
        raised = effective.model_copy(update={"gpu_memory_utilization": UTILIZATION_CEILING})
        fit = _fit(inputs, engine, engine.budget(inputs, raised), effective.kv_cache_dtype)
        verdict = "fits" if fit.max_context_length >= target else "is not enough"
        out.append(
            f"gpu-memory-utilization {UTILIZATION_CEILING} would hold {fit.max_context_length} tokens: {verdict}"
        )
    if effective.mem_fraction_static is not None and effective.mem_fraction_static < FRACTION_CEILING:
        raised = effective.model_copy(update={"mem_fraction_static": FRACTION_CEILING})
        fit = _fit(inputs, engine, engine.budget(inputs, raised), effective.kv_cache_dtype)
        verdict = "fits" if fit.max_context_length >= target else "is not enough"
        out.append(f"mem-fraction-static {FRACTION_CEILING} would hold {fit.max_context_length} tokens: {verdict}")
    doubled = dataclasses.replace(inputs, weights_per_gpu_bytes=inputs.weights_per_gpu_bytes // 2)
    fit = _fit(doubled, engine, engine.budget(doubled, effective), effective.kv_cache_dtype)
    verdict = "fits" if fit.max_context_length >= target else "is not enough"
    out.append(
        f"twice the GPUs (TP {inputs.tp * 2}) or a weight format half the size "
        f"({inputs.weights_per_gpu_bytes / 2 / GiB:.1f} GiB per GPU) would hold {fit.max_context_length} tokens: "
        f"{verdict}"
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
