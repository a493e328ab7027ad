"""Issue 28 ("done when", item 6): the operator's memory with hostile specs and hostile input, on the real local
control plane, against its memory in the normal case.

    python3 bench/hostile_rss.py [--count 20] [--crashing 5] [--settle 10]

Starts a temporary control plane (hack/ctxfit_cluster.py), applies the CRD and runs the operator (``python -m
ctxfit.controller``, default settings) for one fresh namespace; one operator process goes through these phases in
order. After each, the bench waits until the operator has acted on what the phase created (a status on each new
server, or the state named below), then ``--settle`` seconds more, and reads the operator's resident memory now
(VmRSS) and its peak so far (VmHWM) from /proc (``proc_stats``):

  idle         the operator started, nothing to do
  baseline     COUNT plain servers (Llama-3.1-8B on one H100, a weights claim each) until Ready: the normal case
  specs        COUNT servers of ~1.2 MB each (33 env values of 32 KiB, 64 args of 1 KiB, a 64 KiB annotation):
               the CRD admits them, the operator refuses them (engine.env over 64 KiB: a condition and an Event)
  updates      each of those rewritten 3 times (a new 1.2 MB watch event each, a new pass each)
  largest      COUNT servers at every bound the operator admits (64 KiB of env, 128 args of 1 KiB, 64 pod annotations
               of 3 KiB, a 64 KiB annotation on the server) until Ready: rendered, their Deployments and pods indexed
  foreign      COUNT each of Deployments, Pods, Services and claims a tenant labels as the operator's (managed-by
               ctxfit, ctxfit.io/server): the Deployments and Pods with 1.2 MB of env, the Services and claims with
               240 KB of annotations; all in the operator's watches and indexes
  calibration  the calibration ConfigMap with 250 KB of hostile entries (``.inf``, junk: read, dropped), then at
               1,000,000 bytes (over its bound: not parsed); 2 new servers planned through each
  crashes      CRASHING servers whose engine crash-loops; every pod's log (current and previous) is one 50 MB line,
               and every crashing pod gets 100 Events of 4 KiB (the operator reads a failed pod's Events and log tail)

Before issue 28 (the issue's figures): twenty servers with 1.2 MB env values held 354 MiB; a crashing engine's log of
one 50 MB line cost +75 MiB (330 MiB for five at once). Targets: at the end, RSS within 64 MiB of the baseline; the
peak (VmHWM) under 256 MiB, half the chart's 512Mi limit.

``CTXFIT_BENCH_OPERATOR_PATH=/path/to/other/operator`` runs another checkout's operator through the same phases (a
before/after pair). The machine is shared: figures move with the load (the load average is printed); memory moves
far less than time does.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "hack"))
sys.path.insert(0, str(ROOT / "bench"))
if __package__ in (None, ""):
    sys.path.insert(0, str(ROOT / "operator"))

import ctxfit_cluster as cc  # noqa: E402
import operator_metrics  # noqa: E402
from bench_watch import wait_established  # noqa: E402
from ctxfit.controller.kube.rest import (  # noqa: E402
    CLAIMS,
    CONFIGMAPS,
    DEPLOYMENTS,
    EVENTS,
    PODS,
    SERVERS,
    SERVICES,
    Rest,
)
from ctxfit.render.labels import MANAGED_BY, SERVER_LABEL  # noqa: E402
from kubernetes import config  # noqa: E402
from proc_stats import peak_rss_mib, process_facts, rss_mib  # noqa: E402
from reconcile_bench import MODEL, stop, wait_ready  # noqa: E402

GROUP, VERSION, PLURAL = "ctxfit.io", "v1alpha1", "inferenceservers"
PHASE_LABEL = "bench.ctxfit.io/phase"
KIB = 1024
MB = 1_000_000
TABLE = "application/json;as=Table;v=v1;g=meta.k8s.io"
FAILING = ("SteppingDown", "Retrying", "Failed")
PHASES = ("baseline", "specs", "updates", "largest", "foreign", "calibration", "crashes")
TARGET_OVER_BASELINE_MIB = 64.0
TARGET_PEAK_MIB = 256.0
OWNED_LABELS = {"app.kubernetes.io/managed-by": MANAGED_BY}


def server(name: str, phase: str, spec_extra: dict[str, Any] | None = None,
           annotations: dict[str, str] | None = None, pod: dict[str, Any] | None = None) -> dict[str, Any]:
    """A plannable server (``MODEL`` on one H100, 32k context) in ``phase`` (a label), with extras."""
    spec: dict[str, Any] = {"model": {"name": MODEL}, "engine": {"kind": "vllm"},
                            "gpu": {"count": 1, "product": "NVIDIA-H100-80GB-HBM3"}, "context": {"target": 32768}}
    spec["engine"].update(spec_extra or {})
    if pod:
        spec["pod"] = pod
    meta: dict[str, Any] = {"name": name, "labels": {PHASE_LABEL: phase}}
    if annotations:
        meta["annotations"] = annotations
    return {"apiVersion": f"{GROUP}/{VERSION}", "kind": "InferenceServer", "metadata": meta, "spec": spec}


def filler(size: int, seed: str) -> str:
    """``size`` characters (ASCII), distinct per ``seed`` (so no two values intern to one string)."""
    head = f"{seed}-"
    return head + "x" * (size - len(head))


def hostile_spec(i: int) -> dict[str, Any]:
    """~1.2 MB: 33 env values of 32 KiB (each within the CRD's 32 KiB; all of them over the operator's 64 KiB),
    64 args of 1 KiB, a 64 KiB annotation."""
    env = [{"name": f"E{j:02d}", "value": filler(32 * KIB, f"s{i}e{j}")} for j in range(33)]
    args = [f"--chat-template={filler(KIB - 16, f's{i}a{j}')}" for j in range(64)]
    return server(f"hostile-{i:02d}", "specs", {"env": env, "args": args},
                  annotations={"bench.ctxfit.io/pad": filler(64 * KIB, f"s{i}")})


def largest_valid(i: int) -> dict[str, Any]:
    """At every bound the operator admits: env 2 x 32 KiB (64 KiB in all), 128 args of 1 KiB, 64 pod annotations
    of 3 KiB, a 64 KiB annotation on the server."""
    env = [{"name": f"E{j}", "value": filler(32 * KIB, f"l{i}e{j}")} for j in range(2)]
    args = [f"--chat-template={filler(1024 - len('--chat-template='), f'l{i}a{j}')}" for j in range(128)]
    pod = {"annotations": {f"bench.ctxfit.io/a{j:02d}": filler(3 * KIB, f"l{i}p{j}") for j in range(64)}}
    return server(f"largest-{i:02d}", "largest", {"env": env, "args": args}, pod=pod,
                  annotations={"bench.ctxfit.io/pad": filler(64 * KIB, f"l{i}")})


def foreign_objects(i: int) -> list[tuple[Any, dict[str, Any]]]:
    """A tenant's Deployment and Pod with 1.2 MB of env and a Service and claim with 240 KB of annotations, all
    labelled as the operator's objects of server ``ghost-NN`` (which does not exist)."""
    name = f"ghost-{i:02d}"
    labels = {**OWNED_LABELS, SERVER_LABEL: name}
    env = [{"name": f"E{j:02d}", "value": filler(32 * KIB, f"g{i}e{j}")} for j in range(36)]
    container = {"name": "engine", "image": "registry.k8s.io/pause:3.10", "env": env}
    big_annotations = {f"bench.ctxfit.io/a{j}": filler(60_000, f"g{i}n{j}") for j in range(4)}
    deployment = {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": name, "labels": labels},
                  "spec": {"replicas": 0, "selector": {"matchLabels": {SERVER_LABEL: name}},
                           "template": {"metadata": {"labels": labels}, "spec": {"containers": [container]}}}}
    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": f"{name}-pod", "labels": labels},
           "spec": {"containers": [container]}}
    service = {"apiVersion": "v1", "kind": "Service",
               "metadata": {"name": name, "labels": labels, "annotations": big_annotations},
               "spec": {"clusterIP": "None", "selector": {SERVER_LABEL: name}, "ports": [{"port": 8000}]}}
    claim = {"apiVersion": "v1", "kind": "PersistentVolumeClaim",
             "metadata": {"name": f"{name}-weights", "labels": labels, "annotations": big_annotations},
             "spec": {"accessModes": ["ReadWriteOnce"], "storageClassName": "bench-none",
                      "resources": {"requests": {"storage": "1Gi"}}}}
    return [(DEPLOYMENTS, deployment), (PODS, pod), (SERVICES, service), (CLAIMS, claim)]


