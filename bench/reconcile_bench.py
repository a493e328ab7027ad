"""Operator throughput against the local control plane: N InferenceServers -> N Deployments.

    python bench/reconcile_bench.py [--count 200] [--rate R | --backlog] [--ceiling-threads 8,32]
                                    [--ceiling-claims] [--default-cache auto|emptyDir] [--kubeconfig PATH]

Starts the local control plane (hack/ctxfit_cluster.py; or reuses ``--kubeconfig``/``CTXFIT_KUBECONFIG``),
applies the CRD, runs the operator (``python -m ctxfit.controller``) for one fresh namespace, creates
``--count`` InferenceServers from 8 threads (as fast as they go, or spread at ``--rate`` per second), and
watches Deployments. Prints create -> Deployment written latency (p50, p95, max; from the create call
returning to the Deployment's ADDED watch event, or to the end of the second of its ``creationTimestamp``
when that is earlier: under load the API server's watch cache lags, and a watch that fails with "Too large
resource version" replays objects late; both bounds are >= the true latency), the wall time until all are
written, and the operator's peak RSS (``VmHWM``), its RSS every 10 s, its RSS split and thread count at the end.
For a model in no catalog (``--model``; issue 23: the bench is no slower for it after the first resolution): the
same latency for the servers whose create was sent after the operator's first resolution of the model ended (from
its ``ctxfit_model_resolution_end_timestamp_seconds``, or for an operator without that metric the Hub stand-in's
last answer for the model), and for the servers created while it ran, their latency and the time from its end.
Where the time went (bench/README.md): CPU seconds of the operator and of each control-plane process over the
window (``proc_stats``), the requests the API server served per server (``apiserver_stats``), and the
operator's own metrics: reconcile durations, queue waits of first and later passes, its API requests by verb
and resource (``operator_metrics``).

Then, in the same run (operator stopped), the ceiling (``bench/api_ceiling.py``): how fast the API server
accepts ``--count`` copies of one of those Deployments from a plain client (raw JSON, as the operator sends)
and a thread pool of each size in ``--ceiling-threads`` (the best is the ceiling); the operator's throughput
(servers / wall time until all Deployments are written) is printed as a fraction of it. ``--ceiling-claims``
also measures a plain client writing each Deployment followed by its weights claim (what the operator's
first pass writes by default). Skipped with ``--ceiling-threads 0`` and in ``--rate`` mode (there the creates,
not the API server, set the pace). ``--default-cache emptyDir``: servers without a claim.

``CTXFIT_BENCH_OPERATOR_PATH=/path/to/other/operator`` runs another checkout's operator (e.g. main's, for a
before/after pair measured the same way on the same machine).

``--backlog``: the servers are all created before the operator starts (a restart or failover with work
waiting), so the operator's own rate is measured, not the pace of the creates: Deployments per second from
the first to the last (and counting its start-up), as a fraction of the ceiling.

Targets (issue 5): all 200 within 60 s on 2 cores, p95 < 2 s, peak RSS < 250 MiB.
Targets (issue 10): at 1,000 servers >= 0.8 of the ceiling and RSS < 150 MiB; at ``--rate 10`` p95 < 1 s.
"""

from __future__ import annotations

import argparse
import contextlib
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
import apiserver_stats  # noqa: E402
import ctxfit_cluster as cc  # noqa: E402
import operator_metrics  # noqa: E402
from bench_report import percentile, report_backlog, report_fractions  # noqa: E402
from bench_watch import deployment_events, object_events, wait_established  # noqa: E402
from ctxfit.controller.kube.rest import CLAIMS, DEPLOYMENTS, SERVERS, SERVICES, Rest  # noqa: E402
from kubernetes import client, config  # noqa: E402
from kubernetes.client.exceptions import ApiException  # noqa: E402
from proc_stats import CpuMeter, control_plane_pids, cpu_seconds, peak_rss_mib, process_facts, rss_mib  # noqa: E402

GROUP, VERSION, PLURAL = "ctxfit.io", "v1alpha1", "inferenceservers"


MODEL = "meta-llama/Llama-3.1-8B-Instruct"
"""The servers' model (``--model``: a fixture repo in no catalog is resolved from the local Hub stand-in)."""
RESOLVE_FIRST = False
"""``--resolve-first``: plan one server of the model (another namespace) before the measured burst."""
COMPARE_AFTER: float | None = None
"""``--compare-after``: also report the servers created at least this many seconds after the first create."""


