#!/usr/bin/env python3
"""``make demo``: a local control plane, the CRD, the operator, and manifests/kimi-128k.yaml.

    python3 hack/demo.py [--dir DIR] [--manifest manifests/kimi-128k.yaml] [--once]

1. builds the Kubernetes binaries on first use (hack/k8s-bins.sh, with progress; cached afterwards);
2. starts etcd, kube-apiserver, kube-controller-manager, kube-scheduler and kwok GPU nodes
   (hack/ctxfit_cluster.py) in DIR (default ~/.cache/ctxfit/cluster/demo-<8 hex of this checkout's path>: one
   per checkout, so the demos of two checkouts never share a cluster, and one never stops the other's);
3. installs crds/inferenceservers.ctxfit.io.yaml, runs the operator (``python -m ctxfit.controller``,
   log in DIR/logs/operator.log), applies the manifest (with a simulated ``DOWNLOAD_MS`` download of
   the weights into the server's claim, hack/cluster_storage.py) and waits until it is Ready (or Failed),
   printing the Downloading step on the way;
4. prints ``kubectl get infsrv``, the server's conditions, its claim (``kubectl get pvc``), the
   ``model-download`` init container and ``ctxfit plan -f MANIFEST``;
5. keeps running (so you can ``export KUBECONFIG=DIR/kubeconfig`` and look around) until Ctrl-C, then
   stops the operator and the cluster (exactly the processes it started) and removes the data.

Stopping: SIGINT, SIGTERM or SIGHUP (handlers installed explicitly, so a SIGINT ignored by a
non-interactive parent shell still works), or the ``make`` that started us being told to stop
(``hack/parentwatch.py``: make waits for its children on SIGINT without passing it on). A second
signal during the teardown is ignored, so the teardown always completes.

``--once`` tears down right after printing (CI smoke test). A demo still running in DIR (its owner process alive)
is never stopped by another: the second one says so and exits 1; one whose owner died is cleaned up first.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from typing import Any

import yaml
from kubernetes import client, config

HACK = Path(__file__).resolve().parent
ROOT = HACK.parent
sys.path.insert(0, str(HACK))

import ctxfit_cluster as cc  # noqa: E402
from cluster_storage import with_download  # noqa: E402
from parentwatch import FATAL, ParentWatch  # noqa: E402
from sim_startup import GIB, StartupLogServer, vllm_startup_log  # noqa: E402

CRD = ROOT / "crds" / "inferenceservers.ctxfit.io.yaml"
DOWNLOAD_MS = 6000
"""The simulated download of the weights (kwok has no network): long enough to see the Downloading phase."""
SIM_KV_SHORTFALL_BYTES = GIB // 2
"""The simulated engine's start-up log (vLLM's wording, hack/sim_startup.py) reports a KV pool this much below
the plan's, so the demo shows what a real start-up shows: the observed pool, the prediction error and the
calibration it teaches (a real engine's numbers come from its own profiling)."""
SIM_LOAD_SECONDS = 523.0
"""The simulated "Model loading took" time: the Kimi-K2 load of docs/field-reports.md (540 GB in 523 s)."""
READY_DELAY_MS = 3000
"""The simulated engine's readiness is held back this long (``sim.ctxfit.io/delay-ms``) so its start-up log is
served before the operator reads it at Ready."""
DOWNLOAD_LOG = "ctxfit-download: 212400000000 of 595000000000 bytes\n"
"""What the download's log shows at that moment (served by kwok as every container's log in the demo)."""


def default_dir(root: Path = ROOT) -> Path:
    """The demo's state dir for the checkout at ``root``: ``~/.cache/ctxfit/cluster/demo-<sha256(root)[:8]>``."""
    digest = hashlib.sha256(str(root.resolve()).encode()).hexdigest()[:8]
    return Path.home() / ".cache" / "ctxfit" / "cluster" / f"demo-{digest}"


def running_owner(state: dict[str, Any]) -> int | None:
    """The pid of the live demo that owns the cluster ``state`` records (another process than this one whose
    processes still run), None when there is none (never started, stopped, or its owner died)."""
    owner = state.get("owner_pid")
    if not isinstance(owner, int) or owner == os.getpid() or not state.get("processes"):
        return None
    if not cc.pid_alive(owner) or not cc.alive_processes(state["processes"]):
        return None
    return owner


def say(text: str) -> None:
    print(f"\033[1m==> {text}\033[0m" if sys.stdout.isatty() else f"==> {text}", flush=True)


def free_port() -> int:
    return cc.free_ports(1)[0]


class Operator:
    """The operator as a child process in its own process group (stopped by its pid only)."""

    def __init__(self, kubeconfig: Path, log_path: Path) -> None:
        self.health_port, self.metrics_port = free_port(), free_port()
        env = {**os.environ, "KUBECONFIG": str(kubeconfig), "CTXFIT_HEALTH_PORT": str(self.health_port),
               "CTXFIT_METRICS_PORT": str(self.metrics_port), "CTXFIT_BACKOFF_SECONDS": "2"}
        self.log_path = log_path
        with log_path.open("ab") as log:
            self.proc = subprocess.Popen([sys.executable, "-m", "ctxfit.controller"], env=env, cwd=ROOT,
                                         stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
                                         preexec_fn=cc._set_pdeathsig)  # never outlives a killed demo

    def wait_healthy(self, timeout: float = 60) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"the operator exited ({self.proc.returncode}); see {self.log_path}")
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{self.health_port}/healthz", timeout=2) as rsp:
                    if rsp.status == 200:
                        return
            except OSError:
                pass
            time.sleep(0.3)
        raise RuntimeError(f"the operator did not become healthy in {timeout:.0f} s; see {self.log_path}")

    def stop(self) -> None:
        if self.proc.poll() is not None:
            return
        os.killpg(self.proc.pid, signal.SIGTERM)
        try:
            self.proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(timeout=5)