def calibration_texts() -> list[tuple[str, str]]:
    """(what, text): 250 KB of hostile entries (``.inf`` residuals, unknown engines, junk), then 1,000,000 bytes."""
    rows, size = [], 0
    i = 0
    while size < 250_000:
        row = (f"- {{engine: vllm, version: '0.19', gpu: NVIDIA-H100-80GB-HBM3, tp: 1, pp: 1, samples: [{{id: "
               f"a{i}, residualBytes: .inf}}]}}\n" if i % 2 == 0 else
               f"- {{engine: nope{i}, version: x, gpu: {'g' * 200}, tp: -1, pp: 1e999, samples: {i}}}\n")
        rows.append(row)
        size += len(row)
        i += 1
    hostile = "entries:\n" + "".join(rows)
    return [("250 KB of invalid entries", hostile), ("1,000,000 bytes (over the bound)",
                                                    "#" + "x" * (MB - 2) + "\n")]


class _Enough(Exception):
    """The ``--until`` phase is done."""


class Bench:
    """The cluster's API (raw JSON), the namespace and the operator; phases and their memory figures."""

    def __init__(self, cluster: cc.Cluster, settle: float) -> None:
        self.cluster = cluster
        self.api = config.new_client_from_config(config_file=str(cluster.kubeconfig))
        self.api.configuration.connection_pool_maxsize = 8
        self.rest = Rest(self.api)
        self.namespace = f"hostile-{uuid.uuid4().hex[:6]}"
        self.settle = settle
        self.operator: subprocess.Popen[bytes] | None = None
        self.rows: list[tuple[str, float, float, float, str]] = []  # (phase, seconds, RSS, VmHWM, note)
        self.series: list[tuple[float, str, float]] = []
        self.phase = "start"
        self.metrics_port = 0
        self.until = PHASES[-1]
        self.began = time.monotonic()
        self.done = threading.Event()

    def post(self, resource: Any, body: dict[str, Any]) -> None:
        self.rest.call("POST", resource, self.namespace, body=body)

    def statuses(self, phase: str) -> dict[str, tuple[str, str]]:
        """name -> (status.phase, Ready) of the servers labelled ``phase``, from the server-side Table (no spec:
        the hostile bodies are not read back)."""
        raw = self.rest.call("GET", SERVERS, self.namespace, accept=TABLE,
                             query={"labelSelector": f"{PHASE_LABEL}={phase}", "includeObject": "None"})
        table = json.loads(raw)
        names = [c["name"] for c in table.get("columnDefinitions") or []]
        at = {n: names.index(n) for n in ("Name", "Phase", "Ready") if n in names}
        return {str(row["cells"][at["Name"]]): (str(row["cells"][at["Phase"]] or ""),
                                                str(row["cells"][at["Ready"]] or ""))
                for row in table.get("rows") or []}

    def wait(self, phase: str, count: int, ok: Callable[[str, str], bool], timeout: float) -> str:
        """Until ``count`` servers labelled ``phase`` satisfy ``ok(phase, ready)``; says how many did and when."""
        began = time.monotonic()
        got: dict[str, tuple[str, str]] = {}
        while time.monotonic() - began < timeout and self.alive():
            got = self.statuses(phase)
            if sum(1 for p, r in got.values() if ok(p, r)) >= count:
                break
            time.sleep(2)
        met = sum(1 for p, r in got.values() if ok(p, r))
        phases = sorted({p for p, _ in got.values()})
        return f"{met}/{count} in {time.monotonic() - began:.0f} s (phases {', '.join(phases) or 'none'})"

    def writes(self) -> tuple[float, float]:
        """(status replaces, Event creates) the operator has sent so far (its ``ctxfit_api_requests_total``)."""
        text = operator_metrics.scrape(self.metrics_port)

        def total(verb: str, resource: str) -> float:
            return sum(float(v) for v in re.findall(
                rf'^ctxfit_api_requests_total\{{(?=[^}}]*verb="{verb}")(?=[^}}]*resource="{resource}")[^}}]*\}} '
                r"([0-9.e+]+)$", text, re.M))
        return total("PUT", "inferenceservers/status"), total("POST", "events")

    def alive(self) -> bool:
        return self.operator is not None and self.operator.poll() is None

    def record(self, phase: str, began: float, note: str) -> None:
        """Settle, then one row: RSS now and the peak so far."""
        self.done.wait(self.settle)
        assert self.operator is not None
        pid = self.operator.pid
        self.rows.append((phase, time.monotonic() - began, rss_mib(pid), peak_rss_mib(pid), note))
        row = self.rows[-1]
        print(f"[{time.monotonic() - self.began:5.0f} s] {phase}: RSS {row[2]:.0f} MiB, peak {row[3]:.0f} MiB "
              f"({row[1]:.0f} s; {note})", flush=True)
        if phase == self.until:
            raise _Enough

    def sample(self) -> None:
        while not self.done.wait(2):
            if self.operator is not None:
                self.series.append((time.monotonic() - self.began, self.phase, rss_mib(self.operator.pid)))

    def create_all(self, objects: list[tuple[Any, dict[str, Any]]]) -> None:
        with ThreadPoolExecutor(4) as pool:
            list(pool.map(lambda item: self.post(*item), objects))