def server(i: int) -> dict[str, Any]:
    """A small, plannable server (Llama-3.1-8B, or ``--model``, on one H100); names bench-000..."""
    return {
        "apiVersion": f"{GROUP}/{VERSION}", "kind": "InferenceServer",
        "metadata": {"name": f"bench-{i:03d}"},
        "spec": {"model": {"name": MODEL}, "engine": {"kind": "vllm"},
                 "gpu": {"count": 1, "product": "NVIDIA-H100-80GB-HBM3"}, "context": {"target": 32768}},
    }


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
                threads: list[int], meter: CpuMeter, claims: bool = False,
                full: bool = False) -> list[api_ceiling.Ceiling]:
    """``api_ceiling.measure`` for each size in ``threads`` (each in its own scratch namespace), then with
    ``claims`` once more with the best size, each Deployment followed by its claim; prints each one's CPU split
    (``meter``: the control plane and this process) and the requests the API server served. Returns the
    Deployments-only ceiling (the best) and, with ``claims``, the paired one."""
    read = ceiling_client(kubeconfig, 1)
    base = api_ceiling.read_object(read, DEPLOYMENTS, namespace, "bench-000")
    claim = None
    if claims:
        try:
            claim = api_ceiling.read_object(read, CLAIMS, namespace, "bench-000-weights")
        except LookupError:
            print("no weights claim (emptyDir cache): no paired ceiling", flush=True)

    def one(i: int, n: int, with_claim: dict[str, Any] | None) -> api_ceiling.Ceiling:
        scratch = f"{namespace}-ceiling-{i}"
        subprocess.run([*kubectl, "create", "namespace", scratch], env=env, check=True, capture_output=True)
        try:
            api = ceiling_client(kubeconfig, n)
            served = apiserver_stats.requests_served(api)
            meter.start(time.monotonic())
            got = api_ceiling.measure(api, scratch, base, count, n, "plain", with_claim)
            split = meter.stop(time.monotonic())
            served_after = apiserver_stats.requests_served(api)
        finally:
            subprocess.run([*kubectl, "delete", "namespace", scratch, "--wait=false"], env=env,
                           capture_output=True)
        what = "Deployments, each with its claim," if got.claims else "Deployments"
        print(f"ceiling: {count} {what} from a plain client, {n} threads: {got.seconds:.1f} s "
              f"= {got.per_second:.1f}/s", flush=True)
        print(f"  CPU: {split.describe(count, 'Deployment')}", flush=True)
        print(f"  API server: {apiserver_stats.describe(served, served_after, count, 'Deployment')}", flush=True)
        return got

    best = max((one(i, n, None) for i, n in enumerate(threads)), key=lambda c: c.per_second)
    found = [best, one(len(threads), best.threads, claim)] if claim is not None else [best]
    if full:
        found.append(full_ceiling(kubeconfig, kubectl, env, namespace, count, best.threads, meter))
    return found


def full_ceiling(kubeconfig: Path, kubectl: list[str], env: dict[str, str], namespace: str, count: int,
                 threads: int, meter: CpuMeter) -> api_ceiling.Ceiling:
    """``api_ceiling.measure_server_writes`` in a scratch namespace, from bench-000's objects as the operator
    wrote them (its claim when there is one)."""
    read = ceiling_client(kubeconfig, 1)
    claim = None
    with contextlib.suppress(LookupError):
        claim = api_ceiling.read_object(read, CLAIMS, namespace, "bench-000-weights")
    objects = api_ceiling.ServerObjects(
        server=api_ceiling.read_object(read, SERVERS, namespace, "bench-000"),
        deployment=api_ceiling.read_object(read, DEPLOYMENTS, namespace, "bench-000"),
        service=api_ceiling.read_object(read, SERVICES, namespace, "bench-000"), claim=claim)
    scratch = f"{namespace}-ceiling-full"
    subprocess.run([*kubectl, "create", "namespace", scratch], env=env, check=True, capture_output=True)
    try:
        api = ceiling_client(kubeconfig, threads)
        meter.start(time.monotonic())
        got = api_ceiling.measure_server_writes(api, scratch, objects, count, threads, "plain")
        split = meter.stop(time.monotonic())
    finally:
        subprocess.run([*kubectl, "delete", "namespace", scratch, "--wait=false"], env=env, capture_output=True)
    print(f"ceiling: {count} servers' claim + Deployment + Service + status + Event from a plain client, {threads} "
          f"threads: {got.seconds:.1f} s = {got.per_second:.1f} servers/s", flush=True)
    print(f"  CPU: {split.describe(count, 'server')}", flush=True)
    return got


