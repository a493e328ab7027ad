"""Run the operator (``python -m ctxfit.controller``) under tracemalloc; on exit write the top allocation sites.

    CTXFIT_BENCH_TRACEMALLOC=/tmp/trace.txt python bench/reconcile_bench.py --count 1000

``bench/reconcile_bench.py`` starts this instead of the operator when ``CTXFIT_BENCH_TRACEMALLOC`` names an
output file. Every ``CTXFIT_BENCH_TRACEMALLOC_EVERY`` seconds (10 by default; 0.05 catches a transient peak) a
thread looks at the traced size; when it is the largest so far by 1 MiB it writes a snapshot grouped by file and
line (40 entries) with the traced peak (kopf owns SIGTERM, so there is no dump at the stop); tracemalloc itself
slows the operator, so throughput figures from such a run are not comparable.
"""

from __future__ import annotations

import os
import runpy
import sys
import threading
import time
import tracemalloc
from pathlib import Path


def dump(path: Path) -> None:
    """Write the current top allocation sites and the traced peak to ``path``."""
    snapshot = tracemalloc.take_snapshot()
    current, peak = tracemalloc.get_traced_memory()
    lines = [f"traced now {current / 2**20:.1f} MiB, peak {peak / 2**20:.1f} MiB"]
    lines += [str(stat) for stat in snapshot.statistics("lineno")[:40]]
    path.write_text("\n".join(lines) + "\n")


def watch(path: Path, every: float = 10.0) -> None:
    """Dump whenever the traced size is the largest seen so far by 1 MiB (checked every ``every`` seconds)."""
    largest = 0
    while True:
        time.sleep(every)
        current, _ = tracemalloc.get_traced_memory()
        if current > largest + 2**20:
            largest = current
            dump(path)


def main() -> None:
    tracemalloc.start(1)
    threading.Thread(target=watch, args=(Path(os.environ["CTXFIT_BENCH_TRACEMALLOC"]),
                     float(os.environ.get("CTXFIT_BENCH_TRACEMALLOC_EVERY", "10"))), daemon=True).start()
    sys.argv = ["ctxfit.controller"]
    runpy.run_module("ctxfit.controller", run_name="__main__")


if __name__ == "__main__":
    main()
