"""Operator throughput against the local control plane: N InferenceServers -> N Deployments.

    python bench/reconcile_bench.py [--count 200] [--rate R] [--ceiling-threads 8,32] [--kubeconfig PATH]

Starts the local control plane (hack/ctxfit_cluster.py; or reuses ``--kubeconfig``/``CTXFIT_KUBECONFIG``),
applies the CRD, runs the operator (``python -m ctxfit.controller``) for one fresh namespace, creates
``--count`` InferenceServers from 8 threads (as fast as they go, or spread at ``--rate`` per second), and
watches Deployments. Prints create -> Deployment written latency (p50, p95, max; from the create call
returning to the Deployment's ADDED watch event, or to the end of the second of its ``creationTimestamp``
when that is earlier: under load the API server's watch cache lags, and a watch that fails with "Too large
resource version" replays objects late; both bounds are >= the true latency), the wall time until all are
written, and the operator's peak RSS (``VmHWM``), its RSS split and thread count at the end.

Then, in the same run (operator stopped), the ceiling (``bench/api_ceiling.py``): how fast the API server
accepts ``--count`` copies of one of those Deployments from a plain client and a thread pool of each size in
``--ceiling-threads`` (the best is the ceiling); the operator's throughput (servers / wall time until all
Deployments are written) is printed as a fraction of it. Skipped with ``--ceiling-threads 0`` and in
``--rate`` mode (there the creates, not the API server, set the pace).

``--backlog``: the servers are all created before the operator starts (a restart or failover with work
waiting), so the operator's own rate is measured, not the pace of the creates: Deployments per second from
the first to the last (and counting its start-up), as a fraction of the ceiling.

Targets (issue 5): all 200 within 60 s on 2 cores, p95 < 2 s, peak RSS < 250 MiB.
Targets (issue 10): at 1,000 servers >= 0.8 of the ceiling and RSS < 150 MiB; at ``--rate 10`` p95 < 1 s.
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
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "hack"))
sys.path.insert(0, str(ROOT / "bench"))
if __package__ in (None, ""):
    sys.path.insert(0, str(ROOT / "operator"))

import api_ceiling  # noqa: E402
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


def process_facts(pid: int) -> str:
    """``pid``'s resident memory now (anonymous / file-backed, MiB) and thread count, from /proc."""
    fields: dict[str, int] = {}
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            key, _, value = line.partition(":")
            if key in ("VmRSS", "RssAnon", "RssFile", "Threads"):
                fields[key] = int(value.split()[0])
    except (OSError, ValueError, IndexError):
        return "unreadable"
    mib = {k: v / 1024 for k, v in fields.items() if k != "Threads"}
    return (f"RSS {mib.get('VmRSS', 0):.0f} MiB (anon {mib.get('RssAnon', 0):.0f}, file "
            f"{mib.get('RssFile', 0):.0f}), {fields.get('Threads', 0)} threads")


def written_at(created_mono: float, created_wall: float, seen_mono: float, stamp: str | None) -> float:
    """Seconds from create to Deployment written: the watch's view, capped by the end of the second of the
    Deployment's ``creationTimestamp`` (same clock: the control plane is local). Both are upper bounds."""
    latency = seen_mono - created_mono
    if stamp:
        end_of_second = datetime.strptime(stamp, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=UTC).timestamp() + 1
        latency = min(latency, max(0.0, end_of_second - created_wall))
    return latency


def wait_ready(process: subprocess.Popen[bytes], port: int, limit: float = 120.0) -> float:
    """Seconds until the operator's /metrics answers (served at the end of its start-up handler; under
    load, imports alone can take 10 s), plus 2 s for kopf's initial lists; at most ``limit``."""
    began = time.monotonic()
    while time.monotonic() - began < limit and process.poll() is None:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=2):
                break
        except OSError:
            time.sleep(0.2)
    time.sleep(2)
    return time.monotonic() - began


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


def ceiling_client(kubeconfig: Path, pool_size: int) -> client.ApiClient:
    """A plain API client with ``pool_size`` connections (one per thread: none is opened and discarded)."""
    configuration = client.Configuration()
    config.load_kube_config(config_file=str(kubeconfig), client_configuration=configuration)
    configuration.connection_pool_maxsize = pool_size
    return client.ApiClient(configuration)


def stop(process: subprocess.Popen[bytes], grace: float = 60.0) -> str:
    """SIGTERM ``process``'s group; SIGKILL after ``grace`` seconds. Says how it ended."""
    if process.poll() is not None:
        return f"already ended ({process.returncode})"
    began = time.monotonic()
    os.killpg(process.pid, signal.SIGTERM)
    try:
        process.wait(timeout=grace)
        return f"{time.monotonic() - began:.1f} s after SIGTERM"
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        process.wait()
        return f"still running {grace:.0f} s after SIGTERM: killed"