def run(kubeconfig: Path, kubectl: list[str], count: int, timeout: float, rate: float = 0.0,
        ceiling_threads: tuple[int, ...] = (), backlog: bool = False, state_file: Path | None = None,
        ceiling_claims: bool = False, default_cache: str = "", ceiling_full: bool = False) -> int:
    hub = None
    if not _in_catalog(MODEL):  # resolved by the operator, from the Hub stand-in
        sys.path.insert(0, str(ROOT))
        from tests.hubfixtures.server import HubStandIn

        hub = HubStandIn()
        hub.requests = TimedRequests()
        hub.start()
    try:
        return _run(kubeconfig, kubectl, count, timeout, rate, ceiling_threads, backlog, state_file, ceiling_claims,
                    default_cache, hub, ceiling_full)
    finally:
        if hub is not None:
            asked = sum(1 for _, path in hub.requests if path.startswith(f"/api/models/{MODEL}"))
            print(f"Hub stand-in: {asked} model-info request(s) for {MODEL} ({len(hub.requests)} requests, "
                  f"{hub.weight_bytes_served():,} bytes of weight files) for {count} servers", flush=True)
            hub.stop()


class TimedRequests(list[tuple[str, str]]):
    """The Hub stand-in's request log (``HubStandIn.requests``), with the Unix time each request arrived (``at``): the
    stand-in's last answer for the model bounds the end of the operator's resolution from below, for an operator
    that exports no ``ctxfit_model_resolution_end_timestamp_seconds`` (e.g. the "before" side of before_after.py)."""

    def __init__(self) -> None:
        super().__init__()
        self.at: list[float] = []

    def append(self, item: tuple[str, str]) -> None:
        self.at.append(time.time())
        super().append(item)


def resolution_end(metrics_text: str, hub: Any) -> tuple[float | None, str]:
    """When the first resolution of ``MODEL`` ended (Unix time) and where that comes from: the operator's
    ``ctxfit_model_resolution_end_timestamp_seconds`` when it exports it and resolved once (the last end is then the
    first), else the Hub stand-in's last answer for the model (a lower bound, a few ms early)."""
    count, total, end = operator_metrics.resolutions(metrics_text)
    if end is not None and count == 1:
        return end, f"operator metric ctxfit_model_resolution_end_timestamp_seconds; 1 resolution, {total:.2f} s"
    times = [t for t, (_, path) in zip(hub.requests.at, list(hub.requests), strict=False) if MODEL in path]
    how = "no resolution metric from this operator" if end is None else f"{count} resolutions in the metric"
    return (max(times), f"{how}: the Hub stand-in's last answer for the model") if times else (None, how)


def report_after_resolution(end: float | None, how: str, start_wall: float, sent_wall: dict[str, float],
                            by_name: dict[str, float], written_wall: dict[str, float]) -> None:
    """Issue 23's criterion, stated directly: the create -> Deployment latency of the servers whose create was sent
    after the first resolution ended (they should plan in their first pass, as for a catalog model), and for the
    servers created while it ran, their latency and the time from its end to their Deployment."""
    if end is None:
        print(f"model resolution: end unknown ({how})")
        return
    after = [by_name[n] for n, sent in sent_wall.items() if n in by_name and sent >= end]
    during = [n for n, sent in sent_wall.items() if n in by_name and sent < end]
    print(f"first resolution of {MODEL}: ended {end - start_wall:.2f} s after the first create ({how})")

    def figures(values: list[float]) -> str:
        if not values:
            return "none"
        return (f"p50 {statistics.median(values):.2f} s, p95 {percentile(values, .95):.2f} s, "
                f"max {max(values):.2f} s")

    print(f"created after the resolution ended: {len(after)} servers: create -> Deployment: {figures(after)}")
    print(f"created while it ran: {len(during)} servers: create -> Deployment: "
          f"{figures([by_name[n] for n in during])}; its end -> Deployment: "
          f"{figures([max(0.0, written_wall[n] - end) for n in during])}")


