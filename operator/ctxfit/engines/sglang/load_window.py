"""SGLang weight loading read from its "Load weight begin" / "Load weight end" pair, for versions that print no
"mem usage" or "elapsed" on the end line.

Wordings (read in the published wheels; ``srt/model_executor/model_runner.py`` ``load_model``):
- 0.1.21 - 0.2.5 (``managers/controller/model_runner.py``): "[gpu_id=N] Load weight begin. avail mem=X GB" ...
  "[gpu_id=N] Load weight end. type=T, dtype=D, avail mem=Y GB"; 0.2.7: the same with "[gpu=N]" (the rank is in the
  message).
- 0.2.15 - 0.4.5: "Load weight begin. avail mem=X GB" ... "Load weight end. type=T, dtype=D, avail mem=Y GB"
  (the logger prefix "[time TPn]" names the rank; 0.4.3 checked).
- 0.4.6 - 0.5.x print "mem usage=" on the end line themselves, computed the same way (``before_avail_memory -
  after_avail_memory``, 0.4.6.post5 and 0.4.9 checked); later 0.5.x add "elapsed=S s" (0.5.10, 0.5.23).

So weights on a rank = begin avail - end avail (SGLang's own formula), and load seconds = end time - begin time
from the logger timestamps (1 s resolution). Lines are paired per rank (the "gpu_id=N" / "gpu=N" / "TPn" tokens
before the marker, ``ctxfit.engines.sglang.ranks``); the largest rank value is reported, as for the printed
"mem usage".
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import datetime
from decimal import Decimal

from ctxfit.vocab.patterns import NUM, UNIT_BYTES, parse_decimal
from ctxfit.vocab.startup import MAX_BYTES, MAX_COUNT, MAX_LINE_CHARS

from .ranks import rank_of

BEGIN = "Load weight begin."
END = "Load weight end."
_AVAIL = re.compile(r"avail mem=" + NUM + r" ?(GB|GiB|MB)", re.ASCII)
_STAMP = re.compile(r"(\d{4})-(\d\d)-(\d\d)[ T](\d\d):(\d\d):(\d\d)", re.ASCII)


@dataclass(frozen=True)
class _Mark:
    avail_bytes: int | None
    stamp: datetime | None
    line: str


@dataclass(frozen=True)
class LoadWindow:
    """Weights and load time derived from the begin/end pair of the rank with the largest values.

    Attributes:
        weights_bytes: begin avail - end avail (None when no rank printed both avail values).
        load_seconds: end time - begin time (None without timestamps on both lines).
        lines: the begin and end lines used (evidence).
    """

    weights_bytes: int | None
    load_seconds: float | None
    lines: tuple[str, ...]


def _bytes(match: re.Match[str] | None) -> int | None:
    if match is None:
        return None
    number = parse_decimal(match.group(1))
    scale = UNIT_BYTES.get(match.group(2))
    if number is None or scale is None or not number.is_finite() or number < 0 or number > MAX_BYTES:
        return None
    size = int((number * Decimal(scale)).to_integral_value())
    return size if size <= MAX_BYTES else None


def _stamp(prefix: str) -> datetime | None:
    found = _STAMP.search(prefix)
    if found is None:
        return None
    try:
        return datetime(*(int(part) for part in found.groups()))  # type: ignore[arg-type]
    except ValueError:
        return None


def _mark(line: str, marker: str) -> tuple[str, _Mark]:
    at = line.index(marker)
    return rank_of(line, marker), _Mark(_bytes(_AVAIL.search(line[at:])), _stamp(line[:at]), line.strip())


def load_window(text: str) -> LoadWindow:
    """Derive weights and load seconds from the begin/end pairs in ``text``; never raises.

    A rank's first begin line is paired with its first end line after it. A negative difference (memory freed
    by another process while loading) is not observed.
    """
    begins: dict[str, _Mark] = {}
    ends: dict[str, _Mark] = {}
    for raw in text.splitlines():
        line = raw[:MAX_LINE_CHARS]
        if BEGIN in line:
            rank, mark = _mark(line, BEGIN)
            begins.setdefault(rank, mark)
        elif END in line:
            rank, mark = _mark(line, END)
            if rank in begins:
                ends.setdefault(rank, mark)
    weights: int | None = None
    seconds: float | None = None
    lines: tuple[str, ...] = ()
    for rank, end in ends.items():
        begin = begins[rank]
        if begin.avail_bytes is not None and end.avail_bytes is not None and begin.avail_bytes >= end.avail_bytes:
            used = begin.avail_bytes - end.avail_bytes
            if weights is None or used > weights:
                weights, lines = used, (begin.line, end.line)
        if begin.stamp is not None and end.stamp is not None:
            took = (end.stamp - begin.stamp).total_seconds()
            if 0 <= took <= MAX_COUNT and (seconds is None or took > seconds):
                seconds = took
                lines = lines or (begin.line, end.line)
    return LoadWindow(weights, seconds, lines)
