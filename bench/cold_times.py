"""The cold times README states: from a fresh clone with empty Go caches, how long the demo's binaries, the
whole binary set and the unit tier take on this machine.

    python bench/cold_times.py [--skip-all-bins] [--keep]

Clones this checkout (``git clone --local``) into a temporary directory and runs there, each timed alone, with
``GOCACHE``, ``GOMODCACHE`` and the binary dir (``CTXFIT_BIN_DIR``) in that directory (so nothing is cached; the
Go module proxy is used as on a fresh machine):

1. ``bash hack/k8s-bins.sh cluster`` (what ``make demo`` builds);
2. ``bash hack/k8s-bins.sh`` (everything ``make test`` needs: helm, LWS, KEDA, the real node's binaries), unless
   ``--skip-all-bins``;
3. ``make test-unit`` (no Go, no helm, no promtool needed).

Run it on a quiet machine: the figures are what README's quickstart promises.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def timed(what: str, cmd: list[str], cwd: Path, env: dict[str, str]) -> float:
    began = time.monotonic()
    proc = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True)
    seconds = time.monotonic() - began
    tail = (proc.stdout + proc.stderr).strip().splitlines()[-3:]
    failed = f": {' | '.join(tail)}" if proc.returncode else ""
    print(f"{what}: {seconds / 60:.1f} min (exit {proc.returncode}){failed}", flush=True)
    return seconds


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--skip-all-bins", action="store_true", help="time only the demo's binaries and the unit tier")
    parser.add_argument("--keep", action="store_true", help="keep the temporary directory")
    args = parser.parse_args()
    scratch = Path(tempfile.mkdtemp(prefix="ctxfit-cold-"))
    try:
        clone = scratch / "ctxfit"
        subprocess.run(["git", "clone", "-q", "--local", str(ROOT), str(clone)], check=True)
        env = {**os.environ, "GOCACHE": str(scratch / "gocache"), "GOMODCACHE": str(scratch / "gomodcache"),
               "CTXFIT_BIN_DIR": str(scratch / "bins"), "PYTHONPATH": str(clone / "operator")}
        env.pop("CTXFIT_K8S_BIN_DIR", None)
        print(f"fresh clone in {clone}, empty Go caches", flush=True)
        timed("k8s-bins.sh cluster (make demo's binaries)", ["bash", "hack/k8s-bins.sh", "cluster"], clone, env)
        if not args.skip_all_bins:
            timed("k8s-bins.sh (every binary make test needs)", ["bash", "hack/k8s-bins.sh"], clone, env)
        timed("make test-unit", ["make", "test-unit"], clone, env)
    finally:
        if args.keep:
            print(f"kept {scratch}")
        else:
            subprocess.run(["chmod", "-R", "u+w", str(scratch)], capture_output=True)  # the module cache is read-only
            shutil.rmtree(scratch, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