def resolve_first(rest: Any, namespace: str) -> float:
    """``--resolve-first``: create one server of ``MODEL`` in ``<namespace>-warm`` and wait for its Deployment (the
    operator has then resolved a catalog-free model once), before the measured burst. Seconds create -> Deployment."""
    warm = f"{namespace}-warm"  # created and watched with the operator's own (``_run``)
    start = time.monotonic()
    rest.call("POST", SERVERS, warm, body=server(0))
    while time.monotonic() - start < 120:
        try:
            rest.call("GET", DEPLOYMENTS, warm, "bench-000")
            return time.monotonic() - start
        except ApiException as exc:
            if exc.status != 404:
                raise
        time.sleep(0.05)
    raise SystemExit("--resolve-first: no Deployment for the warm-up server in 120 s")


def _in_catalog(name: str) -> bool:
    from ctxfit.catalog import lookup_model

    return lookup_model(name) is not None


def _run(kubeconfig: Path, kubectl: list[str], count: int, timeout: float, rate: float,  # noqa: C901 - one measured window, in order
         ceiling_threads: tuple[int, ...], backlog: bool, state_file: Path | None, ceiling_claims: bool,
         default_cache: str, hub: Any, ceiling_full: bool) -> int:
    namespace = f"bench-{uuid.uuid4().hex[:6]}"
    env = {**os.environ, "KUBECONFIG": str(kubeconfig)}
    subprocess.run([*kubectl, "apply", "-f", str(ROOT / "crds" / "inferenceservers.ctxfit.io.yaml")], env=env,
                   check=True, capture_output=True)
    api = config.new_client_from_config(config_file=str(kubeconfig))
    rest = Rest(api)
    wait_established(rest, f"{PLURAL}.{GROUP}")
    subprocess.run([*kubectl, "create", "namespace", namespace], env=env, check=True, capture_output=True)
    log = open(Path(f"/tmp/{namespace}-operator.log"), "wb")  # noqa: SIM115 - closed in finally
    metrics_port = cc.free_ports(1)[0]
    watched = namespace
    if RESOLVE_FIRST:  # the warm-up server's namespace, watched too
        subprocess.run([*kubectl, "create", "namespace", f"{namespace}-warm"], env=env, check=True, capture_output=True)
        watched = f"{namespace},{namespace}-warm"
    op_env = {**env, "CTXFIT_WATCH_NAMESPACES": watched, "CTXFIT_METRICS_PORT": str(metrics_port),
              "CTXFIT_HEALTH_PORT": "0", **({"CTXFIT_DEFAULT_CACHE": default_cache} if default_cache else {}),
              **({"HF_ENDPOINT": hub.url} if hub is not None else {})}
    if os.environ.get("CTXFIT_BENCH_OPERATOR_PATH"):  # another checkout's operator, same bench and ceiling
        op_env["PYTHONPATH"] = os.environ["CTXFIT_BENCH_OPERATOR_PATH"]
    profile = ["-m", "cProfile", "-o", f"/tmp/{namespace}.prof"] if os.environ.get("CTXFIT_BENCH_PROFILE") else []
    program = ["-m", "ctxfit.controller"]
    if os.environ.get("CTXFIT_BENCH_TRACEMALLOC"):
        program = [str(ROOT / "bench" / "operator_trace.py")]

    def launch() -> subprocess.Popen[bytes]:
        return subprocess.Popen([sys.executable, *profile, *program], env=op_env, stdout=log,
                                stderr=subprocess.STDOUT, start_new_session=True)

    operator = launch() if not backlog else None
    meter = CpuMeter({**(control_plane_pids(state_file) if state_file else {}), "bench": os.getpid()})
    created: dict[str, float] = {}
    created_wall: dict[str, float] = {}
    sent_wall: dict[str, float] = {}  # when each create was sent (Unix time)
    written: dict[str, float] = {}
    stamps: dict[str, str | None] = {}
    done = threading.Event()

    def watch_deployments() -> None:
        """Record when each Deployment first appears; a broken watch is restarted (a new watch replays
        existing objects as ADDED, so a missed one is counted late, never lost). Raw JSON lines
        (``deployment_events``): the generated client's models would cost this process more CPU than the
        API server spends on the event, CPU the operator and the API server share on this machine."""
        version: str | None = None
        while len(written) < count and not done.is_set():
            try:
                for kind, meta in deployment_events(api, namespace, version):
                    if kind == "ERROR":  # e.g. 410 Gone or "Too large resource version": start afresh
                        version = None
                        break
                    version = meta.get("resourceVersion") or version
                    name = meta.get("name")
                    if name and name not in written:
                        written[name] = time.monotonic()
                        stamps[name] = meta.get("creationTimestamp")
                    if len(written) >= count or done.is_set():
                        return
            except Exception as exc:  # noqa: BLE001 - e.g. a dropped connection under load
                print(f"deployment watch restarted: {exc}", file=sys.stderr)
                version = None

    watcher = threading.Thread(target=watch_deployments, daemon=True)
    watcher.start()
    serviced: dict[str, float] = {}
    statused: dict[str, float] = {}

    def watch(path: str, seen: dict[str, float], ready: Any) -> None:
        """Record when each object of ``path`` first satisfies ``ready(object)`` (as ``watch_deployments``)."""
        version: str | None = None
        while not done.is_set():
            try:
                for kind, obj in object_events(api, path, version):
                    if kind == "ERROR":
                        version = None
                        break
                    meta = obj.get("metadata") or {}
                    version = meta.get("resourceVersion") or version
                    name = meta.get("name")
                    if name and name not in seen and ready(obj):
                        seen[name] = time.monotonic()
                    if done.is_set():
                        return
            except Exception as exc:  # noqa: BLE001 - e.g. a dropped connection under load
                print(f"{path} watch restarted: {exc}", file=sys.stderr)
                version = None

    for path, seen, ready in ((f"/api/v1/namespaces/{namespace}/services", serviced, lambda o: True),
                              (f"/apis/{GROUP}/{VERSION}/namespaces/{namespace}/{PLURAL}", statused,
                               lambda o: bool((o.get("status") or {}).get("phase")))):
        threading.Thread(target=watch, args=(path, seen, ready), daemon=True).start()
    rss_series: list[tuple[float, int, float]] = []  # (seconds since the operator started, Deployments, MiB)

    def sample_rss() -> None:
        """The operator's RSS every 10 s, with how many Deployments were written by then."""
        while not done.wait(10):
            if operator is not None:
                rss_series.append((time.monotonic() - launched_at[0], len(written), rss_mib(operator.pid)))

    launched_at = [time.monotonic()]
    threading.Thread(target=sample_rss, daemon=True).start()
    try:
        if operator is not None:  # the operator imports, connects and lists before the burst
            print(f"operator ready: {wait_ready(operator, metrics_port):.1f} s after its start", flush=True)
        if RESOLVE_FIRST and operator is not None:
            warm = resolve_first(rest, namespace)
            print(f"--resolve-first: one server of {MODEL} planned {warm:.2f} s after its create (another namespace; "
                  "outside the measured window)", flush=True)
        cpu_before = cpu_seconds(operator.pid) if operator else 0.0
        served = apiserver_stats.requests_served(api)
        start, start_wall = time.monotonic(), time.time()
        meter.start(start)
        if operator is not None:
            meter.add("operator", operator.pid)

        def create(i: int) -> None:
            if rate > 0:
                time.sleep(max(0.0, start + i / rate - time.monotonic()))
            obj = server(i)
            sent_wall[obj["metadata"]["name"]] = time.time()
            rest.call("POST", SERVERS, namespace, body=obj)
            created[obj["metadata"]["name"]] = time.monotonic()
            created_wall[obj["metadata"]["name"]] = time.time()

        with ThreadPoolExecutor(8) as pool:
            list(pool.map(create, range(count)))
        created_all = time.monotonic() - start
        launched = time.monotonic()
        if operator is None:
            served = apiserver_stats.requests_served(api)
            launched_at[0] = time.monotonic()
            operator = launch()
            meter.start(launched)
            meter.add("operator", operator.pid)
        deadline = time.monotonic() + timeout
        while len(written) < count and time.monotonic() < deadline and operator.poll() is None:
            time.sleep(0.1)
        window = meter.stop(time.monotonic())
        served_after = apiserver_stats.requests_served(api)
        while (len(serviced) < count or len(statused) < count) and time.monotonic() < deadline \
                and operator.poll() is None:  # the rest of each server's writes: its Service and status
            time.sleep(0.1)
        complete = max([*serviced.values(), *statused.values(), *written.values()], default=start)
        by_name = {n: written_at(created[n], created_wall[n], written[n], stamps.get(n))
                   for n in created if n in written}
        latencies = list(by_name.values())
        wall = max((created[n] - start + by_name[n] for n in by_name), default=0.0)
        rss = peak_rss_mib(operator.pid)
        facts = process_facts(operator.pid)
        cpu = cpu_seconds(operator.pid) - cpu_before
        reconciles = operator_metrics.describe(metrics_port)
        ended = resolution_end(operator_metrics.scrape(metrics_port), hub) if hub is not None else None
        done.set()
        print(f"operator stop: {stop(operator)}", flush=True)
        first_last = (min(written.values()), max(written.values())) if written else (launched, launched)
        measure_ceiling = ceiling_threads and rate <= 0 and "bench-000" in written
        meter.pids.pop("operator", None)
        ceilings = run_ceiling(kubeconfig, kubectl, env, namespace, count, list(ceiling_threads), meter,
                               ceiling_claims, ceiling_full) if measure_ceiling else []
    finally:
        done.set()
        if operator is not None:
            stop(operator)
        log.close()
        for ns in (namespace, f"{namespace}-warm"):
            subprocess.run([*kubectl, "delete", "namespace", ns, "--wait=false"], env=env, capture_output=True)
    print(f"CPU from {'the operator start' if backlog else 'the first create'} until the last Deployment was seen: "
          f"{window.describe(count, 'server')}")
    print(f"API server in that window: {apiserver_stats.describe(served, served_after, count, 'server')}")
    print("operator RSS (s after its start: Deployments, MiB): "
          + ", ".join(f"{t:.0f}: {n}, {mib:.0f}" for t, n, mib in rss_series))
    if backlog:
        print(reconciles)
        return report_backlog(count, created_all, len(written), first_last[1] - launched,
                              first_last[1] - first_last[0], rss, facts, ceilings)
    pace = f" (spread at {rate:g}/s)" if rate > 0 else ""
    print(f"servers: {count}; created in {created_all:.1f} s{pace}; Deployments written: {len(latencies)}/{count} "
          f"within {wall:.1f} s of the first create")
    if latencies:
        p50, p95 = statistics.median(latencies), percentile(latencies, .95)
        print(f"create -> Deployment: p50 {p50:.2f} s, p95 {p95:.2f} s, max {max(latencies):.2f} s")
    if ended is not None:  # a model in no catalog: the figures before and after its first resolution ended
        written_wall = {n: created_wall[n] + by_name[n] for n in by_name}
        report_after_resolution(*ended, start_wall, sent_wall, by_name, written_wall)
    if COMPARE_AFTER is not None:  # the same subset for any model (a catalog run given a resolution's end offset)
        late = [by_name[n] for n, sent in sent_wall.items() if n in by_name and sent >= start_wall + COMPARE_AFTER]
        print(f"created >= {COMPARE_AFTER:.2f} s after the first create: {len(late)} servers: create -> Deployment: "
              + (f"p50 {statistics.median(late):.2f} s, p95 {percentile(late, .95):.2f} s, max {max(late):.2f} s"
                 if late else "none"))
    print(f"{reconciles}\noperator CPU during the run: {cpu:.1f} s")
    print(f"operator peak RSS: {rss:.0f} MiB; at the end: {facts} (log: /tmp/{namespace}-operator.log)")
    all_written = len(latencies) == count
    p95 = percentile(latencies, .95) if latencies else float("inf")
    fully = len(serviced) >= count and len(statused) >= count
    whole = complete - start
    print(f"servers fully written (Deployment, Service, status): {min(len(serviced), len(statused))}/{count} "
          f"within {whole:.1f} s of the first create" + (f" = {count / whole:.1f}/s" if fully and whole > 0 else ""))
    if ceilings and all_written and wall > 0:
        report_fractions(f"{count / wall:.1f} servers -> Deployments per second", count / wall,
                         [c for c in ceilings if not c.full], rss)
    full = [c for c in ceilings if c.full]
    if full and fully and whole > 0:
        ratio = count / whole / full[0].per_second
        print(f"operator: {count / whole:.1f} servers fully written per second = {ratio:.2f} of a plain client "
              f"writing each server's claim, Deployment, Service, status and Event ({full[0].per_second:.1f}/s, "
              f"{full[0].threads} threads)")
    if rate > 0:
        ok = all_written and p95 < 1 and rss < 150
        print(f"targets (creates at {rate:g}/s: p95 < 1 s, RSS < 150 MiB):", "met" if ok else "NOT met")
    elif count <= 200:
        ok = all_written and wall <= 60 and p95 < 2 and rss < 250
        print("targets (all in 60 s, p95 < 2 s, RSS < 250 MiB):", "met" if ok else "NOT met")
    return 0 if len(latencies) == count else 1