def wait_settled(cluster: cc.Cluster, name: str, timeout: float) -> str:
    """Wait until the server's phase is Ready or Failed; returns the phase (or the last one seen).

    Prints each new phase with the server's message (so the Downloading step shows)."""
    deadline = time.monotonic() + timeout
    phase, shown = "", ""
    while time.monotonic() < deadline:
        proc = cluster.kubectl_proc("get", "infsrv", name, "-o", "jsonpath={.status.phase}|{.status.message}")
        phase, _, message = proc.stdout.strip().partition("|")
        if phase and phase != shown:
            print(f"  {name}: {phase}: {message}")
            shown = phase
        if phase in ("Ready", "Failed"):
            return phase
        time.sleep(0.5)
    return phase or "unknown"


def startup_log(cluster: cc.Cluster, namespace: str) -> Any:
    """``make(server, context) -> text`` for ``StartupLogServer``: the download's progress line and vLLM start-up
    lines with the plan's weights and KV bytes per token and a pool ``SIM_KV_SHORTFALL_BYTES`` below the plan's
    (the pod can appear before the status holding the plan: waits up to 60 s for it)."""

    def make(server: str, context: int) -> str:
        deadline, plan = time.monotonic() + 60, None
        while plan is None and time.monotonic() < deadline:
            got = json.loads(cluster.kubectl("get", "infsrv", server, "-n", namespace, "-o", "json"))
            plan = got.get("status", {}).get("plan")
            if plan is None:
                time.sleep(0.3)
        if plan is None:
            return DOWNLOAD_LOG
        per_gpu = plan["perGPU"]
        pool = per_gpu["kvCacheBytes"] - (plan.get("calibrationBytes") or 0) - SIM_KV_SHORTFALL_BYTES
        return DOWNLOAD_LOG + vllm_startup_log(kv_cache_bytes=pool, kv_bytes_per_token=plan["kvBytesPerToken"],
                                               max_model_len=context, weights_bytes=per_gpu["weightsBytes"],
                                               load_seconds=SIM_LOAD_SECONDS)

    return make


