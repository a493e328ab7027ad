"""Operator throughput against the local control plane: N InferenceServers -> N Deployments.

    python bench/reconcile_bench.py [--count 200] [--kubeconfig PATH]

Starts the local control plane (hack/ctxfit_cluster.py; or reuses ``--kubeconfig``/``CTXFIT_KUBECONFIG``),
applies the CRD, runs the operator (``python -m ctxfit.controller``) for one fresh namespace, creates
``--count`` InferenceServers from 8 threads, and watches Deployments. Prints create -> Deployment
written latency (p50, p95, max; from the create call returning to the Deployment's ADDED watch event),
the wall time until all are written, and the operator's peak RSS (``VmHWM``).

Targets (issue 5): all 200 within 60 s on 2 cores, p95 < 2 s, peak RSS < 250 MiB.
"""

from __future__ import annotations

import argparse
import os
import signal
import statistics
import subprocess
import sys
import threading
import time
import urllib.request
import uuid
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "hack"))
if __package__ in (None, ""):
    sys.path.insert(0, str(ROOT / "operator"))

import ctxfit_cluster as cc  # noqa: E402
from kubernetes import client, config, watch  # noqa: E402

GROUP, VERSION, PLURAL = "ctxfit.io", "v1alpha1", "inferenceservers"


def server(i: int) -> dict[str, Any]:
    """A small, plannable server (Llama-3.1-8B on one H100); names bench-000..."""
    return {
        "apiVersion": f"{GROUP}/{VERSION}", "kind": "InferenceServer",
        "metadata": {"name": f"bench-{i:03d}"},
        "spec": {"model": {"name": "meta-llama/Llama-3.1-8B-Instruct"}, "engine": {"kind": "vllm"},
                 "gpu": {"count": 1, "product": "NVIDIA-H100-80GB-HBM3"}, "context": {"target": 32768}},
    }


def peak_rss_mib(pid: int) -> float:
    """VmHWM (peak resident set) of ``pid`` in MiB, 0 when unreadable."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    except OSError:
        pass
    return 0.0


def reconcile_stats(port: int) -> str:
    """Count and mean duration of reconciles, from the operator's own histogram."""
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as rsp:
            text = rsp.read().decode()
    except OSError as exc:
        return f"unavailable ({exc})"
    values = {}
    for line in text.splitlines():
        for key in ("ctxfit_reconcile_duration_seconds_count", "ctxfit_reconcile_duration_seconds_sum"):
            if line.startswith(key + " "):
                values[key] = float(line.split()[1])
    count = values.get("ctxfit_reconcile_duration_seconds_count", 0)
    total = values.get("ctxfit_reconcile_duration_seconds_sum", 0)
    return f"{count:.0f}, mean {total / count * 1000:.0f} ms" if count else "none"


