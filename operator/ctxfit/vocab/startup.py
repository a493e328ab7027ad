"""Start-up accounting as data: the memory and capacity lines an engine prints while it starts.

Engine packages declare tuples of ``StartupPattern`` (``ctxfit.engines.vllm.startup``,
``ctxfit.engines.sglang.startup``); ``scan`` runs them over a log and folds every match into one
``StartupReport``. Unknown wording leaves a field ``None`` ("not observed"); nothing here raises on
log text.

Linear time by construction (as ``ctxfit.vocab.patterns``): each pattern has a literal ``marker``
found with ``in``; its regex runs only on lines holding the marker, and lines are cut at
``MAX_LINE_CHARS``; regexes use bounded repetition only.

Units: "GiB" and "GB" are both 2^30 bytes here (vLLM and SGLang divide by ``1 << 30`` and print
"GB" in some versions: vLLM ``worker/model_runner.py`` ``load_model`` "%.4f GB" up to 0.7; SGLang
``srt/utils.py`` ``get_available_gpu_memory`` returns ``free / (1 << 30)`` and logs "GB").
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass, field, fields, replace
from decimal import Decimal
from typing import Literal

from .patterns import UNIT_BYTES, parse_decimal

MAX_LINE_CHARS = 4096
"""Longer lines are cut (a ``server_args=`` dump can be long; the numbers sit near the start)."""
MAX_SOURCE_LINES = 12
"""At most this many matched lines are kept as evidence (the first match of each field)."""
MAX_BYTES = 1 << 50
"""Largest plausible byte count (1 PiB: no GPU holds more); a larger one is a garbled line, not observed."""
MAX_COUNT = 1 << 40
"""Largest plausible token / block / request count or seconds (~1.1e12, far above any KV pool and inside the
int64 range of the ``status.observed`` integer fields); a larger one is a garbled line, not observed."""

FieldName = Literal[
    "weights_bytes",
    "activation_bytes",
    "non_torch_bytes",
    "cuda_graph_bytes",
    "kv_cache_bytes",
    "kv_cache_tokens",
    "num_gpu_blocks",
    "block_size",
    "max_concurrency",
    "concurrency_context_length",
    "served_context_length",
    "max_running_requests",
    "load_seconds",
    "peak_torch_bytes",
    "cuda_total_bytes",
    "consumed_bytes",
]
ValueKind = Literal["bytes", "int", "float"]
Combine = Literal["min", "max", "first"]


@dataclass(frozen=True)
class StartupPattern:
    """One printed quantity in one wording.

    Attributes:
        field: the ``StartupReport`` field it fills.
        marker: literal text that must be on the line (cheap pre-filter).
        regex: applied to the line; group 1 is the number, group 2 (``value="bytes"``) the unit
            (a missing unit group means GiB).
        value: ``bytes`` (number x unit), ``int`` or ``float``.
        combine: several ranks print the same line: ``min`` (the binding rank for a pool),
            ``max`` (the largest cost), ``first``.
        versions: engine versions whose source prints this wording (e.g. "vLLM V1 0.8-0.28").
        source: engine file and function that prints it.
    """

    field: FieldName
    marker: str
    regex: str
    value: ValueKind
    combine: Combine
    versions: str
    source: str

    def compiled(self) -> re.Pattern[str]:
        """The compiled regex (``re`` caches compilations)."""
        return re.compile(self.regex, re.ASCII)


@dataclass(frozen=True)
class StartupReport:
    """What one engine start-up printed about its memory budget, per GPU (rank). ``None``: not observed.

    Attributes:
        weights_bytes: model weights on one GPU.
        activation_bytes: profiled activation peak (vLLM "torch peak memory increase").
        non_torch_bytes: non-torch memory (NCCL, custom all-reduce buffers) counted by vLLM.
        cuda_graph_bytes: CUDA-graph memory actually captured.
        kv_cache_bytes: KV pool bytes (the smallest rank's).
        kv_cache_tokens: tokens the KV pool holds (the smallest rank's).
        num_gpu_blocks: KV blocks (vLLM V0 / early V1 print blocks, not tokens).
        block_size: tokens per block when printed.
        max_concurrency: requests of ``concurrency_context_length`` tokens the pool holds at once.
        concurrency_context_length: the ``L`` of "Maximum concurrency for L tokens per request".
        served_context_length: the context the engine serves (vLLM max_model_len, SGLang context_len).
        max_running_requests: SGLang's running-request cap.
        load_seconds: seconds spent loading weights.
        peak_torch_bytes: vLLM 0.6.4 "peak_torch_memory" (weights + activation).
        cuda_total_bytes: the CUDA-visible total of one GPU (cudaMemGetInfo), when printed: with the node's
            NVML total it gives the driver's reserve on that product (``budget.calibrate``).
        consumed_bytes: vLLM 0.27+ "total consumed (from mem_get_info)": the free-memory drop from before the model
            was built to after profiling (weights + non-torch + other persistent allocations).
        draft_kv_cache_bytes: a speculative draft's own KV pool (SGLang's second pool line), the smallest rank's.
        draft_kv_cache_tokens: tokens that pool holds.
        derived: names of fields computed from others (e.g. tokens = blocks x block size).
        source_lines: the log lines the values were read from (first match per field).
    """

    weights_bytes: int | None = None
    activation_bytes: int | None = None
    non_torch_bytes: int | None = None
    cuda_graph_bytes: int | None = None
    kv_cache_bytes: int | None = None
    kv_cache_tokens: int | None = None
    num_gpu_blocks: int | None = None
    block_size: int | None = None
    max_concurrency: float | None = None
    concurrency_context_length: int | None = None
    served_context_length: int | None = None
    max_running_requests: int | None = None
    load_seconds: float | None = None
    peak_torch_bytes: int | None = None
    cuda_total_bytes: int | None = None
    consumed_bytes: int | None = None
    draft_kv_cache_bytes: int | None = None
    draft_kv_cache_tokens: int | None = None
    derived: tuple[str, ...] = ()
    source_lines: tuple[str, ...] = field(default_factory=tuple)

    @property
    def observed(self) -> bool:
        """True when the log said anything about the KV pool (bytes, tokens or blocks)."""
        return any(v is not None for v in (self.kv_cache_bytes, self.kv_cache_tokens, self.num_gpu_blocks))

    def with_values(self, derived: Iterable[str] = (), **values: int | float | None) -> StartupReport:
        """A copy with ``values`` set and ``derived`` names added."""
        return replace(self, derived=tuple(dict.fromkeys([*self.derived, *derived])), **values)  # type: ignore[arg-type]


_VALUE_FIELDS = tuple(f.name for f in fields(StartupReport) if f.name not in ("derived", "source_lines"))


def _to_value(match: re.Match[str], kind: ValueKind) -> int | float | None:
    number = parse_decimal(match.group(1))
    if number is None:
        return None
    if not number.is_finite() or number < 0:
        return None
    if kind == "int":
        return int(number) if number <= MAX_COUNT else None
    if kind == "float":
        return float(number) if number <= MAX_COUNT else None
    unit = match.group(2) if match.re.groups >= 2 and match.group(2) else "GiB"
    scale = UNIT_BYTES.get(unit)
    if scale is None or number > MAX_BYTES:
        return None
    size = int((number * Decimal(scale)).to_integral_value())
    return size if size <= MAX_BYTES else None


def _fold(old: int | float | None, new: int | float, combine: Combine) -> int | float:
    if old is None:
        return new
    if combine == "min":
        return min(old, new)
    if combine == "max":
        return max(old, new)
    return old


def scan(text: str, patterns: Iterable[StartupPattern]) -> StartupReport:
    """Fold every pattern match in ``text`` into one report (never raises on any text).

    Lines are split on ``\\n``/``\\r``; each line is cut at ``MAX_LINE_CHARS``.
    """
    listed = tuple(patterns)
    values: dict[str, int | float] = {}
    sources: list[str] = []
    for raw in text.splitlines():
        line = raw[:MAX_LINE_CHARS]
        for pattern in listed:
            if pattern.marker not in line:
                continue
            for match in pattern.compiled().finditer(line):
                value = _to_value(match, pattern.value)
                if value is None:
                    continue
                first = pattern.field not in values
                values[pattern.field] = _fold(values.get(pattern.field), value, pattern.combine)
                stripped = line.strip()
                if first and stripped not in sources and len(sources) < MAX_SOURCE_LINES:
                    sources.append(stripped)
    known = {k: v for k, v in values.items() if k in _VALUE_FIELDS}
    return StartupReport(**known, source_lines=tuple(sources))  # type: ignore[arg-type]
