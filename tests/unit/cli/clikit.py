"""``run_cli``: the ``ctxfit`` command line run from the repository root, against the local Hub stand-in."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from tests.hubfixtures.server import hub_env

ROOT = Path(__file__).resolve().parents[3]


def run_cli(*args: str) -> subprocess.CompletedProcess[str]:
    # a model in no catalog is resolved from the Hub: here the local Hub stand-in (tests/hubfixtures/server.py)
    return subprocess.run(
        [sys.executable, "-m", "ctxfit.cli", *args], capture_output=True, text=True, cwd=ROOT, timeout=60,
        env=hub_env(),
    )
