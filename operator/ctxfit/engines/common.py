"""Pieces every engine module uses: effective-config defaults from the spec."""

from __future__ import annotations

from typing import TYPE_CHECKING

from ctxfit.api import EffectiveConfig, quantity_to_bytes
from ctxfit.vocab.defaults import (
    default_memory_limit_bytes,
    default_shm_bytes,
    default_startup_timeout_seconds,
    host_offload_bytes,
)

if TYPE_CHECKING:
    from ctxfit.vocab.inputs import PlanInputs


def container_defaults(inputs: PlanInputs, offload_bytes: int | None = None) -> tuple[int, int, int]:
    """(memory_limit_bytes, shm_bytes, startup_timeout_seconds) from the spec or the defaults; ``offload_bytes``:
    the host memory the engine's flags ask for (the engine's ``flags.host_bytes``), else read by
    ``vocab.defaults.host_offload_bytes``."""
    spec = inputs.spec
    gpus = spec.gpu.count
    replica_weights = inputs.read_weights_per_gpu_bytes * spec.parallelism.tensor * spec.parallelism.pipeline
    if spec.resources.memory:
        memory = quantity_to_bytes(spec.resources.memory)
    else:
        offload = host_offload_bytes(spec.engine.args, gpus) if offload_bytes is None else offload_bytes
        memory = default_memory_limit_bytes(gpus, replica_weights, offload)
    shm = quantity_to_bytes(spec.resources.shm) if spec.resources.shm else default_shm_bytes(gpus)
    if spec.startup.timeout_seconds:
        startup = spec.startup.timeout_seconds
    else:
        startup = default_startup_timeout_seconds(
            inputs.read_weights_per_gpu_bytes * spec.parallelism.tensor * spec.parallelism.pipeline
        )
    return memory, shm, startup


def probe_effective(*, gpu_memory_utilization: float | None = None, mem_fraction_static: float | None = None,
                    **knobs: int) -> EffectiveConfig:
    """A placeholder configuration to render an engine's flags with (which flags, not their values)."""
    return EffectiveConfig(context_length=1, gpu_memory_utilization=gpu_memory_utilization,
                           mem_fraction_static=mem_fraction_static, max_num_seqs=1, cuda_graph_max_batch_size=1,
                           memory_limit_bytes=1, shm_bytes=1, startup_timeout_seconds=30, **knobs)


def format_fraction(value: float) -> str:
    """A fraction as the engines' flags want it: up to 3 decimals, no trailing zeros (0.95, 0.7, 0.913)."""
    text = f"{value:.3f}".rstrip("0").rstrip(".")
    if text == "1" and value < 1:  # a fraction just below 1 must not round to 1 (SGLang wants (0, 1))
        return "0.999"
    return text if text else "0"