def run_ceiling(kubeconfig: Path, kubectl: list[str], env: dict[str, str], namespace: str, count: int,
                threads: list[int]) -> api_ceiling.Ceiling | None:
    """The best of ``api_ceiling.measure`` over ``threads``, each in its own scratch namespace."""
    base = api_ceiling.read_deployment(ceiling_client(kubeconfig, 1), namespace, "bench-000")
    best: api_ceiling.Ceiling | None = None
    for n in threads:
        scratch = f"{namespace}-ceiling-{n}"
        subprocess.run([*kubectl, "create", "namespace", scratch], env=env, check=True, capture_output=True)
        try:
            got = api_ceiling.measure(ceiling_client(kubeconfig, n), scratch, base, count, n, "plain")
        finally:
            subprocess.run([*kubectl, "delete", "namespace", scratch, "--wait=false"], env=env,
                           capture_output=True)
        print(f"ceiling: {count} Deployments from a plain client, {n} threads: {got.seconds:.1f} s "
              f"= {got.per_second:.1f}/s", flush=True)
        if best is None or got.per_second > best.per_second:
            best = got
    return best


def run(kubeconfig: Path, kubectl: list[str], count: int, timeout: float, rate: float = 0.0,
        ceiling_threads: tuple[int, ...] = (), backlog: bool = False) -> int:
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
    program = ["-m", "ctxfit.controller"]
    if os.environ.get("CTXFIT_BENCH_TRACEMALLOC"):
        program = [str(ROOT / "bench" / "operator_trace.py")]

    def launch() -> subprocess.Popen[bytes]:
        return subprocess.Popen([sys.executable, *profile, *program], env=op_env, stdout=log,
                                stderr=subprocess.STDOUT, start_new_session=True)

    operator = launch() if not backlog else None
    created: dict[str, float] = {}
    created_wall: dict[str, float] = {}
    written: dict[str, float] = {}
    stamps: dict[str, str | None] = {}
    done = threading.Event()

    def watch_deployments() -> None:
        """Record when each Deployment first appears; a broken watch is restarted (a new watch replays
        existing objects as ADDED, so a missed one is counted late, never lost)."""
        while len(written) < count and not done.is_set():
            stream = watch.Watch()
            try:
                for event in stream.stream(apps.list_namespaced_deployment, namespace, timeout_seconds=30):
                    meta = event["object"].metadata
                    if meta.name not in written:
                        written[meta.name] = time.monotonic()
                        stamps[meta.name] = meta.creation_timestamp.strftime("%Y-%m-%dT%H:%M:%SZ") \
                            if meta.creation_timestamp else None
                    if len(written) >= count or done.is_set():
                        stream.stop()
            except Exception as exc:  # noqa: BLE001 - e.g. 410 Gone or a dropped connection under load
                print(f"deployment watch restarted: {exc}", file=sys.stderr)

    watcher = threading.Thread(target=watch_deployments, daemon=True)
    watcher.start()
    try:
        if operator is not None:  # the operator imports, connects and lists before the burst
            print(f"operator ready: {wait_ready(operator, metrics_port):.1f} s after its start", flush=True)
        cpu_before = cpu_seconds(operator.pid) if operator else 0.0
        start = time.monotonic()

        def create(i: int) -> None:
            if rate > 0:
                time.sleep(max(0.0, start + i / rate - time.monotonic()))
            obj = server(i)
            custom.create_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, obj)
            created[obj["metadata"]["name"]] = time.monotonic()
            created_wall[obj["metadata"]["name"]] = time.time()

        with ThreadPoolExecutor(8) as pool:
            list(pool.map(create, range(count)))
        created_all = time.monotonic() - start
        launched = time.monotonic()
        if operator is None:
            operator = launch()
        deadline = time.monotonic() + timeout
        while len(written) < count and time.monotonic() < deadline and operator.poll() is None:
            time.sleep(0.1)
        by_name = {n: written_at(created[n], created_wall[n], written[n], stamps.get(n))
                   for n in created if n in written}
        latencies = list(by_name.values())
        wall = max((created[n] - start + by_name[n] for n in by_name), default=0.0)
        rss = peak_rss_mib(operator.pid)
        facts = process_facts(operator.pid)
        cpu = cpu_seconds(operator.pid) - cpu_before
        reconciles = reconcile_stats(metrics_port)
        done.set()
        print(f"operator stop: {stop(operator)}", flush=True)
        first_last = (min(written.values()), max(written.values())) if written else (launched, launched)
        measure_ceiling = ceiling_threads and rate <= 0 and "bench-000" in written
        ceiling = run_ceiling(kubeconfig, kubectl, env, namespace, count, list(ceiling_threads)) \
            if measure_ceiling else None
    finally:
        done.set()
        if operator is not None:
            stop(operator)
        log.close()
        subprocess.run([*kubectl, "delete", "namespace", namespace, "--wait=false"], env=env, capture_output=True)
    if backlog:
        return report_backlog(count, created_all, len(written), first_last[1] - launched,
                              first_last[1] - first_last[0], rss, facts, ceiling)
    pace = f" (spread at {rate:g}/s)" if rate > 0 else ""
    print(f"servers: {count}; created in {created_all:.1f} s{pace}; Deployments written: {len(latencies)}/{count} "
          f"within {wall:.1f} s of the first create")
    if latencies:
        p50, p95 = statistics.median(latencies), percentile(latencies, .95)
        print(f"create -> Deployment: p50 {p50:.2f} s, p95 {p95:.2f} s, max {max(latencies):.2f} s")
    print(f"reconciles: {reconciles}; operator CPU during the run: {cpu:.1f} s")
    print(f"operator peak RSS: {rss:.0f} MiB; at the end: {facts} (log: /tmp/{namespace}-operator.log)")
    all_written = len(latencies) == count
    p95 = percentile(latencies, .95) if latencies else float("inf")
    if ceiling is not None and all_written and wall > 0:
        fraction = count / wall / ceiling.per_second
        print(f"operator throughput: {count / wall:.1f} servers -> Deployments per second = {fraction:.2f} of the "
              f"ceiling ({ceiling.per_second:.1f}/s, {ceiling.threads} threads)")
        ok = fraction >= 0.8 and rss < 150
        print("targets (>= 0.8 of the ceiling, RSS < 150 MiB):", "met" if ok else "NOT met")
    if rate > 0:
        ok = all_written and p95 < 1 and rss < 150
        print(f"targets (creates at {rate:g}/s: p95 < 1 s, RSS < 150 MiB):", "met" if ok else "NOT met")
    elif count <= 200:
        ok = all_written and wall <= 60 and p95 < 2 and rss < 250
        print("targets (all in 60 s, p95 < 2 s, RSS < 250 MiB):", "met" if ok else "NOT met")
    return 0 if len(latencies) == count else 1


