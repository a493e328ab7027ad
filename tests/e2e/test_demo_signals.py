"""`make demo` stops on SIGINT: to make alone (`kill -INT <make pid>`, which make does not pass on) and to
the whole process group (a terminal's Ctrl-C). Real make, real control plane, real operator; afterwards
none of the processes the demo started is alive."""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
BANNER = "Ctrl-C stops the operator and the cluster."


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    stat = Path(f"/proc/{pid}/stat")
    return not (stat.exists() and stat.read_text().split(") ", 1)[1].startswith("Z"))


def _shows_what_the_readme_says(out: str) -> None:
    """README's quickstart: phase Ready, CONTEXT 131072, KV TOKENS read back from the start-up log, and the
    Observed Event's "predicted / observed" it quotes."""
    row = next((line.split() for line in out.splitlines() if line.startswith("kimi-k25 ")), None)
    assert row is not None, out[-3000:]
    context, kv_tokens, phase = row[4], row[5], row[8]
    assert (context, phase) == ("131072", "Ready") and kv_tokens.isdigit() and int(kv_tokens) > 131072, row
    quoted = re.search(r'Observed "(predicted [\d.]+ GiB / observed [\d.]+ GiB)"', (REPO / "README.md").read_text())
    assert quoted is not None and quoted.group(1) in out, out[-3000:]


@pytest.mark.parametrize("to_group", [False, True], ids=["make-pid", "process-group"])
def test_sigint_stops_make_demo(tmp_path: Path, to_group: bool) -> None:
    make = shutil.which("make")
    if make is None:
        pytest.fail("make not found: `apt-get install make`")
    work = tmp_path / "demo"
    cmd = [make, "-o", "install", "demo", f"PYTHON={sys.executable}", f"DEMO_ARGS=--dir {work} --timeout 120"]
    proc = subprocess.Popen(cmd, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            start_new_session=True)
    lines: list[str] = []
    banner = threading.Event()

    def read() -> None:
        assert proc.stdout is not None
        for line in proc.stdout:
            lines.append(line)
            if BANNER in line:
                banner.set()

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    try:
        deadline = time.monotonic() + 300
        while not banner.wait(1) and proc.poll() is None and time.monotonic() < deadline:
            pass
        assert banner.is_set(), "".join(lines[-40:])
        pids = [p["pid"] for p in json.loads((work / "state.json").read_text())["processes"].values()]
        assert pids and all(_alive(p) for p in pids)
        _shows_what_the_readme_says("".join(lines))
        if to_group:
            os.killpg(proc.pid, signal.SIGINT)
        else:
            os.kill(proc.pid, signal.SIGINT)
        proc.wait(timeout=180)  # teardown on a loaded 2-core machine: operator stop + 5 processes
        reader.join(timeout=5)
        out = "".join(lines)
        assert "tearing down" in out and "cluster stopped" in out and "operator stopped" in out, out[-3000:]
        deadline = time.monotonic() + 10
        while any(_alive(p) for p in pids) and time.monotonic() < deadline:
            time.sleep(0.2)
        assert not [p for p in pids if _alive(p)], "a process the demo started outlived it"
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=10)
