"""The classifier: what Kubernetes showed about a failed engine container -> ``Failure``.

Inputs (``Observation``): ``lastState.terminated`` reason / exit code / message (with
``terminationMessagePolicy: FallbackToLogsOnError`` the message is the log tail, at most 80 lines or
2048 bytes, possibly cut mid-line), the previous container's log tail, and the pod's Event messages.

Precedence (lowest rank wins; ties: the configured engine's patterns, then generic ones, then other
engines', then the earliest occurrence):

0. ``terminated.reason == "OOMKilled"``: the kernel killed the cgroup -> HostOOMKilled.
1. ``RANK_ROOT`` engine errors that name the cause (vLLM KV check, SGLang fraction, ...).
2. ``RANK_SPECIFIC`` library errors that name the cause (NCCL /dev/shm segment, Triton fp8e4nv).
3. ``RANK_OOM`` a CUDA OOM; the start-up phase before it decides the kind (``patterns.PHASE_KIND``).
4. ``RANK_HINT`` weak hints (V0 FlashAttention FP8 note, "Bus error", ENOSPC on /dev/shm), then
   ``RANK_VAGUE`` engine errors that name a class of causes (vLLM "Invalid repository ID ...").
5. ``RANK_PROBE`` startup-probe Events, or the SIGTERM trace "KeyboardInterrupt: terminated".
6. ``RANK_EXIT`` the exit code alone: 137 HostOOMKilled, 143 StartupProbeTimeout, 135 /dev/shm.
7. ``RANK_WRAPPER`` wrappers ("Engine core initialization failed", NCCL error) -> Unknown, quoting the
   line that carries the error (``evidence.error_line``), else the wrapper's line.
8. Unknown with the line that carries the error (``evidence.error_line``).

A CUDA OOM without a phase line is ``GPUOutOfMemory`` with its numbers (the policy decides from them).
Kinds that belong to the node (``NODE_KINDS``: CUDADriverTooOld) carry ``Observation.node``.

Cost: every marker is a literal found with ``str.find`` (a bounded number of occurrences each), and
numbers are read by small bounded regexes in a window of <= 2 KiB around one marker, so the work is
linear in the text. Texts longer than ``MAX_TEXT_CHARS`` are cut to their tail. Never raises on any
text. Numbers outside physical bounds (``limits.plausible_number``: a 20-digit token count) are
dropped, as if the message had not carried them.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from functools import cache
from types import MappingProxyType

from ctxfit.api import EngineKind
from ctxfit.engines import get_engine
from ctxfit.vocab.kinds import NODE_KINDS, Failure, FailureKind, Number
from ctxfit.vocab.patterns import (
    PHASE_KIND,
    RANK_EXIT,
    RANK_WRAPPER,
    TRACEBACK_PHASE_ORDER,
    WINDOW_AFTER,
    WINDOW_BEFORE,
    Extractor,
    FailurePattern,
    PhaseMarker,
    StartupPhase,
    to_number,
)

from .download import DOWNLOAD_EVENT_PATTERNS, DOWNLOAD_PATTERNS
from .evidence import EVIDENCE_MAX_CHARS, error_line, marker_evidence
from .features import attribute
from .generic import EVENT_PATTERNS, GENERIC_PATTERNS, GENERIC_PHASE_MARKERS
from .limits import plausible_number
from .oom_numbers import process_numbers

MAX_TEXT_CHARS = 1 << 20
"""Characters of log text analysed (the tail); the operator passes at most a few tens of KiB."""
MAX_OCCURRENCES = 64
"""Occurrences of one marker examined for ``requires_any`` before giving up on that marker."""
NUMBER_OCCURRENCES = 16
"""Occurrences of the winning pattern examined for the most complete numbers (a cut copy comes first)."""
TRACEBACK_WINDOW = 16384
"""How far before an OOM line a "Traceback (most recent call last)" header is looked for."""
TRACEBACK_HEADER = "Traceback (most recent call last)"

EXIT_SIGNALS: Mapping[int, tuple[FailureKind, str]] = MappingProxyType({
    137: (FailureKind.HOST_OOM_KILLED, "SIGKILL: the kernel OOM killer or the kubelet"),
    143: (FailureKind.STARTUP_PROBE_TIMEOUT, "SIGTERM: the kubelet stopped the container"),
    135: (FailureKind.SHARED_MEMORY_TOO_SMALL, "SIGBUS: usually a full /dev/shm"),
})
"""Exit codes 128 + signal (POSIX), used only when no text names the cause."""


@dataclass(frozen=True)
class Observation:
    """What Kubernetes shows about one failed container.

    Attributes:
        reason: ``lastState.terminated.reason`` ("Error", "OOMKilled", ...), None when unknown.
        exit_code: ``lastState.terminated.exitCode``, None when unknown.
        message: ``lastState.terminated.message`` (log tail, <= 2048 bytes, may start mid-line).
        log_tail: the previous container's log tail (``kubectl logs --previous``), may be empty.
        events: the pod's Event messages (e.g. "Startup probe failed: ...").
        node: the node the pod ran on (``spec.nodeName``), None when unknown.
    """

    reason: str | None = None
    exit_code: int | None = None
    message: str = ""
    log_tail: str = ""
    events: tuple[str, ...] = ()
    node: str | None = None


@dataclass(frozen=True)
class _Match:
    rank: int
    order: int
    position: int
    pattern: FailurePattern
    text: str
    start: int
    end: int


@cache
def engine_patterns(kind: EngineKind) -> tuple[tuple[FailurePattern, ...], tuple[PhaseMarker, ...]]:
    """The failure patterns and phase markers of one engine (``Engine.failure_patterns``)."""
    return get_engine(kind).failure_patterns()


def _as_text(value: object) -> str:
    if value is None:
        return ""
    if isinstance(value, bytes | bytearray):
        return bytes(value).decode("utf-8", errors="replace")
    return value if isinstance(value, str) else str(value)


def _normalize(text: str) -> str:
    """Tail of ``text`` with carriage returns (tqdm bars) as line breaks."""
    if len(text) > MAX_TEXT_CHARS:
        text = text[-MAX_TEXT_CHARS:]
    return text.replace("\r", "\n")


def _window_bounds(text: str, start: int, end: int, before: int, after: int) -> tuple[int, int]:
    """[lo, hi) of the line holding text[start:end], limited to ``before``/``after`` characters."""
    lo_limit = max(0, start - before)
    newline = text.rfind("\n", lo_limit, start)
    lo = newline + 1 if newline >= 0 else lo_limit
    hi_limit = min(len(text), end + after)
    newline = text.find("\n", end, hi_limit)
    hi = newline if newline >= 0 else hi_limit
    return lo, hi


def _pattern_window(text: str, start: int, end: int, pattern: FailurePattern) -> tuple[int, int]:
    """The marker's line widened by ``pattern.context_lines`` lines each way (each side still bounded)."""
    lo, hi = _window_bounds(text, start, end, WINDOW_BEFORE, WINDOW_AFTER)
    for _ in range(pattern.context_lines):
        if lo > 0:
            lo, _hi = _window_bounds(text, lo - 1, lo - 1, WINDOW_BEFORE, 0)
        if hi < len(text):
            _lo, hi = _window_bounds(text, hi + 1, hi + 1, 0, WINDOW_AFTER)
    return lo, hi