def main() -> int:
    global MODEL, COMPARE_AFTER, RESOLVE_FIRST  # --model (the body builder, the Hub figures), the report's
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
    parser.add_argument("--ceiling-claims", action="store_true",
                        help="also measure a plain client writing each Deployment followed by its weights claim "
                             "(the writes of the operator's first pass), with the best thread count")
    parser.add_argument("--ceiling-full", action="store_true",
                        help="also measure a plain client writing each server's claim, Deployment, Service, status "
                             "and Event (every write of the operator for a new server), with the best thread count")
    parser.add_argument("--default-cache", choices=("auto", "emptyDir"), default="",
                        help="the operator's CTXFIT_DEFAULT_CACHE (auto: a weights claim per server when the "
                             "cluster has a default StorageClass, as the harness has; emptyDir: no claim)")
    parser.add_argument("--model", default=MODEL,
                        help="the servers' model; a fixture repo in no catalog (e.g. Qwen/Qwen2.5-7B) is resolved "
                             "by the operator from the local Hub stand-in (tests/hubfixtures), once for all servers")
    parser.add_argument("--kubeconfig", default=os.environ.get("CTXFIT_KUBECONFIG"),
                        help="reuse a running cluster (default: start a temporary one)")
    parser.add_argument("--compare-after", type=float, default=None, metavar="SECONDS",
                        help="also report the servers whose create was sent this long after the first create: give "
                             "a catalog run the offset a catalog-free run's resolution ended at, to compare the same "
                             "part of the burst (later creates queue behind more servers)")
    parser.add_argument("--resolve-first", action="store_true",
                        help="before the measured burst, create one server of the model in another namespace and "
                             "wait for its Deployment: a catalog-free model's burst after its first resolution, to "
                             "compare with a catalog model's burst (run with the same flag)")
    args = parser.parse_args()
    MODEL, COMPARE_AFTER, RESOLVE_FIRST = args.model, args.compare_after, args.resolve_first
    threads = tuple(n for n in (int(part) for part in args.ceiling_threads.split(",") if part.strip()) if n > 0)
    if args.kubeconfig:
        kubectl = ["kubectl"]
        bin_dir = os.environ.get("CTXFIT_K8S_BIN_DIR")
        if bin_dir:
            kubectl = [str(Path(bin_dir) / "kubectl")]
        return run(Path(args.kubeconfig), kubectl, args.count, args.timeout, args.rate, threads,
                   args.backlog, Path(args.kubeconfig).parent / "state.json", args.ceiling_claims,
                   args.default_cache, args.ceiling_full)
    cluster = cc.Cluster(cc.temp_cluster_dir("ctxfit-bench-"))
    try:
        print(f"local control plane up in {cluster.start(die_with_parent=True):.1f} s", flush=True)
        return run(Path(cluster.kubeconfig), [str(Path(cluster.bin_dir) / "kubectl")], args.count, args.timeout,
                   args.rate, threads, args.backlog, cluster.work_dir / cc.STATE_FILE, args.ceiling_claims,
                   args.default_cache, args.ceiling_full)
    finally:
        cluster.stop()


if __name__ == "__main__":
    sys.exit(main())
