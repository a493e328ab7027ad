"""The configuration in force when a start failed: the planner's choice, else spec values + engine defaults.

``initial_effective(spec)`` is what ``ctxfit diagnose`` and the operator use when status holds no
effective configuration yet: the planner's ``ctxfit.budget.planner.initial_effective`` when it can plan
the spec, else ``fallback_effective`` (spec values and engine defaults, no sizing).
``observed_effective`` then overrides what the failure message shows actually ran (the engine's own
numbers beat our assumptions).

Fallback defaults and their sources:
- context: ``spec.context.target``, else the model's ``maxPositionEmbeddings`` (spec or catalog).
- the memory fraction and CUDA-graph max batch: the engine's (``Engine.unplanned_defaults``): vLLM
  ``--gpu-memory-utilization`` by version (0.90 up to 0.19.x, 0.92 from 0.20.0; unknown version: 0.92, newest) and
  512 (``max_cudagraph_capture_size`` default); SGLang ``--mem-fraction-static`` 0.85 (a typical value of its
  heuristic on 80 GB GPUs, B.1) and 256 (H100-class ``cuda_graph_max_bs``, B.1).
- ``maxNumSeqs`` 256 (vLLM's tier for < 70 GiB GPUs, A.1).
- memory limit, /dev/shm and startup timeout: the planner's container defaults (``ctxfit.vocab.defaults``),
  so a server that cannot be planned gets the same container as one that can.
"""

from __future__ import annotations

from ctxfit.api import EffectiveConfig, InferenceServerSpec, quantity_to_bytes
from ctxfit.catalog import lookup_model
from ctxfit.engines import get_engine
from ctxfit.vocab.defaults import (
    STARTUP_UNKNOWN_WEIGHTS_SECONDS,
    default_memory_limit_bytes,
    default_shm_bytes,
    default_startup_timeout_seconds,
)
from ctxfit.vocab.kinds import Failure, FailureKind

from .limits import MAX_CONTEXT_TOKENS

MAX_NUM_SEQS = 256
MAX_NUM_SEQS_BOUND = 65536
"""``spec.batching.maxNumSeqs`` upper bound (``ctxfit.recovery.wire``)."""
SIXTEEN_BIT = ("auto", "bfloat16", "float16")


def fallback_effective(spec: InferenceServerSpec) -> EffectiveConfig:
    """The spec's own values plus engine defaults (no sizing).

    Raises:
        ValueError: ``spec.context.target`` unset and the model's maximum context unknown.
    """
    context = spec.context.target
    if context is None:
        arch = spec.model.architecture
        if arch is None:
            entry = lookup_model(spec.model.name)
            arch = entry.architecture if entry is not None else None
        context = arch.max_position_embeddings if arch is not None else None
    if context is None:
        raise ValueError("spec.context.target: required when the model's maximum context is unknown")
    utilization, fraction, graph_default = get_engine(spec.engine.kind).unplanned_defaults(spec)
    res = spec.resources
    gpus = spec.gpu.count
    if spec.startup.timeout_seconds:
        startup = spec.startup.timeout_seconds
    elif spec.model.weights_per_gpu:
        startup = default_startup_timeout_seconds(quantity_to_bytes(spec.model.weights_per_gpu) * gpus)
    else:
        startup = STARTUP_UNKNOWN_WEIGHTS_SECONDS
    return EffectiveConfig(
        context_length=context,
        gpu_memory_utilization=utilization,
        mem_fraction_static=fraction,
        kv_cache_dtype=spec.memory.kv_cache_dtype,
        max_num_seqs=spec.batching.max_num_seqs or MAX_NUM_SEQS,
        cuda_graph_max_batch_size=spec.batching.cuda_graph_max_batch_size or graph_default,
        memory_limit_bytes=quantity_to_bytes(res.memory) if res.memory else default_memory_limit_bytes(gpus),
        shm_bytes=quantity_to_bytes(res.shm) if res.shm else default_shm_bytes(gpus),
        startup_timeout_seconds=startup,
    )


def initial_effective(spec: InferenceServerSpec) -> EffectiveConfig:
    """The planner's initial configuration for ``spec``, or ``fallback_effective`` when it cannot plan.

    The planner is imported lazily (``ctxfit.budget.planner.initial_effective``); ImportError (no
    planner), ValueError (e.g. an unknown model without architecture), LookupError and ArithmeticError
    fall back.

    Raises:
        ValueError: as ``fallback_effective``.
    """
    try:
        from ctxfit.budget.planner import initial_effective as planner_initial_effective

        planned = planner_initial_effective(spec)
    except (ImportError, ValueError, LookupError, ArithmeticError):
        return fallback_effective(spec)
    if planned.context_length <= 0:  # the planner found nothing that fits; the spec's own target ran
        return planned.model_copy(update={"context_length": fallback_effective(spec).context_length})
    return planned


def observed_effective(current: EffectiveConfig, failure: Failure, spec: InferenceServerSpec) -> EffectiveConfig:
    """``current`` corrected by what the failure shows actually ran.

    - ``requestedContextLength`` (vLLM "max seq len (N)", "max_model_len (N)", SGLang "context_length (N)")
      is the context that ran (when within the spec's bounds, 16 .. 2^27; a garbled number is ignored).
    - ``gpuMemoryUtilization`` (vLLM free-memory check) and ``memFractionStatic`` (SGLang) are the
      fractions that ran.
    - ``maxNumSeqs`` (vLLM "max_num_seqs (N) exceeds available Mamba cache blocks") is the max-num-seqs
      that ran (when within the spec's bounds, 1 .. 65536).
    - KVCacheDtypeUnsupported while ``current`` says 16-bit: the spec's (non-16-bit) dtype ran.
    """
    update: dict[str, object] = {}
    numbers = failure.numbers
    requested = numbers.get("requestedContextLength")
    if isinstance(requested, int) and 16 <= requested <= MAX_CONTEXT_TOKENS:
        update["context_length"] = requested
    utilization = numbers.get("gpuMemoryUtilization")
    if current.gpu_memory_utilization is not None and isinstance(utilization, float) and 0 < utilization <= 1:
        update["gpu_memory_utilization"] = utilization
    seqs = numbers.get("maxNumSeqs")
    if isinstance(seqs, int) and 1 <= seqs <= MAX_NUM_SEQS_BOUND:
        update["max_num_seqs"] = seqs
    fraction = numbers.get("memFractionStatic")
    if current.mem_fraction_static is not None and isinstance(fraction, float) and 0 < fraction < 1:
        update["mem_fraction_static"] = fraction
    if (failure.kind is FailureKind.KV_CACHE_DTYPE_UNSUPPORTED and current.kv_cache_dtype in SIXTEEN_BIT
            and spec.memory.kv_cache_dtype not in SIXTEEN_BIT):
        update["kv_cache_dtype"] = spec.memory.kv_cache_dtype
    return current.model_copy(update=update) if update else current