def show(cluster: cc.Cluster, manifest: Path, name: str) -> None:
    say("kubectl get infsrv")
    print(cluster.kubectl("get", "infsrv", "-o", "wide"), end="")
    server = json.loads(cluster.kubectl("get", "infsrv", name, "-o", "json"))
    status = server.get("status", {})
    for cond in status.get("conditions", []):
        print(f"  {cond['type']:<11} {cond['status']:<7} {cond['reason']}: {cond.get('message', '')}")
    if status.get("endpoint"):
        print(f"  endpoint: {status['endpoint']}")
    if status.get("model"):
        print(f"  model: {json.dumps(status['model'])}")
    obs = status.get("observed") or {}
    if obs.get("kvCacheBytes") is not None and obs.get("predictedKvCacheBytes") is not None:
        print(f"  observed (the engine's start-up log): KV pool {obs['kvCacheBytes'] / GIB:.2f} GiB = "
              f"{obs.get('kvCacheTokens') or 0:,} tokens, predicted {obs['predictedKvCacheBytes'] / GIB:.2f} GiB, "
              f"error {obs.get('errorBytes', 0) / GIB:+.2f} GiB; max concurrency {obs.get('maxConcurrency')}")
    say(f"kubectl get events --field-selector involvedObject.name={name}")
    print(cluster.kubectl("get", "events", "--field-selector", f"involvedObject.name={name}",
                          "--sort-by", ".lastTimestamp", "-o",
                          "custom-columns=TYPE:.type,REASON:.reason,MESSAGE:.message"), end="")
    say("kubectl get deploy,pods -l ctxfit.io/server=" + name)
    print(cluster.kubectl("get", "deploy,pods", "-l", f"ctxfit.io/server={name}", "-o", "wide"), end="")
    say("kubectl get pvc (the weights cache, reused by every attempt)")
    print(cluster.kubectl("get", "pvc", "-o", "wide"), end="")
    pods = json.loads(cluster.kubectl("get", "pods", "-l", f"ctxfit.io/server={name}", "-o", "json"))["items"]
    for pod in pods:
        for init in pod.get("status", {}).get("initContainerStatuses", []):
            state = init.get("state", {}).get("terminated") or {}
            print(f"  {pod['metadata']['name']} init container {init['name']}: {state.get('reason', '?')} "
                  f"{state.get('startedAt', '')} -> {state.get('finishedAt', '')}")
    say(f"ctxfit plan -f {manifest.relative_to(ROOT) if manifest.is_relative_to(ROOT) else manifest}")
    subprocess.run([sys.executable, "-m", "ctxfit.cli", "plan", "-f", str(manifest)], cwd=ROOT, check=False)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--dir", default=str(default_dir()),
                        help="state dir (default: one per checkout, ~/.cache/ctxfit/cluster/demo-<hash of its path>)")
    parser.add_argument("--manifest", default=str(ROOT / "manifests" / "kimi-128k.yaml"))
    parser.add_argument("--once", action="store_true", help="tear down after printing (no waiting for Ctrl-C)")
    parser.add_argument("--timeout", type=float, default=120, help="seconds to wait for Ready")
    args = parser.parse_args(argv)
    manifest = Path(args.manifest).resolve()
    name = str(yaml.safe_load(manifest.read_text())["metadata"]["name"])

    stopping = False

    def on_signal(signum: int, _frame: object) -> None:
        nonlocal stopping
        if stopping:  # already tearing down: let it finish
            return
        stopping = True
        raise KeyboardInterrupt

    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, on_signal)
    watch = ParentWatch().start()
    say("Kubernetes binaries (first run builds them from the Go module proxy: ~9 min, with progress)")
    bin_dir = cc.find_bin_dir(components=("cluster",))  # no helm, LWS or KEDA: the demo uses none
    cluster = cc.Cluster(args.dir, bin_dir=bin_dir)
    operator: Operator | None = None
    owner = running_owner(cluster.state)
    if owner is not None:  # a demo of this dir is running: stopping it would pull its cluster from under it
        say(f"a demo is already running in {cluster.work_dir} (pid {owner}): stop it with Ctrl-C there, or give "
            "this one its own --dir")
        watch.stop()
        return 1
    try:
        if cluster.state.get("processes"):
            say(f"stopping a demo cluster left running in {cluster.work_dir}")
            cluster.stop()
        say(f"starting the local control plane in {cluster.work_dir}")
        secs = cluster.start(die_with_parent=True)
        print(f"  up in {secs:.1f} s")
        print(cluster.kubectl("get", "nodes", "-L", "nvidia.com/gpu.product,nvidia.com/gpu.count"), end="")
        say("installing the InferenceServer CRD")
        cluster.kubectl("apply", "-f", str(CRD))
        cluster.wait_established("inferenceservers.ctxfit.io", timeout=60)
        say("running the operator (python -m ctxfit.controller)")
        operator = Operator(cluster.kubeconfig, cluster.logs_dir / "operator.log")
        operator.wait_healthy()
        say(f"kubectl apply -f {manifest.name} (simulated download: {DOWNLOAD_MS / 1000:.0f} s)")
        cluster.set_default_logs(DOWNLOAD_LOG, DOWNLOAD_LOG)
        obj = with_download(yaml.safe_load(manifest.read_text()), delay_ms=DOWNLOAD_MS)
        obj["spec"]["pod"].setdefault("annotations", {})["sim.ctxfit.io/delay-ms"] = str(READY_DELAY_MS)
        namespace = obj["metadata"].get("namespace") or "default"
        core = client.CoreV1Api(config.new_client_from_config(str(cluster.kubeconfig)))
        print(f"  the simulated engine logs vLLM's start-up lines with a KV pool "
              f"{SIM_KV_SHORTFALL_BYTES / GIB:.1f} GiB below the plan's")
        with StartupLogServer(cluster, core, namespace, startup_log(cluster, namespace)):
            print(cluster.kubectl("apply", "-f", "-", input=json.dumps(obj)), end="")
            phase = wait_settled(cluster, name, args.timeout)
        print(f"  {name}: {phase}")
        show(cluster, manifest, name)
        if args.once:
            return 0 if phase == "Ready" else 1
        say("running; in another shell:")
        print(f"  export KUBECONFIG={cluster.kubeconfig}\n  {bin_dir / 'kubectl'} get infsrv -w\n"
              f"  operator log: {operator.log_path}\n  metrics: http://127.0.0.1:{operator.metrics_port}/metrics\n"
              "Ctrl-C stops the operator and the cluster.")
        while True:
            time.sleep(3600)
    except KeyboardInterrupt:
        print()
        return 0
    finally:
        stopping = True
        watch.stop()
        say("tearing down")
        if operator is not None:
            operator.stop()
            print("  operator stopped")
        cluster.stop()
        print(f"  cluster stopped, data removed (logs kept in {cluster.logs_dir})")
        for sig in FATAL:
            signal.signal(sig, signal.SIG_DFL)


if __name__ == "__main__":
    sys.exit(main())