def _qualifies(text: str, pos: int, end: int, pattern: FailurePattern) -> bool:
    """Whether the occurrence text[pos:end] meets the pattern's ``line_requires`` and ``requires_any``."""
    if pattern.line_requires:
        lo, hi = _window_bounds(text, pos, end, WINDOW_BEFORE, WINDOW_AFTER)
        line = text[lo:hi]
        if not all(any(needle in line for needle in group) for group in pattern.line_requires):
            return False
    if pattern.requires_any:
        lo, hi = _pattern_window(text, pos, end, pattern)
        window = text[lo:hi]
        if not any(needle in window for needle in pattern.requires_any):
            return False
    return True


def _first_occurrence(text: str, pattern: FailurePattern) -> tuple[int, int] | None:
    best: tuple[int, int] | None = None
    for marker in pattern.markers:
        if not marker:
            continue
        start = 0
        for _ in range(MAX_OCCURRENCES):
            pos = text.find(marker, start)
            if pos < 0 or (best is not None and pos >= best[0]):
                break
            end = pos + len(marker)
            if not _qualifies(text, pos, end, pattern):
                start = pos + 1
                continue
            best = (pos, end)
            break
    return best


def _best(text: str, pattern_sets: list[tuple[int, tuple[FailurePattern, ...]]]) -> _Match | None:
    best: _Match | None = None
    for order, patterns in pattern_sets:
        for pattern in patterns:
            found = _first_occurrence(text, pattern)
            if found is None:
                continue
            match = _Match(pattern.rank, order, found[0], pattern, text, found[0], found[1])
            if best is None or (match.rank, match.order, match.position) < (best.rank, best.order, best.position):
                best = match
    return best


