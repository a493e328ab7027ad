"""Reading an effective configuration someone wrote by hand (``--current``, ``--history`` entries).

Every field is checked against the same bounds as the spec field it stands for (``ctxfit.api.spec``),
so a typo or an absurd value is an error naming the field, never a silent default or a traceback:

| wire field | spec field | bounds |
|---|---|---|
| contextLength | context.target | whole number, 16 .. 2^27 |
| gpuMemoryUtilization | memory.gpuMemoryUtilization | number, (0, 1]; vLLM only |
| memFractionStatic | memory.memFractionStatic | number, (0, 1); SGLang only |
| kvCacheDtype | memory.kvCacheDtype | one of ``KV_CACHE_DTYPES`` |
| maxNumSeqs | batching.maxNumSeqs | whole number, 1 .. 65536 |
| cudaGraphMaxBatchSize | batching.cudaGraphMaxBatchSize | whole number, 1 .. 4096 |
| memoryLimit, shmSize | resources.memory, resources.shm | quantity, 1Mi .. 64Ti |
| startupTimeoutSeconds | startup.timeoutSeconds | whole number, 30 .. 604800 |
"""

from __future__ import annotations

import difflib
import math
from collections.abc import Callable, Mapping
from typing import Any

from ctxfit.api import KV_CACHE_DTYPES, EffectiveConfig, EngineKind, bytes_to_quantity, quantity_to_bytes
from ctxfit.engines import get_engine

from .limits import MAX_CONTEXT_TOKENS, MAX_HOST_BYTES, MIN_HOST_BYTES

MAX_TEXT_IN_MESSAGE = 40
"""Characters of a bad value repeated in an error message."""


class FieldError(ValueError):
    """A bad field: the message is ``<field>: <problem>`` on one line."""

    def __init__(self, field: str, problem: str) -> None:
        super().__init__(f"{field}: {problem}")
        self.field = field
        self.problem = problem


def shown_value(value: object) -> str:
    """``repr(value)`` cut to ``MAX_TEXT_IN_MESSAGE`` characters (for error messages)."""
    text = repr(value)
    return text if len(text) <= MAX_TEXT_IN_MESSAGE else text[: MAX_TEXT_IN_MESSAGE - 3] + "..."


def _whole(low: int, high: int) -> Callable[[object], int]:
    def parse(value: object) -> int:
        number: int | None = None
        if isinstance(value, int) and not isinstance(value, bool):
            number = value
        elif isinstance(value, float) and math.isfinite(value) and value.is_integer():
            number = int(value)
        elif isinstance(value, str):
            try:
                number = int(value.strip())
            except ValueError:
                number = None
        if number is None:
            raise ValueError(f"must be a whole number, got {shown_value(value)}")
        if not low <= number <= high:
            raise ValueError(f"must be between {low} and {high}, got {number}")
        return number

    return parse


def _fraction(*, upper_inclusive: bool) -> Callable[[object], float]:
    bound = "(0, 1]" if upper_inclusive else "(0, 1)"

    def parse(value: object) -> float:
        number: float | None = None
        if isinstance(value, int | float) and not isinstance(value, bool):
            number = float(value)
        elif isinstance(value, str):
            try:
                number = float(value.strip())
            except ValueError:
                number = None
        if number is None or not math.isfinite(number):
            raise ValueError(f"must be a number, got {shown_value(value)}")
        if not (0.0 < number < 1.0 or (upper_inclusive and number == 1.0)):
            raise ValueError(f"must be in {bound}, got {number:g}")
        return number

    return parse


def _size(value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, int | float | str):
        raise ValueError(f"must be a quantity such as 80Gi, got {shown_value(value)}")
    try:
        n_bytes = quantity_to_bytes(value.strip() if isinstance(value, str) else value)
    except (ValueError, ArithmeticError):
        raise ValueError(f"must be a finite quantity such as 80Gi, got {shown_value(value)}") from None
    if not MIN_HOST_BYTES <= n_bytes <= MAX_HOST_BYTES:
        raise ValueError(f"must be between {bytes_to_quantity(MIN_HOST_BYTES)} and "
                         f"{bytes_to_quantity(MAX_HOST_BYTES)}, got {shown_value(value)}")
    return n_bytes


