"""Issue 28 ("done when"): the operator's bounds under the failure storms, printed.

In-process: the full ``reconcile`` over the test suite's fake API server (tests/unit/controller/kube/fakeapi.py; both
client stacks go through it) with a fake clock, so counts of Events, status writes and tries are exact and minutes of
storm take seconds; memory is this process's (tracemalloc peak of the reads, and RSS). The real-cluster side of the
same bounds is in tests/e2e/test_faults_bounds.py and test_faults_calibration.py.

Storms (each for ``--minutes`` of clock, a pass every second, as a storm of watch events causes them):
1. a foreign Service under the server's name (the issue's ``billing``);
2. growing the weights claim on a StorageClass that cannot expand (512 Events in 30 s before);
3. every Deployment write refused by a quota (403);
and reads of hostile input:
4. the calibration ConfigMap: ``.inf`` entries (stopped every reconcile before) and a table at the size bound
   (a 1 MiB one cost 8.5 s per parse before): parse time, one planning pass through it;
5. engine logs of one 50 MB line, five read at once (+75 MiB per log before): peak bytes held by the reads.

``python3 bench/storm_bounds.py [--minutes 15]``. Prints one line per figure and its bound.
"""

from __future__ import annotations

import argparse
import json
import resource
import sys
import threading
import time
import tracemalloc
from collections import Counter
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "operator"))

from ctxfit.controller.kube.calibration import MAX_TABLE_BYTES, CalibrationStore, fit  # noqa: E402
from ctxfit.controller.kube.claims import ClaimsApi  # noqa: E402
from ctxfit.controller.kube.client import LOG_TAIL_BYTES, Kube  # noqa: E402
from ctxfit.controller.reconcile import Runtime, reconcile  # noqa: E402
from ctxfit.controller.reconcile import passes as reconcile_module  # noqa: E402
from ctxfit.controller.settings import Settings  # noqa: E402
from ctxfit.controller.telemetry.metrics import Metrics  # noqa: E402

from tests.unit.controller.kube.fakeapi import FakeApiServer, Response, status_response  # noqa: E402
from tests.unit.controller.test_ownership_property import H100, NS, SERVED, UID, child, spec  # noqa: E402

NAME = "billing"
KEY = ("ctxfit.io", "inferenceservers", NS, NAME)
MIB = 1 << 20


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def world() -> FakeApiServer:
    api = FakeApiServer(served=SERVED)
    api.put("storage.k8s.io", "storageclasses", "", {"metadata": {"name": "standard", "annotations": {
        "storageclass.kubernetes.io/is-default-class": "true"}}, "allowVolumeExpansion": False})
    api.put("ctxfit.io", "inferenceservers", NS, {"apiVersion": "ctxfit.io/v1alpha1", "kind": "InferenceServer",
                                                  "metadata": {"name": NAME, "uid": UID}, "spec": spec(
                                                      nodes=1, autoscaling=False, retain=False,
                                                      storage_class="standard")})
    return api


def runtime(api: FakeApiServer, calibration: bool = False) -> Runtime:
    kube = Kube(api.api_client(), instance="bench")
    cfg = Settings(metrics_port=0, health_port=0, calibration_configmap="ctxfit-calibration" if calibration else "",
                   backoff_seconds=0)
    rt = Runtime(settings=cfg, kube=kube, metrics=Metrics(), claims=ClaimsApi(kube))
    if calibration:
        rt.calibration = CalibrationStore(kube, "ctxfit-system", "ctxfit-calibration")
    return rt


def storm(api: FakeApiServer, rt: Runtime, clock: Clock, minutes: float) -> dict[str, Any]:
    start_writes = len(api.writes())
    start_events = sum(1 for k in api.objects if k[1] == "events")
    passes, end = 0, clock.now + minutes * 60
    while clock.now < end:
        reconcile(rt, NS, NAME, H100[:1], ())
        clock.now += 1.0
        passes += 1
    writes = api.writes()[start_writes:]
    events = Counter((o["reason"], o["message"]) for k, o in api.objects.items() if k[1] == "events")
    return {"passes": passes, "events": sum(events.values()) - start_events, "causes": len(events),
            "max_per_cause": max(events.values(), default=0),
            "reasons": dict(Counter(reason for reason, _ in events.elements())),
            "status_writes": sum(1 for r in writes if r.key == KEY and r.method == "PUT"),
            "child_writes": sum(1 for r in writes if r.key[1] not in ("events", "inferenceservers"))}


def report(name: str, figures: dict[str, Any], minutes: float, bound_status_per_min: float) -> None:
    per_min = figures["status_writes"] / minutes
    print(f"{name}: {figures['passes']} passes in {minutes:.0f} min; Events {figures['events']} "
          f"({figures['causes']} causes, at most {figures['max_per_cause']} per cause; bound 1 per cause per hour); "
          f"status writes {figures['status_writes']} = {per_min:.2f}/min (bound {bound_status_per_min}/min); "
          f"child write tries {figures['child_writes']} (backoff 10 s doubling to 300 s); Events by reason "
          f"{figures['reasons']}")


def resize_forbidden(method: str, key: tuple[str, str, str, str], body: Any, stored: Any) -> Response | None:
    if key[1] == "persistentvolumeclaims" and method == "PATCH" and stored is not None and \
            "resources" in json.dumps(body):
        return status_response(403, 'persistentvolumeclaims "billing-weights" is forbidden: only dynamically '
                               "provisioned pvc can be resized and the storageclass that provisions the pvc must "
                               "support resize", key[3], "Forbidden")
    return None