def _extract(window: str, extractors: tuple[Extractor, ...]) -> dict[str, Number]:
    numbers: dict[str, Number] = {}
    for ex in extractors:
        if ex.name in numbers:
            continue
        found = ex.regex.search(window)
        if found is None:
            continue
        value = to_number(found.groups(), ex.value)
        if value is not None and plausible_number(ex.name, value):
            numbers[ex.name] = value
    return numbers


def _phase_before(text: str, position: int, markers: tuple[PhaseMarker, ...]) -> StartupPhase | None:
    """The start-up phase at ``position``: the enclosing traceback's most specific frame, else the last
    phase line logged before it."""
    header = text.rfind(TRACEBACK_HEADER, max(0, position - TRACEBACK_WINDOW), position)
    if header >= 0:
        region = text[header:position]
        found = {m.phase for m in markers if m.marker in region}
        for phase in TRACEBACK_PHASE_ORDER:
            if phase in found:
                return phase
    last_position, last_phase = -1, None
    for m in markers:
        pos = text.rfind(m.marker, 0, position)
        if pos > last_position:
            last_position, last_phase = pos, m.phase
    return last_phase


def _occurrences(text: str, pattern: FailurePattern, limit: int) -> list[tuple[int, int]]:
    """The first ``limit`` occurrences of the pattern's markers (that pass ``_qualifies``), by position."""
    found: list[tuple[int, int]] = []
    for marker in pattern.markers:
        if not marker:
            continue
        start = 0
        for _ in range(limit):
            pos = text.find(marker, start)
            if pos < 0:
                break
            end = pos + len(marker)
            start = pos + 1
            if not _qualifies(text, pos, end, pattern):
                continue
            found.append((pos, end))
    return sorted(found)[:limit]


def _failure_from_match(match: _Match, markers: tuple[PhaseMarker, ...]) -> Failure:
    """The failure at ``match``. A pattern with numbers reads them at the occurrence that yields the most
    (the first one may be cut); a CUDA OOM keeps its first occurrence, whose phase decides the kind."""
    text = match.text
    pattern = match.pattern
    start, end = match.start, match.end
    lo, hi = _pattern_window(text, start, end, pattern)
    numbers = _extract(text[lo:hi], pattern.extractors)
    if pattern.extractors and not pattern.by_phase and len(numbers) < len({e.name for e in pattern.extractors}):
        for other_start, other_end in _occurrences(text, pattern, NUMBER_OCCURRENCES):
            lo, hi = _pattern_window(text, other_start, other_end, pattern)
            other = _extract(text[lo:hi], pattern.extractors)
            if len(other) > len(numbers):
                numbers, start, end = other, other_start, other_end
    if any(e.name == "inUseBytes" for e in pattern.extractors):
        lo, hi = _pattern_window(text, start, end, pattern)
        numbers = {k: v for k, v in process_numbers(text[lo:hi], numbers).items() if plausible_number(k, v)}
    kind = pattern.kind
    if pattern.by_phase:
        phase = _phase_before(text, start, markers)
        if phase is not None:
            kind = PHASE_KIND[phase]
    evidence = marker_evidence(text, start, end, EVIDENCE_MAX_CHARS)
    if kind is FailureKind.UNKNOWN and pattern.rank >= RANK_WRAPPER:
        evidence = error_line(text, _wrapper_markers()) or evidence
    return Failure(kind, numbers, evidence)


@cache
def _wrapper_markers() -> tuple[str, ...]:
    """Markers of every wrapper pattern (engines and generic): lines that only point at the cause."""
    found: list[str] = []
    sets = [GENERIC_PATTERNS] + [engine_patterns(k)[0] for k in EngineKind]
    for patterns in sets:
        for pattern in patterns:
            if pattern.rank >= RANK_WRAPPER:
                found.extend(pattern.markers)
    return (*tuple(found), "See root cause above")


