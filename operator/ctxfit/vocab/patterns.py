"""Pattern data the classifier runs: literal markers, number extractors, phase markers, precedence ranks.

Engine modules (``ctxfit.engines.vllm.failures``, ``ctxfit.engines.sglang.failures``) and
``ctxfit.recovery.generic`` declare tuples of these objects; ``ctxfit.recovery.classify`` runs them.

Linear time by construction:
- a marker is a *literal* fragment, found with ``str.find`` (no regex over the whole text);
- extractors are small regexes with a literal prefix and bounded repetition (``{0,24}``), run only on
  a window of at most ``WINDOW_BEFORE + WINDOW_AFTER`` characters around one marker occurrence;
- no nested quantifiers anywhere.

This module imports nothing from ctxfit besides the byte units, so engine modules can import it
without an import cycle.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from decimal import Decimal, InvalidOperation
from enum import StrEnum
from types import MappingProxyType
from typing import Literal

from .kinds import FailureKind

KIB = 1 << 10
MIB = 1 << 20
GIB = 1 << 30
TIB = 1 << 40

NUM = r"(\d[\d,]{0,24}(?:\.\d{1,8})?)"
"""A printed number: digits with optional thousands separators ("1,234,560") and decimals ("11.7")."""

SIZE = NUM + r" ?(bytes|B|KiB|MiB|GiB|TiB|KB|MB|GB|TB)\b"
"""A printed size with its unit (torch ``format_size``: "136.00 MiB", "512 bytes"; SGLang "12.25 GB")."""

UNIT_BYTES: Mapping[str, int] = MappingProxyType({
    "bytes": 1,
    "B": 1,
    "KiB": KIB,
    "KB": KIB,
    "MiB": MIB,
    "MB": MIB,
    "GiB": GIB,
    "GB": GIB,
    "TiB": TIB,
    "TB": TIB,
})
"""Unit -> bytes. "GB"/"MB" are binary: vLLM and SGLang divide by 2^30 and print "GB" (docs/field-reports.md,
docs/engine-memory.md B.2 "GB = 1024**3")."""

WINDOW_BEFORE = 1024
"""Characters before a marker (same line) searched for its numbers; vLLM's KV error puts
"max seq len (N)" ~70 characters before "KV cache is needed"."""
WINDOW_AFTER = 1024
"""Characters after a marker (same line) searched for its numbers."""

# Precedence: lower rank wins (the root cause beats wrappers and weak hints); ties go to the earliest
# occurrence in the log, since later errors cascade from the first.
RANK_ROOT = 10
"""An engine's own error naming the cause (vLLM ``_check_enough_kv_cache_memory``, SGLang fraction)."""
RANK_SPECIFIC = 15
"""A library error naming the cause (NCCL /dev/shm segment, Triton fp8e4nv)."""
RANK_OOM = 20
"""A CUDA out-of-memory error; its kind follows from the start-up phase it happened in."""
RANK_HINT = 25
"""A hint that usually names the cause but is also logged in passing (V0 FlashAttention FP8 note,
"Bus error", "No space left on device" on /dev/shm)."""
RANK_VAGUE = 28
"""An engine error that says which step failed but not which of several causes (vLLM "Invalid repository ID or local
directory specified": a wrong name, a missing path, a private repo or no network; SGLang "Capture cuda graph failed:"
with an exception that is no out-of-memory): any hint that names the cause (a Hub, network or OOM line, often printed
above it as the chained exception) wins. Its own line is the evidence."""
RANK_PROBE = 30
"""Kubelet killed the container for a failed startup probe (Events, SIGTERM in the log)."""
RANK_EXIT = 35
"""Only the exit code speaks (137 SIGKILL, 143 SIGTERM, 135 SIGBUS)."""
RANK_WRAPPER = 40
"""A wrapper or generic error without the cause ("Engine core initialization failed", NCCL error)."""

ValueKind = Literal["int", "float", "gib", "size", "cc", "flag"]


class StartupPhase(StrEnum):
    """Start-up phase a CUDA OOM happened in; decides GraphCaptureOOM vs WeightsDoNotFit vs Unknown."""

    LOADING = "loading"
    PROFILING = "profiling"
    KV_READY = "kvReady"
    CAPTURE = "capture"
    SAMPLER = "sampler"
    SERVING = "serving"


PHASE_KIND: Mapping[StartupPhase, FailureKind] = MappingProxyType({
    StartupPhase.LOADING: FailureKind.WEIGHTS_DO_NOT_FIT,
    StartupPhase.PROFILING: FailureKind.UNKNOWN,
    StartupPhase.KV_READY: FailureKind.GRAPH_CAPTURE_OOM,
    StartupPhase.CAPTURE: FailureKind.GRAPH_CAPTURE_OOM,
    StartupPhase.SAMPLER: FailureKind.SAMPLER_WARMUP_OOM,
    StartupPhase.SERVING: FailureKind.UNKNOWN,
})
"""Kind of a CUDA OOM by phase. After the KV pool is allocated the engines capture CUDA graphs and
warm up (vLLM ``compile_or_warm_up_model``, SGLang ``init_cuda_graphs``), so an OOM there is a
capture OOM ("during/after CUDA-graph capture"). A profile-run OOM (before the KV pool)
and an OOM while serving have no knob in the effective configuration: Unknown."""