def report_backlog(count: int, created_all: float, written: int, from_start: float, first_to_last: float,
                   rss: float, facts: str, ceiling: api_ceiling.Ceiling | None) -> int:
    """Print the ``--backlog`` figures: the operator's own rate, not bounded by how fast servers arrive."""
    print(f"servers: {count}, all created in {created_all:.1f} s before the operator started; Deployments "
          f"written: {written}/{count}, the last {from_start:.1f} s after the operator process started, "
          f"{first_to_last:.1f} s after the first")
    print(f"operator peak RSS: {rss:.0f} MiB; at the end: {facts}")
    if ceiling is None or written < count or first_to_last <= 0:
        return 0 if written == count else 1
    steady, overall = (count - 1) / first_to_last, count / from_start
    print(f"operator throughput: {steady:.1f} Deployments/s first to last = {steady / ceiling.per_second:.2f} of the "
          f"ceiling ({ceiling.per_second:.1f}/s, {ceiling.threads} threads); {overall:.1f}/s counting its start-up "
          f"= {overall / ceiling.per_second:.2f}")
    ok = steady / ceiling.per_second >= 0.8 and rss < 150
    print("targets (>= 0.8 of the ceiling, RSS < 150 MiB):", "met" if ok else "NOT met")
    return 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--count", type=int, default=200)
    parser.add_argument("--timeout", type=float, default=120,
                        help="seconds after the last create to wait for the Deployments")
    parser.add_argument("--rate", type=float, default=0.0,
                        help="spread the creates at this many per second (0: as fast as 8 threads go)")
    parser.add_argument("--backlog", action="store_true",
                        help="create the servers before starting the operator (its own rate, not the creates')")
    parser.add_argument("--ceiling-threads", default="8,32",
                        help="thread-pool sizes for the plain-client ceiling, comma-separated (0: skip it)")
    parser.add_argument("--kubeconfig", default=os.environ.get("CTXFIT_KUBECONFIG"),
                        help="reuse a running cluster (default: start a temporary one)")
    args = parser.parse_args()
    threads = tuple(n for n in (int(part) for part in args.ceiling_threads.split(",") if part.strip()) if n > 0)
    if args.kubeconfig:
        kubectl = ["kubectl"]
        bin_dir = os.environ.get("CTXFIT_K8S_BIN_DIR")
        if bin_dir:
            kubectl = [str(Path(bin_dir) / "kubectl")]
        return run(Path(args.kubeconfig), kubectl, args.count, args.timeout, args.rate, threads,
                   args.backlog)
    cluster = cc.Cluster(cc.temp_cluster_dir("ctxfit-bench-"))
    try:
        print(f"local control plane up in {cluster.start(die_with_parent=True):.1f} s", flush=True)
        return run(Path(cluster.kubeconfig), [str(Path(cluster.bin_dir) / "kubectl")], args.count, args.timeout,
                   args.rate, threads, args.backlog)
    finally:
        cluster.stop()


if __name__ == "__main__":
    sys.exit(main())
