"""Planner throughput: plans per second over the catalog x GPU matrix, and the CLI's wall time.

    python bench/plan_bench.py [--seconds 3]

Target (issue 2): 1,000+ plans/s in one process; ``ctxfit plan`` answers in under 1 s.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if __package__ in (None, ""):
    sys.path.insert(0, str(ROOT / "operator"))

from ctxfit.api import EngineKind, InferenceServerSpec  # noqa: E402
from ctxfit.budget.planner import plan  # noqa: E402
from ctxfit.catalog import gpu_products, models  # noqa: E402


def matrix() -> list[InferenceServerSpec]:
    """Every catalog model x GPU x engine at TP 8 (TP 1 for small models), target = model maximum."""
    specs = []
    for model in models():
        for gpu in gpu_products():
            for engine in EngineKind:
                tp = 8 if (model.weights_total_bytes or 0) > 40e9 else 1
                specs.append(
                    InferenceServerSpec.model_validate(
                        {
                            "model": {"name": model.name},
                            "engine": {"kind": engine.value},
                            "gpu": {"count": tp, "product": gpu.product},
                            "parallelism": {"tensor": tp},
                        }
                    )
                )
    return specs


def main() -> None:
    """Run the matrix for ``--seconds`` and print plans/s, fits, and CLI wall time."""
    parser = argparse.ArgumentParser()
    parser.add_argument("--seconds", type=float, default=3.0)
    args = parser.parse_args()
    specs = matrix()
    once = [plan(spec) for spec in specs]  # every combination is planned: "does not fit" is a verdict
    fits = sum(p.fits for p in once)
    target = sum(p.target_fits for p in once)
    done = 0
    start = time.perf_counter()
    while time.perf_counter() - start < args.seconds:
        for spec in specs:
            plan(spec)
            done += 1
    elapsed = time.perf_counter() - start
    print(
        f"matrix: {len(specs)} specs ({len(models())} models x {len(gpu_products())} GPUs x 2 engines), "
        f"all planned ({sum(1 for _ in once)} plans, none rejected)"
    )
    print(f"plans: {done} in {elapsed:.2f} s = {done / elapsed:,.0f} plans/s (target 1,000+)")
    print(f"fits (a context >= minimum): {fits}, target fits: {target}, does-not-fit verdicts: {len(once) - fits}")
    runs = []
    for _ in range(3):
        t0 = time.perf_counter()
        subprocess.run(
            [
                sys.executable,
                "-m",
                "ctxfit.cli",
                "plan",
                "-f",
                str(ROOT / "manifests" / "kimi-128k.yaml"),
                "-o",
                "json",
            ],
            check=True,
            capture_output=True,
        )
        runs.append(time.perf_counter() - t0)
    print(
        f"cli: ctxfit plan -f manifests/kimi-128k.yaml best {min(runs):.3f} s, worst {max(runs):.3f} s (target < 1 s)"
    )


if __name__ == "__main__":
    main()