def post_pod_events(bench: Bench, servers: list[str], stop_event: threading.Event) -> list[int]:
    """Every 2 s: 100 Warning Events of 4 KiB on each new pod of ``servers`` (as a noisy controller would).
    Returns [pods, Events posted] (filled while it runs)."""
    counts = [0, 0]
    seen: set[str] = set()

    def run() -> None:
        while not stop_event.wait(2):
            for name in servers:
                with contextlib.suppress(Exception):
                    pods = bench.rest.call_json("GET", PODS, bench.namespace,
                                                query={"labelSelector": f"{SERVER_LABEL}={name}"})
                    for pod in pods.get("items") or []:
                        meta = pod["metadata"]
                        if meta["name"] in seen:
                            continue
                        seen.add(meta["name"])
                        counts[0] += 1
                        for j in range(100):
                            bench.post(EVENTS, {
                                "apiVersion": "v1", "kind": "Event",
                                "metadata": {"generateName": f"{meta['name']}."},
                                "involvedObject": {"apiVersion": "v1", "kind": "Pod", "name": meta["name"],
                                                   "namespace": bench.namespace, "uid": meta["uid"]},
                                "reason": "BackOff", "type": "Warning", "count": 1,
                                "message": filler(4 * KIB, f"{meta['name']}-{j}"),
                                "firstTimestamp": "2026-12-02T00:00:00Z", "lastTimestamp": "2026-12-02T00:00:00Z",
                                "source": {"component": "bench"}})
                            counts[1] += 1

    threading.Thread(target=run, daemon=True).start()
    return counts


