"""The evidence line of a failure: which line of a log carries the error, and how it is shortened.

A diagnosis quotes one line so a person can check it. Rules:

- A recognized failure quotes the line holding its marker (plus the next line when the marker's line
  ends with ":" and the engine prints its numbers there, e.g. vLLM's "Insufficient space in /dev/shm:").
- An unrecognized failure quotes the line that carries the error, not the last log line: the first
  Python exception line (``SomethingError: ...``, the root of a chained traceback; Python prints the
  original exception first, "The above exception was the direct cause of the following exception") that
  is not a known wrapper ("Engine core initialization failed. See root cause above."); else the last line
  with an error word; else the last line.
- A line longer than the limit is cut at word boundaries with an ellipsis ("..."), never mid-word; the
  part around the marker is kept.

Pure functions over text; linear in its length.
"""

from __future__ import annotations

from collections.abc import Iterable

EVIDENCE_MAX_CHARS = 512
"""Longest evidence kept (Kubernetes Event messages are cut at 1 KiB; status keeps 512)."""
ELLIPSIS = "..."
UNKNOWN_LINES = 200
"""Lines from the end searched for the error line when nothing is recognized."""
LINE_SCAN_CHARS = 1 << 17
"""Characters from the end searched for the error line."""
ERROR_WORDS = ("Error", "error", "Exception", "FAILED", "Killed", "Traceback", "ERROR")
EXCEPTION_WORDS = ("Error", "Exception", "Interrupt")
"""How Python exception class names end: ``ValueError: ...``, ``torch.OutOfMemoryError: ...``, ``ValueError(...``."""
NAME_CHARS = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_.")
NAME_MAX_CHARS = 80
BEFORE_NAME = frozenset(" \t:(\"'[]")
LINE_CHARS = 4096
"""Characters of one line examined (a longer line is cut there before it is searched and trimmed)."""
WORD_OCCURRENCES = 16
"""Occurrences of each exception word examined per line."""
NOT_A_CAUSE = (
    "Traceback (most recent call last)",
    "During handling of the above exception",
    "The above exception was the direct cause",
    'File "',
)
"""Lines of a traceback that never carry the error itself."""


def exception_at(line: str) -> int:
    """Where a printed Python exception (``Name: ...`` / ``Name(...``, Name ending in Error, Exception or
    Interrupt) starts in ``line``, else -1. Literal search plus a bounded look-back: linear in the line."""
    best = -1
    for word in EXCEPTION_WORDS:
        start = 0
        for _ in range(WORD_OCCURRENCES):
            pos = line.find(word, start)
            if pos < 0 or (best >= 0 and pos >= best):
                break
            start = pos + 1
            end = pos + len(word)
            if not (line.startswith("(", end) or line.startswith(": ", end) or (line.endswith(":") and
                    end == len(line) - 1)):
                continue
            begin = pos
            while begin > 0 and pos - begin < NAME_MAX_CHARS and line[begin - 1] in NAME_CHARS:
                begin -= 1
            if begin == 0 or line[begin - 1] in BEFORE_NAME:
                best = begin if best < 0 else min(best, begin)
                break
    return best


def trim_words(line: str, limit: int = EVIDENCE_MAX_CHARS, focus: int = 0) -> str:
    """``line`` (stripped) at most ``limit`` characters, cut at spaces with an ellipsis where text was dropped.

    Args:
        line: one line of text.
        limit: the longest result (>= 16).
        focus: a character offset in ``line`` that the kept part should contain (e.g. the marker).

    Returns:
        The line itself when short enough; else a window of whole words around ``focus`` with "..." at
        each cut end. A single word longer than the limit is the one case cut inside a word (there is no
        boundary to cut at).
    """
    text = line.strip()
    focus = min(len(text), max(0, focus - (len(line) - len(line.lstrip()))))
    limit = max(16, limit)
    if len(text) <= limit:
        return text
    lo = 0
    if focus > (limit - 2 * len(ELLIPSIS)) * 2 // 3:
        lo = max(0, min(focus - limit // 3, len(text) - limit + len(ELLIPSIS)))
    head = ""
    if lo > 0:
        head = ELLIPSIS
        space = text.find(" ", lo - 1, lo + limit // 2)
        lo = space + 1 if space >= 0 else lo
    budget = limit - len(head)
    if len(text) - lo <= budget:
        return head + text[lo:]
    hi = lo + budget - len(ELLIPSIS)
    space = text.rfind(" ", lo, hi + 1)
    hi = space if space > lo else hi
    return head + text[lo:hi].rstrip() + ELLIPSIS


def line_at(text: str, start: int, end: int) -> tuple[str, int]:
    """The whole line holding ``text[start:end]`` and the marker's offset in it."""
    lo = text.rfind("\n", 0, start) + 1
    hi = text.find("\n", end)
    hi = len(text) if hi < 0 else hi
    return text[lo:hi], start - lo


def marker_evidence(text: str, start: int, end: int, limit: int = EVIDENCE_MAX_CHARS) -> str:
    """The evidence for a match at ``text[start:end]``: its line, plus the next one when it ends with ":"."""
    line, offset = line_at(text, start, end)
    if line.rstrip().endswith(":"):
        after = text.find("\n", end)
        if after >= 0:
            following, _ = line_at(text, after + 1, after + 1)
            if following.strip():
                line = f"{line.rstrip()} {following.strip()}"
    return trim_words(line, limit, offset)


def _is_wrapper(line: str, wrappers: Iterable[str]) -> bool:
    return any(w and w in line for w in wrappers)


def error_line(text: str, wrappers: Iterable[str] = (), limit: int = EVIDENCE_MAX_CHARS) -> str:
    """The line that carries the error in an unrecognized log (see the module doc), trimmed; "" when empty.

    Args:
        text: the log text (termination message and/or log tail).
        wrappers: literal fragments of wrapper errors that only point elsewhere ("See root cause above").
        limit: the longest result.
    """
    wrappers = tuple(wrappers)
    start = max(0, len(text) - LINE_SCAN_CHARS)
    if start > 0:  # from the start of the line the scan window begins in: never mid-word
        start = text.rfind("\n", 0, start) + 1
    lines = [ln.strip()[:LINE_CHARS] for ln in text[start:].split("\n")[-UNKNOWN_LINES:]]
    lines = [ln for ln in lines if ln]
    if not lines:
        return ""
    causes = [ln for ln in lines if not ln.startswith(NOT_A_CAUSE)]
    for line in causes:
        if exception_at(line) >= 0 and not _is_wrapper(line, wrappers):
            return trim_words(line, limit, _focus(line))
    for line in reversed(causes):
        if any(word in line for word in ERROR_WORDS) and not _is_wrapper(line, wrappers):
            return trim_words(line, limit, _focus(line))
    for line in reversed(causes):
        if any(word in line for word in ERROR_WORDS):
            return trim_words(line, limit, _focus(line))
    last = causes[-1] if causes else lines[-1]
    return trim_words(last, limit, _focus(last))


def _focus(line: str) -> int:
    found = exception_at(line)
    if found >= 0:
        return found
    positions = [p for p in (line.find(w) for w in ERROR_WORDS) if p >= 0]
    return min(positions) if positions else 0