def _termination(observation: Observation) -> str:
    parts = []
    if observation.reason:
        parts.append(f"reason={_as_text(observation.reason)[:64]}")
    if observation.exit_code is not None:
        parts.append(f"exitCode={observation.exit_code}")
    return "terminated: " + " ".join(parts) if parts else "terminated"


def _with_exit(numbers: dict[str, Number], observation: Observation) -> dict[str, Number]:
    if isinstance(observation.exit_code, int):
        return {**numbers, "exitCode": observation.exit_code}
    return numbers


def classify(observation: Observation, engine: EngineKind | None = None) -> Failure:
    """Diagnose one failed start.

    Args:
        observation: termination reason / exit code / message, previous log tail, Event messages.
        engine: the server's engine (``spec.engine.kind``); its patterns are tried first. With None,
            every engine's texts are recognized alike.

    Returns:
        A ``Failure``; ``FailureKind.UNKNOWN`` (with the last error-looking line) when nothing is
        recognized. Never raises on any text.
    """
    log = _normalize(_as_text(observation.log_tail))
    message = _normalize(_as_text(observation.message))
    text = f"{log}\n{message}" if log else message
    events = _normalize("\n".join(_as_text(e) for e in observation.events))
    exit_code = observation.exit_code if isinstance(observation.exit_code, int) else None

    if _as_text(observation.reason) == "OOMKilled":
        return Failure(FailureKind.HOST_OOM_KILLED, _with_exit({}, observation), _termination(observation))

    kinds = [engine] if engine is not None else list(EngineKind)
    others = [k for k in EngineKind if k not in kinds]
    pattern_sets: list[tuple[int, tuple[FailurePattern, ...]]] = []
    markers: tuple[PhaseMarker, ...] = GENERIC_PHASE_MARKERS
    for own in kinds:
        patterns, phases = engine_patterns(own)
        pattern_sets.append((0, patterns))
        markers += phases
    pattern_sets.append((1, GENERIC_PATTERNS))
    pattern_sets.append((1, DOWNLOAD_PATTERNS))
    for other in others:
        patterns, phases = engine_patterns(other)
        pattern_sets.append((2, patterns))
        markers += phases

    candidates: list[tuple[int, int, Failure]] = []
    event_match = _best(events, [(0, EVENT_PATTERNS), (1, DOWNLOAD_EVENT_PATTERNS)]) if events else None
    if event_match is not None:
        failure = _failure_from_match(event_match, markers)
        candidates.append((event_match.rank, 0, Failure(failure.kind, _with_exit(failure.numbers, observation),
                                                        failure.evidence)))
    text_match = _best(text, pattern_sets) if text else None
    if text_match is not None:
        failure = _failure_from_match(text_match, markers)
        if failure.kind in (FailureKind.UNKNOWN, FailureKind.STARTUP_PROBE_TIMEOUT):
            failure = Failure(failure.kind, _with_exit(failure.numbers, observation), failure.evidence)
        candidates.append((text_match.rank, 1, failure))
    if exit_code is not None and exit_code in EXIT_SIGNALS:
        kind, meaning = EXIT_SIGNALS[exit_code]
        candidates.append((RANK_EXIT, 2, Failure(kind, {"exitCode": exit_code},
                                                 f"{_termination(observation)} ({meaning})")))
    if candidates:
        return _on_node(attribute(min(candidates, key=lambda c: (c[0], c[1]))[2], text), observation)
    line = error_line(text, _wrapper_markers())
    silent = not line and not observation.reason and observation.exit_code is None
    return attribute(Failure(FailureKind.UNKNOWN, _with_exit({}, observation), line or _termination(observation),
                             silent=silent), text)


def _on_node(failure: Failure, observation: Observation) -> Failure:
    """``failure`` with the pod's node when its kind belongs to the node (``NODE_KINDS``)."""
    node = _as_text(observation.node).strip()[:253] if observation.node else ""
    if failure.kind in NODE_KINDS and node:
        return Failure(failure.kind, failure.numbers, failure.evidence, node)
    return failure
