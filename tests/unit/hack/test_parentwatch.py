"""SIGINT to `make` alone (not its process group) stops a child that uses hack/parentwatch.py.

GNU make resets the signal's handler and waits for its children without passing SIGINT on; the child's
ParentWatch sees the handler go (SigCgt in /proc) and signals itself. Real make, real signals.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest

HACK = Path(__file__).resolve().parents[3] / "hack"
sys.path.insert(0, str(HACK))
from parentwatch import caught_signals, dropped_fatal, make_ancestor  # noqa: E402

CHILD = f"""
import signal, sys, time
sys.path.insert(0, {str(HACK)!r})
from parentwatch import ParentWatch

def stop(signum, frame):
    print("stopped by", signal.Signals(signum).name, flush=True)
    sys.exit(0)

for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
    signal.signal(sig, stop)
watch = ParentWatch(interval=0.1).start()
print("ready", watch.active, flush=True)
time.sleep(60)
print("not stopped", flush=True)
"""


def _make(tmp_path: Path) -> subprocess.Popen[str]:
    make = shutil.which("make")
    if make is None:
        pytest.fail("make not found: `apt-get install make`")
    (tmp_path / "child.py").write_text(CHILD)
    (tmp_path / "Makefile").write_text(f"child:\n\t{sys.executable} child.py\n")
    return subprocess.Popen([make, "-s", "child"], cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            text=True, start_new_session=True)


def _wait_ready(proc: subprocess.Popen[str]) -> str:
    assert proc.stdout is not None
    line = proc.stdout.readline()
    assert line.startswith("ready"), line
    return line


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM, signal.SIGHUP], ids=["INT", "TERM", "HUP"])
def test_signal_to_make_alone_stops_the_child(tmp_path: Path, sig: signal.Signals) -> None:
    proc = _make(tmp_path)
    try:
        assert _wait_ready(proc).strip() == "ready True"
        proc.send_signal(sig)  # make's pid only, as `kill -INT <pid>` does
        out, _ = proc.communicate(timeout=10)  # raises TimeoutExpired when the child outlives make
        assert "stopped by" in out and "not stopped" not in out
        assert proc.returncode != 0, "make re-raises the signal after its child is gone"
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)


def test_reads_our_own_process() -> None:
    caught = caught_signals(os.getpid())
    assert caught is not None and signal.SIGINT in caught  # Python's KeyboardInterrupt handler
    assert caught_signals(2**22 + 7) is None
    assert make_ancestor(os.getpid()) is None or isinstance(make_ancestor(os.getpid()), int)


@pytest.mark.parametrize(("before", "now", "expected"), [
    ({2, 15}, {2, 15}, None),
    ({2, 15}, {15}, signal.SIGINT),
    ({2, 15}, {2}, signal.SIGTERM),
    ({2}, None, signal.SIGINT),
    (set(), set(), None),
], ids=["unchanged", "int", "term", "gone", "never-caught"])
def test_dropped_fatal(before: set[int], now: set[int] | None, expected: int | None) -> None:
    assert dropped_fatal(before, now) == expected