def _dtype(value: object) -> str:
    if not isinstance(value, str) or value not in KV_CACHE_DTYPES:
        raise ValueError(f"must be one of {', '.join(KV_CACHE_DTYPES)}, got {shown_value(value)}")
    return value


FIELDS: Mapping[str, tuple[str, Callable[[object], Any]]] = {
    "contextLength": ("context_length", _whole(16, MAX_CONTEXT_TOKENS)),
    "gpuMemoryUtilization": ("gpu_memory_utilization", _fraction(upper_inclusive=True)),
    "memFractionStatic": ("mem_fraction_static", _fraction(upper_inclusive=False)),
    "kvCacheDtype": ("kv_cache_dtype", _dtype),
    "maxNumSeqs": ("max_num_seqs", _whole(1, 65536)),
    "cudaGraphMaxBatchSize": ("cuda_graph_max_batch_size", _whole(1, 4096)),
    "memoryLimit": ("memory_limit_bytes", _size),
    "shmSize": ("shm_bytes", _size),
    "startupTimeoutSeconds": ("startup_timeout_seconds", _whole(30, 7 * 24 * 3600)),
    "maxLoras": ("max_loras", _whole(1, 256)),
    "maxLoraRank": ("max_lora_rank", _whole(1, 1024)),
    "maxCpuLoras": ("max_cpu_loras", _whole(1, 1024)),
    "numSpeculativeTokens": ("num_speculative_tokens", _whole(1, 16)),
}
"""Wire name -> (``EffectiveConfig`` field, parser raising ValueError with the problem)."""

NULLABLE = ("gpuMemoryUtilization", "memFractionStatic", "maxLoras", "maxLoraRank", "maxCpuLoras",
            "numSpeculativeTokens")


def unknown_field(key: object, allowed: tuple[str, ...]) -> FieldError:
    """The error for a key that is not a field, with the closest known name when there is one."""
    name = str(key)
    close = difflib.get_close_matches(name, allowed, n=1)
    hint = f"did you mean {close[0]}?" if close else f"expected one of {', '.join(allowed)}"
    return FieldError(name[:MAX_TEXT_IN_MESSAGE], f"unknown field; {hint}")


def effective_from_wire(data: Mapping[Any, Any], *, defaults: EffectiveConfig | None = None,
                        engine: EngineKind | None = None, extra: tuple[str, ...] = ()) -> EffectiveConfig:
    """An ``EffectiveConfig`` from wire fields; missing fields come from ``defaults``.

    Args:
        data: wire fields (``EffectiveConfig.to_wire`` names). Keys in ``extra`` are skipped.
        defaults: the configuration the fields override (trusted, not re-checked).
        engine: the server's engine: its memory fraction must be set, the other engine's must be null.
        extra: other keys the caller reads itself (e.g. ``failure``).

    Raises:
        FieldError: an unknown key, a missing field without ``defaults``, or a value out of bounds.
    """
    values: dict[str, Any] = defaults.model_dump() if defaults is not None else {}
    for key, value in data.items():
        if key in extra:
            continue
        if key not in FIELDS:
            raise unknown_field(key, tuple(FIELDS) + extra)
        attribute, parse = FIELDS[key]
        if value is None and key in NULLABLE:
            values[attribute] = None
            continue
        try:
            values[attribute] = parse(value)
        except ValueError as exc:
            raise FieldError(key, str(exc)) from None
    for key, (attribute, _) in FIELDS.items():
        if attribute not in values and key not in NULLABLE:
            raise FieldError(key, "required")
    if engine is not None:
        server = get_engine(engine)
        own = server.memory_knob
        if values.get(FIELDS[own][0]) is None:
            raise FieldError(own, f"required for {server.display_name}")
        for other in sorted({get_engine(k).memory_knob for k in EngineKind} - {own}):
            if values.get(FIELDS[other][0]) is not None:
                raise FieldError(other, f"is not {server.display_with_article} setting; {server.display_name} uses "
                                 f"{own}")
    return EffectiveConfig(**values)