def cpu_seconds(pid: int) -> float:
    """user + system CPU seconds of ``pid`` so far (0 when unreadable)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    except (OSError, IndexError, ValueError):
        return 0.0


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(q * (len(ordered) - 1))))]


def run(kubeconfig: Path, kubectl: list[str], count: int, timeout: float) -> int:
    namespace = f"bench-{uuid.uuid4().hex[:6]}"
    env = {**os.environ, "KUBECONFIG": str(kubeconfig)}
    subprocess.run([*kubectl, "apply", "-f", str(ROOT / "crds" / "inferenceservers.ctxfit.io.yaml")], env=env,
                   check=True, capture_output=True)
    subprocess.run([*kubectl, "wait", "--for=condition=Established", "crd/inferenceservers.ctxfit.io"], env=env,
                   check=True, capture_output=True)
    subprocess.run([*kubectl, "create", "namespace", namespace], env=env, check=True, capture_output=True)
    api = config.new_client_from_config(config_file=str(kubeconfig))
    custom, apps = client.CustomObjectsApi(api), client.AppsV1Api(api)
    log = open(Path(f"/tmp/{namespace}-operator.log"), "wb")  # noqa: SIM115 - closed in finally
    metrics_port = cc.free_ports(1)[0]
    op_env = {**env, "CTXFIT_WATCH_NAMESPACES": namespace, "CTXFIT_METRICS_PORT": str(metrics_port),
              "CTXFIT_HEALTH_PORT": "0"}
    profile = ["-m", "cProfile", "-o", f"/tmp/{namespace}.prof"] if os.environ.get("CTXFIT_BENCH_PROFILE") else []
    operator = subprocess.Popen([sys.executable, *profile, "-m", "ctxfit.controller"], env=op_env, stdout=log,
                                stderr=subprocess.STDOUT, start_new_session=True)
    created: dict[str, float] = {}
    written: dict[str, float] = {}
    done = threading.Event()

    def watch_deployments() -> None:
        """Record when each Deployment first appears; a broken watch is restarted (a new watch replays
        existing objects as ADDED, so a missed one is counted late, never lost)."""
        while len(written) < count and not done.is_set():
            stream = watch.Watch()
            try:
                for event in stream.stream(apps.list_namespaced_deployment, namespace, timeout_seconds=30):
                    written.setdefault(event["object"].metadata.name, time.monotonic())
                    if len(written) >= count or done.is_set():
                        stream.stop()
            except Exception as exc:  # noqa: BLE001 - e.g. 410 Gone or a dropped connection under load
                print(f"deployment watch restarted: {exc}", file=sys.stderr)

    watcher = threading.Thread(target=watch_deployments, daemon=True)
    watcher.start()
    try:
        time.sleep(3)  # the operator connects and lists before the burst
        cpu_before = cpu_seconds(operator.pid)
        start = time.monotonic()

        def create(i: int) -> None:
            obj = server(i)
            custom.create_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, obj)
            created[obj["metadata"]["name"]] = time.monotonic()

        with ThreadPoolExecutor(8) as pool:
            list(pool.map(create, range(count)))
        created_all = time.monotonic() - start
        deadline = start + timeout
        while len(written) < count and time.monotonic() < deadline and operator.poll() is None:
            time.sleep(0.1)
        wall = max(written.values(), default=start) - start
        latencies = [written[n] - created[n] for n in created if n in written]
        rss = peak_rss_mib(operator.pid)
        cpu = cpu_seconds(operator.pid) - cpu_before
        reconciles = reconcile_stats(metrics_port)
    finally:
        done.set()
        if operator.poll() is None:
            os.killpg(operator.pid, signal.SIGTERM)
            operator.wait(timeout=20)
        log.close()
        subprocess.run([*kubectl, "delete", "namespace", namespace, "--wait=false"], env=env, capture_output=True)
    print(f"servers: {count}; created in {created_all:.1f} s; Deployments written: {len(latencies)}/{count} "
          f"within {wall:.1f} s of the first create")
    if latencies:
        p50, p95 = statistics.median(latencies), percentile(latencies, .95)
        print(f"create -> Deployment: p50 {p50:.2f} s, p95 {p95:.2f} s, max {max(latencies):.2f} s")
    print(f"reconciles: {reconciles}; operator CPU during the run: {cpu:.1f} s")
    print(f"operator peak RSS: {rss:.0f} MiB (log: /tmp/{namespace}-operator.log)")
    ok = len(latencies) == count and wall <= 60 and percentile(latencies, .95) < 2 and rss < 250
    print("targets (all in 60 s, p95 < 2 s, RSS < 250 MiB):", "met" if ok else "NOT met")
    return 0 if len(latencies) == count else 1


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--count", type=int, default=200)
    parser.add_argument("--timeout", type=float, default=120)
    parser.add_argument("--kubeconfig", default=os.environ.get("CTXFIT_KUBECONFIG"),
                        help="reuse a running cluster (default: start a temporary one)")
    args = parser.parse_args()
    if args.kubeconfig:
        kubectl = ["kubectl"]
        bin_dir = os.environ.get("CTXFIT_K8S_BIN_DIR")
        if bin_dir:
            kubectl = [str(Path(bin_dir) / "kubectl")]
        return run(Path(args.kubeconfig), kubectl, args.count, args.timeout)
    cluster = cc.Cluster(cc.temp_cluster_dir("ctxfit-bench-"))
    try:
        print(f"local control plane up in {cluster.start(die_with_parent=True):.1f} s", flush=True)
        return run(Path(cluster.kubeconfig), [str(Path(cluster.bin_dir) / "kubectl")], args.count, args.timeout)
    finally:
        cluster.stop()


if __name__ == "__main__":
    sys.exit(main())