TRACEBACK_PHASE_ORDER = (StartupPhase.CAPTURE, StartupPhase.SAMPLER, StartupPhase.LOADING, StartupPhase.PROFILING,
                         StartupPhase.KV_READY)
"""Inside one traceback, the outermost specific frame decides: capture calls ``_dummy_run`` (a
profiling frame) too, so capture outranks profiling."""


@dataclass(frozen=True)
class Extractor:
    """Reads one number near a marker.

    Attributes:
        name: camelCase number name (``Failure.numbers`` key).
        regex: pattern with one group (two for ``size``: value and unit); literal prefix, bounded.
        value: ``int`` (tokens, counts, bytes printed as integers), ``float`` (fractions),
            ``gib`` (a GiB figure -> int bytes), ``size`` (value + unit -> int bytes), ``cc`` (a compute
            capability as major.minor: "7.5" as printed, "75" / "120" / "sm_120" in vLLM's and torch's integer
            form -> 7.5 / 12.0), ``flag`` (1 when the regex matches at all).
    """

    name: str
    regex: re.Pattern[str]
    value: ValueKind = "int"


def extractor(name: str, pattern: str, value: ValueKind = "int") -> Extractor:
    """Build an ``Extractor``; ``pattern`` is compiled ASCII-only (``\\d`` is 0-9)."""
    return Extractor(name, re.compile(pattern, re.ASCII), value)


@dataclass(frozen=True)
class FailurePattern:
    """One recognizable failure text.

    Attributes:
        kind: the failure kind it names (for ``by_phase`` patterns, the kind when no phase is known).
        markers: literal fragments; the pattern matches where any of them occurs (case-sensitive).
        rank: precedence (``RANK_*``); lower wins.
        source: where the text comes from (engine file and versions).
        extractors: numbers to read in the window around the marker; the first match per name wins.
        requires_any: when non-empty, one of these literals must occur in the same window.
        by_phase: a CUDA OOM whose kind depends on the start-up phase (``PHASE_KIND``); without a phase
            line its kind is ``kind`` (``GPUOutOfMemory``: the policy decides from the numbers).
        covers: the engine (or library) versions whose source wording this pattern was checked against, as
            ``(first, last)`` ranges ("0.8.0", "0.33.x"; "main@2026-08" for unreleased code). The table is
            data: ``ctxfit.engines.<engine>.failures.WORDING_COVERAGE`` lists it per engine.
        context_lines: lines before and after the marker's line that also belong to its window (a message
            whose numbers are printed on the next line; a traceback frame that names the cause).
        line_requires: groups of literals that must all be met on the marker's own line: each group needs
            one of its literals there (a bare ``assert x % tp_size == 0`` line: a ``%`` and a parallel size).
    """

    kind: FailureKind
    markers: tuple[str, ...]
    rank: int
    source: str
    extractors: tuple[Extractor, ...] = ()
    requires_any: tuple[str, ...] = ()
    by_phase: bool = False
    covers: tuple[tuple[str, str], ...] = ()
    context_lines: int = 0
    line_requires: tuple[tuple[str, ...], ...] = ()


@dataclass(frozen=True)
class PhaseMarker:
    """A literal that shows the engine reached ``phase`` (a log line or a traceback frame name).

    Attributes:
        phase: the start-up phase.
        marker: literal fragment (case-sensitive).
        source: where it comes from.
    """

    phase: StartupPhase
    marker: str
    source: str


TORCH_OOM_EXTRACTORS = (
    extractor("requestedBytes", r"Tried to allocate " + SIZE, "size"),
    extractor("gpuIndex", r"GPU (\d{1,3})[ ;]"),
    extractor("totalBytes", r"total capacity of " + SIZE, "size"),
    extractor("totalBytes", SIZE + r" total capacity", "size"),
    extractor("freeBytes", r"of which " + SIZE + r" is free", "size"),
    extractor("freeBytes", SIZE + r" free;", "size"),
    extractor("inUseBytes", r"this process has " + SIZE + r" memory in use", "size"),
    extractor("inUseBytes", r"Process \d{1,10} has " + SIZE + r" memory in use", "size"),
    extractor("inUseBytes", SIZE + r" already allocated", "size"),
    extractor("allocatedBytes", r"Of the allocated memory " + SIZE + r" is allocated by PyTorch", "size"),
    extractor("allocatedBytes", SIZE + r" already allocated", "size"),
    extractor("reservedBytes", SIZE + r" reserved in total by PyTorch", "size"),
    extractor("reservedBytes", SIZE + r" is reserved by PyTorch", "size"),
)
"""Numbers of PyTorch's CUDA OOM (c10 ``CUDACachingAllocator.cpp``, docs/engine-memory.md C): torch >= 2.1
"Tried to allocate X. GPU N has a total capacity of T of which F is free. Including non-PyTorch memory,
this process has U memory in use. Of the allocated memory A is allocated by PyTorch, and R is reserved by
PyTorch but unallocated."; torch 2.0 "(GPU N; T total capacity; A already allocated; F free; R reserved
in total by PyTorch)"; torch 1.x the same without "Process P has U memory in use". ``inUseBytes`` is what
the process holds on the GPU (torch 1.x/2.0: only PyTorch's allocations are printed)."""


