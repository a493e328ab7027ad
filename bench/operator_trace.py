"""Run the operator (``python -m ctxfit.controller``) under tracemalloc; on exit write the top allocation sites.

    CTXFIT_BENCH_TRACEMALLOC=/tmp/trace.txt python bench/reconcile_bench.py --count 1000

``bench/reconcile_bench.py`` starts this instead of the operator when ``CTXFIT_BENCH_TRACEMALLOC`` names an
output file. Every ``CTXFIT_BENCH_TRACEMALLOC_EVERY`` seconds (10 by default; 0.05 catches a transient peak) a
thread looks at the traced size; when it is the largest so far by 1 MiB it writes a snapshot grouped by file and
line (40 entries; ``CTXFIT_BENCH_TRACEMALLOC_FRAMES=N``: by the innermost N frames of the call stack, 25
entries) with the traced peak (kopf owns SIGTERM, so there is no dump at the stop); tracemalloc itself
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


def dump(path: Path, frames: int = 1) -> None:
    """Write the current top allocation sites and the traced peak to ``path``; ``frames`` > 1: grouped by call
    stack (the innermost ``frames`` frames, printed innermost first) instead of by line."""
    snapshot = tracemalloc.take_snapshot()
    current, peak = tracemalloc.get_traced_memory()
    lines = [f"traced now {current / 2**20:.1f} MiB, peak {peak / 2**20:.1f} MiB"]
    if frames <= 1:
        lines += [str(stat) for stat in snapshot.statistics("lineno")[:40]]
    else:
        for stat in snapshot.statistics("traceback")[:25]:
            lines.append(f"{stat.size / 2**20:.2f} MiB in {stat.count} blocks")
            lines += [f"    {frame.filename}:{frame.lineno}" for frame in reversed(stat.traceback)]
    path.write_text("\n".join(lines) + "\n")


def watch(path: Path, every: float = 10.0, frames: int = 1) -> None:
    """Dump whenever the traced size is the largest seen so far by 1 MiB (checked every ``every`` seconds)."""
    largest = 0
    while True:
        time.sleep(every)
        current, _ = tracemalloc.get_traced_memory()
        if current > largest + 2**20:
            largest = current
            dump(path, frames)


def main() -> None:
    frames = int(os.environ.get("CTXFIT_BENCH_TRACEMALLOC_FRAMES", "1"))
    tracemalloc.start(frames)
    threading.Thread(target=watch, args=(Path(os.environ["CTXFIT_BENCH_TRACEMALLOC"]),
                     float(os.environ.get("CTXFIT_BENCH_TRACEMALLOC_EVERY", "10")), frames), daemon=True).start()
    sys.argv = ["ctxfit.controller"]
    runpy.run_module("ctxfit.controller", run_name="__main__")


if __name__ == "__main__":
    main()
