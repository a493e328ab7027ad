"""Notice that the ``make`` running us was told to stop, although make does not pass the signal on.

GNU make's ``fatal_error_signal`` (src/commands.c, https://git.savannah.gnu.org/cgit/make.git/tree/src/commands.c)
handles SIGINT/SIGHUP/SIGQUIT by resetting that signal to SIG_DFL, *waiting for its children*, and only
then re-raising it; only SIGTERM is forwarded to local children. So ``kill -INT <make pid>`` (what a
supervisor or a test harness does, unlike a terminal's Ctrl-C, which reaches the whole process group)
leaves make waiting on a demo that never hears of it. The reset is visible from outside: the signal's
bit leaves the parent's ``SigCgt`` mask in ``/proc/<pid>/status`` (proc(5)). ``ParentWatch`` polls
that and, when the parent stops catching a fatal signal it caught before (or goes away), sends the
same signal to this process, whose handler then tears down as for Ctrl-C. Linux only; elsewhere a no-op.
"""

from __future__ import annotations

import os
import signal
import threading
from pathlib import Path

FATAL = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGQUIT)


def caught_signals(pid: int, proc: Path = Path("/proc")) -> set[int] | None:
    """Signals ``pid`` has a handler for (``SigCgt``), or None when unreadable (no /proc, process gone)."""
    try:
        text = (proc / str(pid) / "status").read_text()
    except OSError:
        return None
    for line in text.splitlines():
        if line.startswith("SigCgt:"):
            mask = int(line.split(":", 1)[1].strip(), 16)
            return {n for n in range(1, 65) if mask & (1 << (n - 1))}
    return None


def dropped_fatal(before: set[int], now: set[int] | None) -> int | None:
    """The fatal signal the parent caught before and no longer does (SIGINT when it is gone), else None."""
    if now is None:
        return int(signal.SIGINT)
    for sig in FATAL:
        if sig in before and sig not in now:
            return int(sig)
    return None


def make_ancestor(pid: int, proc: Path = Path("/proc"), depth: int = 3) -> int | None:
    """The nearest ancestor of ``pid`` (up to ``depth`` levels: make may run us through ``sh -c``) whose
    command is ``make``/``gmake``, or None."""
    for _ in range(depth):
        try:
            stat = (proc / str(pid) / "stat").read_text()
        except OSError:
            return None
        pid = int(stat[stat.rindex(")") + 2:].split()[1])  # field 4, after "pid (comm) state"
        try:
            comm = (proc / str(pid) / "comm").read_text().strip()
        except OSError:
            return None
        if comm in ("make", "gmake"):
            return pid
    return None


class ParentWatch:
    """A daemon thread: when the ``make`` above us drops a fatal signal's handler or exits, signal ourselves.

    Only under make (another parent, e.g. an interactive shell, may swap its handlers at will).
    """

    def __init__(self, interval: float = 0.5) -> None:
        self.parent = make_ancestor(os.getpid()) or 0
        self.before = (caught_signals(self.parent) or set()) if self.parent else set()
        self.interval = interval
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="parent-watch", daemon=True)

    @property
    def active(self) -> bool:
        """Whether there is anything to watch (a parent that catches at least one fatal signal)."""
        return any(sig in self.before for sig in FATAL)

    def start(self) -> ParentWatch:
        if self.active:
            self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()

    def _run(self) -> None:
        while not self._stop.wait(self.interval):
            now = caught_signals(self.parent)
            sig = dropped_fatal(self.before, now)
            if sig is not None:
                os.kill(os.getpid(), sig)
                return
