"""The operator bench twice in one run, before and after a change: the same machine, control plane and moment.

    python bench/before_after.py [--before main] [--rounds 2] [--] [reconcile_bench.py arguments...]

Checks out ``--before`` (a commit or branch) into a temporary worktree, starts one local control plane, then
runs ``bench/reconcile_bench.py`` against it ``--rounds`` times per side, alternating before/after in ABBA order
(so drift of the machine's load hits both, and each side runs first as often), each run starting once the previous
run's namespace is gone (its servers, Deployments and pods deleted: a run that starts while the control plane still
deletes the last one's hundreds of objects is the slower for it), with ``CTXFIT_BENCH_OPERATOR_PATH`` pointing
the "before" runs at that worktree's operator. The bench code, the ceilings and the servers are this checkout's in
every run. Prints each run's output and a summary of the figures each side reached (p95, peak RSS, throughput /
ceiling lines).
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "hack"))

import ctxfit_cluster as cc  # noqa: E402

SUMMARY = re.compile(r"^(create -> Deployment:.*|operator peak RSS:.*|operator throughput:.*|  = .* of a plain.*|"
                     r"operator: .* servers fully written.*|servers fully written.*|ceiling: .*|servers: .*|"
                     r"first resolution of .*|created after the resolution ended: .*|created while it ran: .*|"
                     r"operator CPU during the run: .*)$", re.M)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--before", default="main", help="commit or branch of the 'before' operator")
    parser.add_argument("--rounds", type=int, default=2, help="runs per side, alternating")
    parser.add_argument("bench_args", nargs=argparse.REMAINDER, help="arguments for reconcile_bench.py")
    args = parser.parse_args()
    extra = [a for a in args.bench_args if a != "--"]
    results: dict[str, list[str]] = {"before": [], "after": []}
    with tempfile.TemporaryDirectory(prefix="ctxfit-before-") as scratch:
        before = Path(scratch) / "worktree"
        subprocess.run(["git", "worktree", "add", "--detach", str(before), args.before], cwd=ROOT, check=True,
                       capture_output=True)
        cluster = cc.Cluster(cc.temp_cluster_dir("ctxfit-bench-"))
        try:
            print(f"local control plane up in {cluster.start(die_with_parent=True):.1f} s", flush=True)
            for round_ in range(args.rounds):
                for side in ("before", "after") if round_ % 2 == 0 else ("after", "before"):
                    waited = wait_for_no_bench_namespaces(cluster)
                    env = {"CTXFIT_K8S_BIN_DIR": str(cluster.bin_dir)}
                    if side == "before":
                        env["CTXFIT_BENCH_OPERATOR_PATH"] = str(before / "operator")
                    print(f"\n=== round {round_ + 1}: {side} ({args.before if side == 'before' else 'this checkout'}; "
                          f"the previous run's namespace gone after {waited:.0f} s)", flush=True)
                    proc = subprocess.run([sys.executable, str(ROOT / "bench" / "reconcile_bench.py"),
                                           "--kubeconfig", str(cluster.kubeconfig), *extra],
                                          env={**os.environ, **env}, capture_output=True, text=True)
                    print(proc.stdout + proc.stderr[-2000:], flush=True)
                    results[side].append(proc.stdout)
        finally:
            cluster.stop()
            subprocess.run(["git", "worktree", "remove", "--force", str(before)], cwd=ROOT, capture_output=True)
    print("\n=== summary")
    for side, outputs in results.items():
        for i, out in enumerate(outputs, 1):
            print(f"--- {side} run {i}")
            for line in SUMMARY.findall(out):
                print(f"  {line}")
    return 0


def wait_for_no_bench_namespaces(cluster: cc.Cluster, timeout: float = 600.0) -> float:
    """Seconds waited until the cluster has no ``bench-*`` namespace left (reconcile_bench.py deletes its own
    without waiting); raises TimeoutError after ``timeout`` seconds."""
    kubectl = [str(cluster.bin_dir / "kubectl"), "--kubeconfig", str(cluster.kubeconfig)]
    start = time.monotonic()
    while True:
        names = subprocess.run([*kubectl, "get", "namespaces", "-o", "name"], capture_output=True, text=True,
                               check=True).stdout.split()
        if not any(n.startswith("namespace/bench-") for n in names):
            return time.monotonic() - start
        if time.monotonic() - start > timeout:
            raise TimeoutError(f"bench namespaces still there after {timeout:.0f} s: {names}")
        time.sleep(2.0)


if __name__ == "__main__":
    sys.exit(main())
