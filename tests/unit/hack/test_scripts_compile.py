"""Every script under bench/ and hack/ at least compiles, and the model benches parse their arguments.

No test runs the benches (they need a control plane and minutes); a syntax error in one (a ``global`` declared
after the name's first use, which ruff does not report) went unnoticed until a bench was run by hand."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]
SCRIPTS = sorted(p for d in ("bench", "hack") for p in (ROOT / d).rglob("*.py"))


@pytest.mark.parametrize("script", SCRIPTS, ids=lambda p: str(p.relative_to(ROOT)))
def test_compiles(script: Path) -> None:
    compile(script.read_text(), str(script), "exec")


@pytest.mark.parametrize("name", ["resolve_bench.py", "reconcile_bench.py", "weights_accuracy.py"])
def test_bench_help(name: str) -> None:
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT / "operator"), str(ROOT)]))
    done = subprocess.run([sys.executable, str(ROOT / "bench" / name), "--help"], capture_output=True, text=True,
                          env=env, timeout=60, cwd=ROOT)
    assert done.returncode == 0, done.stderr
    assert "usage:" in done.stdout