PARALLELISM_EXTRACTORS = (
    extractor("attentionHeads", r"attention heads \(?" + NUM),
    extractor("attentionHeads", r"num_attention_heads[= ]{1,3}\(?" + NUM),
    extractor("attentionHeads", r"num_heads[= ]{1,3}\(?" + NUM),
    extractor("kvHeads", r"key.value heads \(?" + NUM),
    extractor("kvHeads", r"KV heads \(?" + NUM),
    extractor("kvHeads", r"num_key_value_heads[= ]{1,3}\(?" + NUM),
    extractor("kvHeads", r"num_kv_heads[= ]{1,3}\(?" + NUM),
    extractor("layers", r"hidden layers \(?" + NUM),
    extractor("layers", r"num_hidden_layers[= ]{1,3}\(?" + NUM),
    extractor("experts", r"[Nn]umber of experts \(?" + NUM),
    extractor("experts", r"num_experts[= ]{1,3}\(?" + NUM),
    extractor("vocabSize", r"vocab_size[= ]{1,3}\(?" + NUM),
    extractor("vocabSize", r"vocabulary size \(?" + NUM),
    extractor("tensorParallelSize", r"tensor parallel size \(?" + NUM),
    extractor("tensorParallelSize", r"[Tt]ensor_parallel_size[= ]{1,3}\(?" + NUM),
    extractor("tensorParallelSize", r"tp_size[= ]{1,3}\(?" + NUM),
    extractor("tensorParallelSize", r"TP[= ]{1,3}\(?" + NUM),
    extractor("tensorParallelSize", r"\btp[= ]{1,3}\(?" + NUM),
    extractor("tensorParallelSize", r"Tensor parallel size " + NUM),
    extractor("pipelineParallelSize", r"pipeline parallel size \(?" + NUM),
    extractor("expertParallelSize", r"expert parallel size \(?" + NUM),
    extractor("pipelineParallelSize", r"pp_size[= ]{1,3}\(?" + NUM),
    extractor("expertParallelSize", r"ep_size[= ]{1,3}\(?" + NUM),
)
"""Numbers of a parallel-layout error: what had to divide (heads, KV heads, layers, experts, vocabulary) and
the sizes (TP, PP, EP). First match per name wins."""


@dataclass(frozen=True)
class WordingCoverage:
    """One row of an engine's wording table: a pattern's kind, its first marker and the versions checked."""

    kind: FailureKind
    marker: str
    covers: tuple[tuple[str, str], ...]
    source: str


def coverage_table(patterns: tuple[FailurePattern, ...]) -> tuple[WordingCoverage, ...]:
    """The wording table of ``patterns`` (``FailurePattern.covers``), in pattern order."""
    return tuple(WordingCoverage(p.kind, p.markers[0] if p.markers else "", p.covers, p.source) for p in patterns)


def parse_decimal(text: str) -> Decimal | None:
    """A printed number without thousands separators, or None when it is not one ("1,234.5" -> 1234.5)."""
    cleaned = text.replace(",", "")
    if not cleaned or len(cleaned) > 40:
        return None
    try:
        value = Decimal(cleaned)
    except InvalidOperation:
        return None
    return value if value.is_finite() else None


def to_number(groups: tuple[str | None, ...], value: ValueKind) -> int | float | None:
    """Convert an extractor's groups to the number it names, or None when the text is not a number.

    ``gib``/``size`` give whole bytes (floor of the printed value x unit), ``int`` truncates,
    ``float`` keeps the printed precision.
    """
    if not groups or groups[0] is None:
        return None
    if value == "flag":
        return 1
    number = parse_decimal(groups[0])
    if number is None:
        return None
    if value == "int":
        return int(number)
    if value == "float":
        return float(number)
    if value == "cc":
        if "." in groups[0]:
            return float(number)
        return float(int(number)) / 10
    if value == "gib":
        return int(number * GIB)
    unit = groups[1] if len(groups) > 1 else None
    if unit is None or unit not in UNIT_BYTES:
        return None
    return int(number * UNIT_BYTES[unit])
