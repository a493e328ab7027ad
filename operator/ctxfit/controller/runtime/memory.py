"""Giving freed memory back to the system: glibc's ``malloc_trim`` after the resident set grew.

``Trimmer.run`` trims when the resident set grew past a threshold; without glibc it does nothing.
Why and the figures: docs/design/io-performance.md.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import logging
import os
import threading
from collections.abc import Callable
from pathlib import Path

logger = logging.getLogger(__name__)

TRIM_SECONDS = 10.0
"""How often the resident set is looked at."""
TRIM_GROWTH_BYTES = 16 << 20
"""Trim when the resident set is this much above its size after the last trim."""


def resident_bytes() -> int:
    """This process's resident set in bytes (``/proc/self/statm``), 0 when unreadable."""
    try:
        return int(Path("/proc/self/statm").read_text().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        return 0


def glibc_trim() -> Callable[[], int] | None:
    """``malloc_trim(0)`` of the C library this process runs on, None when it has none (not glibc)."""
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        trim = libc.malloc_trim
    except (OSError, AttributeError):
        return None
    trim.argtypes = [ctypes.c_size_t]
    trim.restype = ctypes.c_int
    return lambda: int(trim(0))


class Trimmer:
    """Trims the C heap when the resident set grew (why: docs/design/io-performance.md).

    Args:
        trim: the trim call (``glibc_trim()``); None: never trims.
        resident: the resident set in bytes now (``resident_bytes``).
        growth: bytes of growth since the last trim that make the next check trim.
    """

    def __init__(self, trim: Callable[[], int] | None, resident: Callable[[], int] = resident_bytes,
                 growth: int = TRIM_GROWTH_BYTES) -> None:
        self._trim, self._resident, self._growth = trim, resident, growth
        self._after = resident()
        self.trims = 0

    def check(self) -> bool:
        """Trim if the resident set is ``growth`` above its size after the last trim; True when it trimmed."""
        if self._trim is None:
            return False
        now = self._resident()
        if now - self._after < self._growth:
            self._after = min(self._after, now)
            return False
        self._trim()
        self.trims += 1
        self._after = self._resident()
        logger.debug("malloc_trim: resident %d -> %d MiB", now >> 20, self._after >> 20)
        return True

    def run(self, stopping: threading.Event, every: float = TRIM_SECONDS) -> None:
        """``check`` every ``every`` seconds until ``stopping`` is set (a daemon thread's target)."""
        while not stopping.wait(every):
            self.check()