def events_per_cause(bench: Bench, servers: list[str]) -> str:
    """The operator's Events on ``servers`` by cause (reason + message): how many causes, the most per cause."""
    listed = bench.rest.call_json("GET", EVENTS, bench.namespace)
    causes: dict[tuple[str, str, str], int] = {}
    for event in listed.get("items") or []:
        involved = event.get("involvedObject") or {}
        if (event.get("source") or {}).get("component") == "bench" or involved.get("name") not in servers:
            continue
        key = (str(involved.get("name")), str(event.get("reason")), str(event.get("message")))
        causes[key] = causes.get(key, 0) + int(event.get("count") or 1)
    most = max(causes.values(), default=0)
    return f"the operator's Events on them: {len(causes)} causes, at most {most} per cause"


def run(bench: Bench, count: int, crashing: int, timeout: float) -> int:
    cluster, ns = bench.cluster, bench.namespace
    env = {**os.environ, "KUBECONFIG": str(cluster.kubeconfig)}
    kubectl = [str(Path(cluster.bin_dir) / "kubectl")]
    subprocess.run([*kubectl, "apply", "-f", str(ROOT / "crds" / "inferenceservers.ctxfit.io.yaml")], env=env,
                   check=True, capture_output=True)
    wait_established(bench.rest, f"{PLURAL}.{GROUP}")
    cluster.create_namespace(ns)
    gpus_needed = 2 * count + 4 + crashing  # baseline + largest + calibration + crashes, one H100 each
    extra = max(0, -(-(gpus_needed - 16) // 8))  # the default pool has 2 H100 nodes of 8
    cluster.add_nodes([cc.gpu_node(f"bench-h100-{i}", "h100", 8) for i in range(extra)])
    log_path = Path(f"/tmp/{ns}-operator.log")
    metrics_port = bench.metrics_port = cc.free_ports(1)[0]
    op_env = {**env, "CTXFIT_WATCH_NAMESPACES": ns, "CTXFIT_METRICS_PORT": str(metrics_port),
              "CTXFIT_HEALTH_PORT": "0", "CTXFIT_CALIBRATION_NAMESPACE": ns}
    if os.environ.get("CTXFIT_BENCH_OPERATOR_PATH"):  # another checkout's operator (a before/after pair)
        op_env["PYTHONPATH"] = os.environ["CTXFIT_BENCH_OPERATOR_PATH"]
    print(f"operator: {op_env.get('PYTHONPATH', 'this checkout')}", flush=True)
    with log_path.open("wb") as log:
        program = [str(ROOT / "bench" / "operator_trace.py")] if os.environ.get("CTXFIT_BENCH_TRACEMALLOC") \
            else ["-m", "ctxfit.controller"]  # operator_trace: top allocation sites, as reconcile_bench.py
        bench.operator = subprocess.Popen([sys.executable, *program], env=op_env, stdout=log,
                                          stderr=subprocess.STDOUT, start_new_session=True)
    threading.Thread(target=bench.sample, daemon=True).start()
    alive, facts = False, "ended"
    try:
        try:
            print(f"operator ready: {wait_ready(bench.operator, metrics_port):.1f} s after its start", flush=True)
            bench.record("idle", time.monotonic(), "no servers")

            def phase(name: str, objects: list[tuple[Any, dict[str, Any]]], wait: Callable[[], str]) -> None:
                bench.phase = name
                began = time.monotonic()
                bench.create_all(objects)
                created = time.monotonic() - began
                bench.record(name, began, f"{len(objects)} objects created in {created:.0f} s; {wait()}")

            ready = lambda p, r: p == "Ready"  # noqa: E731
            has_status = lambda p, r: bool(p)  # noqa: E731
            phase("baseline", [(SERVERS, server(f"base-{i:02d}", "baseline")) for i in range(count)],
                  lambda: "Ready " + bench.wait("baseline", count, ready, timeout))
            phase("specs", [(SERVERS, hostile_spec(i)) for i in range(count)],
                  lambda: "with a status " + bench.wait("specs", count, has_status, timeout))
            one = bench.rest.call_json("GET", SERVERS, ns, f"hostile-{0:02d}")
            refused = [f"{c['type']}={c['status']} {c.get('reason')}: {str(c.get('message'))[:120]}"
                       for c in (one.get("status") or {}).get("conditions") or [] if c.get("status") != "True"]
            said = "; ".join(refused)[:400]
            print(f"  hostile-00: phase {(one.get('status') or {}).get('phase')}; {said}", flush=True)
            del one

            bench.phase = "updates"
            began = time.monotonic()
            for round_ in range(3):
                def touch(i: int, round_: int = round_) -> None:
                    bench.rest.call("PATCH", SERVERS, ns, f"hostile-{i:02d}",
                                    content_type="application/merge-patch+json", body={"metadata": {"annotations": {
                                        "bench.ctxfit.io/pad": filler(64 * KIB, f"s{i}r{round_}")}}})
                with ThreadPoolExecutor(4) as pool:
                    list(pool.map(touch, range(count)))
            bench.record("updates", began, f"{3 * count} updates of ~1.2 MB servers")

            phase("largest", [(SERVERS, largest_valid(i)) for i in range(count)],
                  lambda: "Ready " + bench.wait("largest", count, ready, timeout))
            foreign = [item for i in range(count) for item in foreign_objects(i)]
            phase("foreign", foreign, lambda: f"{len(foreign)} labelled as the operator's")

            bench.phase = "calibration"
            began = time.monotonic()
            notes = []
            for k, (what, text) in enumerate(calibration_texts()):
                body = {"apiVersion": "v1", "kind": "ConfigMap",
                        "metadata": {"name": "ctxfit-calibration", "labels": {
                            "app.kubernetes.io/managed-by": "ctxfit", "app.kubernetes.io/component": "calibration"}},
                        "data": {"calibration.yaml": text}}
                existing = bench.rest.read(CONFIGMAPS, ns, "ctxfit-calibration")
                if existing is None:
                    bench.post(CONFIGMAPS, body)
                else:
                    body["metadata"]["resourceVersion"] = existing["metadata"]["resourceVersion"]
                    bench.rest.call("PUT", CONFIGMAPS, ns, "ctxfit-calibration", body=body)
                bench.create_all([(SERVERS, server(f"calib-{k}{i}", f"calibration-{k}")) for i in range(2)])
                notes.append(f"{what}: Ready " + bench.wait(f"calibration-{k}", 2, ready, timeout))
            bench.record("calibration", began, "; ".join(notes))

            bench.phase = "crashes"
            began = time.monotonic()
            line = "x" * (50 * MB)
            cluster.set_default_logs(line, line)
            del line
            names = [f"crash-{i}" for i in range(crashing)]
            pod = {"labels": {"sim.ctxfit.io/behavior": "crash"},
                   "annotations": {"sim.ctxfit.io/restart-delay-ms": "1000", "sim.ctxfit.io/message": "engine died"}}
            stop_events = threading.Event()
            counts = post_pod_events(bench, names, stop_events)
            status_before, events_before = bench.writes()
            bench.create_all([(SERVERS, server(n, "crashes", pod=pod)) for n in names])
            failing = bench.wait("crashes", crashing, lambda p, r: p in FAILING, timeout)
            bench.done.wait(20)  # more crash-loop passes: log tails and Events read again
            stop_events.set()
            status_after, events_after = bench.writes()
            minutes = (time.monotonic() - began) / 60
            print(f"  crash storm: {status_after - status_before:.0f} status writes = "
                  f"{(status_after - status_before) / crashing / minutes:.1f} per server per minute, "
                  f"{events_after - events_before:.0f} Events posted in {minutes:.1f} min; "
                  f"{events_per_cause(bench, names)}", flush=True)
            bench.record("crashes", began, f"stepping down or failed {failing}; {counts[1]} Events of 4 KiB on "
                                           f"{counts[0]} pods; logs of one 50 MB line")
        except _Enough:  # --until
            pass
        alive = bench.alive()
        facts = process_facts(bench.operator.pid) if alive else "ended"
    finally:
        bench.done.set()
        if bench.operator is not None:
            print(f"operator stop: {stop(bench.operator)}", flush=True)
        subprocess.run([*kubectl, "delete", "namespace", ns, "--wait=false"], env=env, capture_output=True)
    return report(bench, count, alive, facts, log_path)


def report(bench: Bench, count: int, alive: bool, facts: str, log_path: Path) -> int:
    base = next(r for r in bench.rows if r[0] == "baseline")
    load = Path("/proc/loadavg").read_text()[:14]
    print(f"\nThe operator's memory by phase ({count} servers per phase; load average {load})")
    print(f"{'phase':<12} {'RSS MiB':>8} {'vs baseline':>11} {'peak MiB':>9}")
    for name, _, rss, hwm, _ in bench.rows:
        print(f"{name:<12} {rss:>8.0f} {rss - base[2]:>+11.0f} {hwm:>9.0f}")
    end = bench.rows[-1]
    peak = max(r[3] for r in bench.rows)
    print(f"at the end: {facts}; operator log {log_path}")
    print("RSS every 2 s (s: phase MiB): " + ", ".join(f"{t:.0f}: {p} {m:.0f}" for t, p, m in bench.series[::5]))
    ok = alive and end[2] - base[2] <= TARGET_OVER_BASELINE_MIB and peak < TARGET_PEAK_MIB
    print(f"targets (RSS at the end within {TARGET_OVER_BASELINE_MIB:.0f} MiB of the baseline, peak < "
          f"{TARGET_PEAK_MIB:.0f} MiB, the operator alive):", "met" if ok else "NOT met")
    return 0 if ok else 1


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--count", type=int, default=20, help="servers (and foreign objects of each kind) per phase")
    parser.add_argument("--crashing", type=int, default=5, help="crash-looping servers in the last phase")
    parser.add_argument("--settle", type=float, default=10.0, help="seconds after each phase before reading memory")
    parser.add_argument("--timeout", type=float, default=240.0, help="seconds a phase may take")
    parser.add_argument("--until", choices=PHASES, default=PHASES[-1], help="stop after this phase")
    args = parser.parse_args()
    cluster = cc.Cluster(cc.temp_cluster_dir("ctxfit-hostile-"))
    try:
        print(f"local control plane up in {cluster.start(die_with_parent=True):.1f} s", flush=True)
        bench = Bench(cluster, args.settle)
        bench.until = args.until
        return run(bench, args.count, args.crashing, args.timeout)
    finally:
        cluster.stop()


if __name__ == "__main__":
    sys.exit(main())