def quota(method: str, key: tuple[str, str, str, str], body: Any, stored: Any) -> Response | None:
    if key[1] == "deployments" and method in ("POST", "PATCH"):
        return status_response(403, 'deployments "billing" is forbidden: exceeded quota: no-more', key[3],
                               "Forbidden")
    return None


def calibration_figures() -> None:
    from ctxfit.budget.calibrate import CalibrationKey, CalibrationTable, Sample

    table = CalibrationTable()
    for i in range(64):
        key = CalibrationKey("vllm", "0.19", f"GPU-{i:02d}", 1, 1)
        for j in range(20):
            table.add(key, Sample(f"{'u' * 36}-{i}/{j}", "n" * 40 + "/" + "s" * 60, -(1 << 30), 1 << 36, 1 << 36,
                                  f"2026-12-01T00:{i:02d}:{j:02d}Z", 80 << 30, 81 << 30))
    text = fit(table)
    hostile = "".join(f"- {{engine: vllm, version: '0.19', gpu: x{i}, tp: 1, pp: 1, samples: [{{id: a{i}, "
                      f"residualBytes: .inf}}]}}\n" for i in range(200))
    api = world()
    labels = {"app.kubernetes.io/managed-by": "ctxfit", "app.kubernetes.io/component": "calibration"}
    for label, data in (("at the size bound", text), (".inf entries", "entries:\n" + hostile),
                        ("over the size bound (1 MiB)", text + "#" + "x" * MIB)):
        api.put("", "configmaps", "ctxfit-system", {"metadata": {"name": "ctxfit-calibration", "labels": labels},
                                                     "data": {"calibration.yaml": data}})
        rt = runtime(api, calibration=True)
        assert rt.calibration is not None
        started = time.perf_counter()
        got = rt.calibration.table()
        parse = time.perf_counter() - started
        started = time.perf_counter()
        reconcile(rt, NS, NAME, H100[:1], ())
        plan = time.perf_counter() - started
        planned = ((api.objects[KEY].get("status") or {}).get("plan") or {}).get("fits")
        print(f"calibration ConfigMap {label} ({len(data.encode()) / 1024:.0f} KiB): read+validate {parse:.3f} s "
              f"(once per resourceVersion), {len(got.entries)} keys used, {got.problem_count} problems; a planning "
              f"pass through it {plan:.3f} s, planned={planned}")
    print(f"  bound: text read and written at most {MAX_TABLE_BYTES // 1024} KiB, 64 keys, 20 samples per key")


class HugeLog(FakeApiServer):
    """Answers every log read with one line of ``size`` bytes, streamed in chunks (the fake holds none of it)."""

    size = 50 * MIB

    def request(self, method: str, url: str, body: Any = None, headers: dict[str, str] | None = None,
                **kw: Any) -> Any:
        if "/log" not in url:
            return super().request(method, url, body, headers, **kw)
        size = self.size

        class Stream(Response):
            def __init__(self) -> None:
                super().__init__(200, "")
                self.headers = {"Content-Type": "text/plain"}

            def read(self) -> bytes:
                return b"x" * size

            def stream(self, amount: int, decode_content: bool = True) -> Any:
                chunk = b"x" * amount
                for _ in range(size // amount):
                    yield chunk

        return Stream()


def log_figures() -> None:
    api = HugeLog()
    kube = Kube(api.api_client(), instance="bench")
    tracemalloc.start()
    threads = [threading.Thread(target=kube.log_tail, args=(NS, f"pod-{i}", "engine"),
                                kwargs={"previous": True, "lines": 200}) for i in range(5)]
    rss_before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    rss_after = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    print(f"engine logs of one 50 MB line, 5 read at once: peak {peak / MIB:.1f} MiB held by the reads "
          f"(bound {5 * 3 * LOG_TAIL_BYTES / MIB:.1f} MiB: 3 x {LOG_TAIL_BYTES // 1024} KiB per read); process peak "
          f"RSS {rss_after / 1024:.0f} MiB (+{(rss_after - rss_before) / 1024:.0f} MiB)")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--minutes", type=float, default=15.0)
    args = parser.parse_args()
    clock = Clock()
    reconcile_module.time.monotonic = clock  # type: ignore[attr-defined]
    print(f"storm bounds (in-process, fake API server, fake clock; load average {open('/proc/loadavg').read()[:14]})")  # noqa: SIM115

    api = world()
    api.put("", "services", NS, child("service", NAME, "none"))
    report("foreign Service 'billing'", storm(api, runtime(api), clock, args.minutes), args.minutes, 1)

    api = world()
    api.refuse = resize_forbidden
    rt = runtime(api)
    storm(api, rt, clock, 0.1)
    claim = api.get("", "persistentvolumeclaims", NS, f"{NAME}-weights")
    if claim is not None:
        claim["status"] = {"phase": "Bound", "capacity": claim["spec"]["resources"]["requests"]}
    api.objects[KEY]["spec"]["model"]["cache"]["volumeClaimTemplate"]["size"] = "900Gi"
    api.objects[KEY]["metadata"]["generation"] = 2
    report("claim growth refused (class cannot expand)", storm(api, rt, clock, args.minutes), args.minutes, 1)

    api = world()
    api.refuse = quota
    report("Deployment refused by quota (403)", storm(api, runtime(api), clock, args.minutes), args.minutes, 1)

    reconcile_module.time.monotonic = time.monotonic  # type: ignore[attr-defined]
    calibration_figures()
    log_figures()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
