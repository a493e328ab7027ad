"""Bounds on what the recovery reads and proposes: plausible numbers, the context ceiling, size caps.

Sources:
- ``MAX_CONTEXT_TOKENS`` 2^27: the ``spec.context.target`` / ``architecture.maxPositionEmbeddings``
  upper bound (``ctxfit.api.spec``). A message that names more tokens than that is garbled.
- ``MIN_HOST_BYTES`` 1 MiB / ``MAX_HOST_BYTES`` 64 TiB: the ``spec.resources.memory`` / ``shm`` bounds.
- ``MAX_MESSAGE_BYTES`` 1 PiB: no GPU or host reports more; a larger size in a message is garbled.
- ``MAX_FRACTION`` 100: fractions are (0, 1]; SGLang's "minimum viable" fraction may exceed 1 when the
  weights cannot fit at all, never by orders of magnitude.

The context ceiling is ``min(model maximum, spec.context.target)``: the model's
``maxPositionEmbeddings`` (``spec.model.architecture``, else ``ctxfit.catalog.lookup_model``) and the
user's intent. The policy never proposes a context above it.
"""

from __future__ import annotations

import math

from ctxfit.api import InferenceServerSpec, MiB, TiB
from ctxfit.catalog import lookup_model

MAX_CONTEXT_TOKENS = 1 << 27
MIN_HOST_BYTES = 1 * MiB
MAX_HOST_BYTES = 64 * TiB
MAX_MESSAGE_BYTES = 1 << 50
MAX_FRACTION = 100.0
MAX_COUNT = 1 << 24
"""Largest plausible count (dummy requests, GPU index) read from a message."""

TOKEN_NUMBERS = frozenset({
    "requestedContextLength", "estimatedMaxContextLength", "derivedMaxContextLength", "modelMaxLength",
})
FRACTION_NUMBERS = frozenset({"gpuMemoryUtilization", "memFractionStatic", "minimumMemFractionStatic"})


def plausible_number(name: str, value: object) -> bool:
    """Whether a number read from a failure message is finite, non-negative and within physical bounds.

    Garbled or absurd values ("KV cache (NaN)", a 20-digit token count) are treated as missing.
    """
    if isinstance(value, bool) or not isinstance(value, int | float):
        return False
    if isinstance(value, float) and not math.isfinite(value):
        return False
    if name == "exitCode":
        return True
    if value < 0:
        return False
    if name in TOKEN_NUMBERS:
        return value <= MAX_CONTEXT_TOKENS
    if name in FRACTION_NUMBERS:
        return value <= MAX_FRACTION
    if name.endswith("Bytes"):
        return value <= MAX_MESSAGE_BYTES
    return value <= MAX_COUNT


def model_max_context(spec: InferenceServerSpec) -> int | None:
    """The model's ``maxPositionEmbeddings``: ``spec.model.architecture``, else the catalog, else None."""
    arch = spec.model.architecture
    if arch is not None and arch.max_position_embeddings is not None:
        return arch.max_position_embeddings
    entry = lookup_model(spec.model.name)
    return entry.architecture.max_position_embeddings if entry is not None else None


def context_ceiling(spec: InferenceServerSpec) -> tuple[int, str] | None:
    """``(tokens, what it is)``: the lower of the model's maximum and ``spec.context.target``, or None."""
    bounds: list[tuple[int, str]] = []
    model_max = model_max_context(spec)
    if model_max is not None:
        bounds.append((model_max, f"the model's maximum {model_max}"))
    if spec.context.target is not None:
        bounds.append((spec.context.target, f"context.target {spec.context.target}"))
    return min(bounds, key=lambda b: b[0]) if bounds else None
