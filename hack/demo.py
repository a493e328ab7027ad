"""`make demo`: the main job end to end on a local control plane.

1. starts the local control plane (hack/ctxfit_cluster.py: etcd, kube-apiserver, controller-manager,
   scheduler, kwok GPU nodes; binaries from hack/k8s-bins.sh, built on first use),
2. installs the CRD (crds/inferenceservers.ctxfit.io.yaml),
3. runs the operator (`python -m ctxfit.controller`) against it,
4. applies manifests/kimi-128k.yaml and waits for the InferenceServer to become Ready,
5. prints `kubectl get infsrv`, the plan (`ctxfit plan`), and keeps running until Ctrl-C,
6. on Ctrl-C (or any error) stops the operator and tears the control plane down.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "hack"))

import ctxfit_cluster as cc  # noqa: E402

WORK_DIR = Path(os.environ.get("CTXFIT_DEMO_DIR", "~/.cache/ctxfit/cluster/demo")).expanduser()
MANIFEST = ROOT / "manifests" / "kimi-128k.yaml"
READY_TIMEOUT = float(os.environ.get("CTXFIT_DEMO_TIMEOUT", "180"))


def main() -> int:
    """Run the demo; returns the exit code (0 after Ctrl-C with everything torn down)."""
    cluster = cc.Cluster(WORK_DIR)
    if cluster.is_up():
        cluster.stop()
    operator: subprocess.Popen[bytes] | None = None
    stop = False

    def on_signal(signum: int, _frame: object) -> None:
        nonlocal stop
        stop = True

    signal.signal(signal.SIGINT, on_signal)
    signal.signal(signal.SIGTERM, on_signal)
    try:
        print("== starting the local control plane (first run builds the binaries: ~9 min)", flush=True)
        seconds = cluster.start(die_with_parent=True)
        print(f"   up in {seconds:.1f} s; KUBECONFIG={cluster.kubeconfig}", flush=True)
        env = {**os.environ, "KUBECONFIG": str(cluster.kubeconfig)}
        cluster.kubectl("apply", "-f", str(ROOT / "crds" / "inferenceservers.ctxfit.io.yaml"))
        cluster.kubectl("wait", "--for=condition=Established", "crd/inferenceservers.ctxfit.io", "--timeout=60s")
        print("== nodes", flush=True)
        print(cluster.kubectl("get", "nodes", "-L", "nvidia.com/gpu.product,nvidia.com/gpu.count"), flush=True)
        print("== starting the operator (python -m ctxfit.controller); log: operator.log", flush=True)
        log = open(WORK_DIR / "operator.log", "wb")  # noqa: SIM115 - closed in finally via the process
        operator = subprocess.Popen(
            [sys.executable, "-m", "ctxfit.controller"], env=env, stdout=log, stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        print(f"== kubectl apply -f {MANIFEST.relative_to(ROOT)}", flush=True)
        print(cluster.kubectl("apply", "-f", str(MANIFEST)), flush=True)
        deadline = time.monotonic() + READY_TIMEOUT
        phase = ""
        while time.monotonic() < deadline and not stop:
            phase = cluster.kubectl("get", "infsrv", "kimi-k25", "-o", "jsonpath={.status.phase}", check=False)
            if phase in ("Ready", "Failed"):
                break
            if operator.poll() is not None:
                raise RuntimeError(f"the operator exited with {operator.returncode}; see {WORK_DIR / 'operator.log'}")
            time.sleep(1)
        print("== kubectl get infsrv", flush=True)
        print(cluster.kubectl("get", "infsrv", "-o", "wide"), flush=True)
        print("== kubectl get deploy,pods", flush=True)
        print(cluster.kubectl("get", "deploy,pods", "-o", "wide"), flush=True)
        print(f"== ctxfit plan -f {MANIFEST.relative_to(ROOT)}", flush=True)
        subprocess.run([sys.executable, "-m", "ctxfit.cli", "plan", "-f", str(MANIFEST)], check=False)
        if phase != "Ready":
            print(f"!! InferenceServer phase is {phase!r} after {READY_TIMEOUT:.0f} s", flush=True)
            return 1
        print(f"== running; KUBECONFIG={cluster.kubeconfig}. Ctrl-C to tear down.", flush=True)
        while not stop:
            time.sleep(0.5)
        return 0
    finally:
        print("== tearing down", flush=True)
        if operator is not None and operator.poll() is None:
            os.killpg(operator.pid, signal.SIGTERM)
            try:
                operator.wait(timeout=15)
            except subprocess.TimeoutExpired:
                os.killpg(operator.pid, signal.SIGKILL)
        cluster.stop()
        print("   stopped the operator and the control plane", flush=True)


if __name__ == "__main__":
    sys.exit(main())
