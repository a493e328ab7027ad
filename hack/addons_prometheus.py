"""Add-on: a real Prometheus (Debian's ``/usr/bin/prometheus``) on 127.0.0.1 for the local control plane.

``start_prometheus(cluster)`` runs Prometheus as one more harness process (recorded in the cluster's
state, so ``Cluster.stop`` and ``hack/cluster.py down`` stop it; log in ``logs/prometheus.log``) with:

- ``--web.listen-address=127.0.0.1:<free port>``, a data dir under the cluster's work dir
  (``prometheus-data/``, removed by ``stop_prometheus``), ``--web.enable-lifecycle`` (``POST /-/reload``);
- a 1 s scrape interval and 1 s scrape timeout (Prometheus rejects a timeout above the interval), so
  a value a test sets is queryable about a second later;
- job ``ctxfit-engines``: one shared fake engine endpoint (``engine_metrics_fixture.EngineMetrics``, served
  from this Python process) scraped with ``honor_labels: true``; ``Prometheus.engine_pod(...)`` gives a
  test one pod's series on it, target labels included, with no reload (values queryable within ~1 s);
- job ``ctxfit-engine-targets``: targets a test registers with ``Prometheus.add_target`` (real target
  labels): the config is rewritten and reloaded, then it waits until Prometheus scraped the target
  (~5 s: the discovery manager sends target updates at most every 5 s).

Target labels mirror what the chart's PodMonitor (``charts/ctxfit/templates/podmonitor.yaml``) gives an
engine pod's series through the Prometheus Operator: ``namespace``, ``pod``, ``container``,
``endpoint`` (the port name, ``http``) from the pod, and the relabelled ``server`` (label
``ctxfit.io/server``) and ``engine_kind`` (label ``ctxfit.io/engine``): ``engine_target_labels``.

The binary is ``$CTXFIT_PROMETHEUS`` or ``/usr/bin/prometheus`` (the ``prometheus`` Debian package that
.ci/run installs). HTTP API used: ``/-/ready``, ``/-/reload``, ``/api/v1/query``, ``/api/v1/targets``
(https://prometheus.io/docs/prometheus/latest/querying/api/).
"""

from __future__ import annotations

import ctypes
import json
import math
import os
import shutil
import signal
import subprocess
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any

import yaml
from addons_proc import stop_component
from ctxfit_cluster import Cluster, HarnessError, free_ports, log, wait_until
from engine_metrics_fixture import SGLANG_LABELS, VLLM_LABELS, EngineMetrics, EnginePod

PROMETHEUS_BINARY = os.environ.get("CTXFIT_PROMETHEUS", "/usr/bin/prometheus")
PROCESS_NAME = "prometheus"
SHARED_JOB = "ctxfit-engines"
TARGETS_JOB = "ctxfit-engine-targets"
SCRAPE_INTERVAL = "1s"


def prometheus_available() -> bool:
    """The Prometheus binary exists and is executable."""
    return os.access(PROMETHEUS_BINARY, os.X_OK)


def engine_target_labels(namespace: str, server: str, pod: str, engine_kind: str) -> dict[str, str]:
    """The target labels the chart's PodMonitor gives an engine pod's series.

    ``namespace``/``pod``/``container``/``endpoint`` are the Prometheus Operator's standard pod target labels
    (container ``engine``: ``ctxfit.render.deployment.CONTAINER_NAME``; port ``http``); ``server`` and
    ``engine_kind`` (``vllm``/``sglang``) come from the PodMonitor's relabelings.
    """
    return {"namespace": namespace, "pod": pod, "container": "engine", "endpoint": "http",
            "server": server, "engine_kind": engine_kind}


def _prctl_pdeathsig() -> Callable[[], None] | None:
    try:
        prctl = ctypes.CDLL(None, use_errno=True).prctl
    except (OSError, AttributeError):  # not Linux
        return None

    def set_pdeathsig() -> None:  # PR_SET_PDEATHSIG(SIGKILL): dies with the test run
        prctl(1, int(signal.SIGKILL))

    return set_pdeathsig


class Prometheus:
    """A running Prometheus: ``url``, ``add_target``/``remove_target``, ``query``/``query_value``/``wait_value``.

    Created by ``start_prometheus``; ``targets`` maps a scrape address (``"127.0.0.1:PORT"``) to its labels.
    """

    def __init__(self, cluster: Cluster, port: int, config_file: Path, data_dir: Path) -> None:
        self.cluster = cluster
        self.shared = EngineMetrics()
        self.port = port
        self.config_file = config_file
        self.data_dir = data_dir
        self.targets: dict[str, dict[str, str]] = {}

    @property
    def url(self) -> str:
        """Base URL, e.g. ``http://127.0.0.1:9090`` (a KEDA prometheus trigger's ``serverAddress``)."""
        return f"http://127.0.0.1:{self.port}"

    # ---- config
    def config(self) -> dict[str, Any]:
        """The Prometheus config for the current targets (one static_config per target, sorted)."""
        return {
            "global": {"scrape_interval": SCRAPE_INTERVAL, "scrape_timeout": SCRAPE_INTERVAL,
                       "evaluation_interval": SCRAPE_INTERVAL},
            "scrape_configs": [
                {"job_name": SHARED_JOB, "honor_labels": True, "metrics_path": "/metrics",
                 "static_configs": [{"targets": [self.shared.address]}]},
                {"job_name": TARGETS_JOB, "metrics_path": "/metrics",
                 "static_configs": [{"targets": [addr], "labels": labels}
                                    for addr, labels in sorted(self.targets.items())]},
            ],
        }

    def write_config(self) -> None:
        self.config_file.write_text(yaml.safe_dump(self.config(), sort_keys=False))

    def reload(self) -> None:
        """Rewrite the config and ``POST /-/reload`` (returns once Prometheus applied it).

        Raises:
            HarnessError: Prometheus rejected the config.
        """
        self.write_config()
        req = urllib.request.Request(f"{self.url}/-/reload", method="POST")
        try:
            with urllib.request.urlopen(req, timeout=10):
                pass
        except urllib.error.HTTPError as exc:
            raise HarnessError(f"prometheus reload failed: {exc.code} {exc.read().decode(errors='replace')}") from exc

    def wait_scraping(self, timeout: float = 30) -> None:
        """Wait until the shared engine endpoint has been scraped (~5 s after start: the discovery manager's
        first target update). Raises HarnessError after ``timeout`` seconds."""
        wait_until(lambda: self.target_health(self.shared.address) == "up", timeout,
                   f"prometheus to scrape the shared engine endpoint {self.shared.address}", interval=0.25)

    def engine_pod(self, namespace: str, server: str, pod: str, engine_kind: str,
                   engine_labels: dict[str, str] | None = None) -> EnginePod:
        """One engine pod's series on the shared endpoint, with the PodMonitor's target labels
        (``engine_target_labels``) and the engine's own labels (default ``VLLM_LABELS`` or ``SGLANG_LABELS``
        by ``engine_kind``). ``pod.set(name, value)``; ``pod.clear()`` when the pod is gone."""
        if engine_labels is None:
            engine_labels = SGLANG_LABELS if engine_kind == "sglang" else VLLM_LABELS
        return self.shared.pod(engine_target_labels(namespace, server, pod, engine_kind), engine_labels)

    def add_target(self, address: str, labels: dict[str, str], timeout: float = 30) -> None:
        """Scrape ``address`` (``host:port``, path ``/metrics``) with these target labels; waits until
        Prometheus has scraped it successfully (health ``up``).

        Raises:
            HarnessError: not scraped within ``timeout`` seconds (the last scrape error is in the message).
        """
        self.targets[address] = dict(labels)
        self.reload()
        wait_until(lambda: self.target_health(address) == "up", timeout,
                   f"prometheus to scrape {address} ({self._last_error(address)})", interval=0.25)

    def remove_target(self, address: str) -> None:
        """Stop scraping ``address`` (its series go stale). No error if it was not a target."""
        if self.targets.pop(address, None) is not None:
            self.reload()

    def _active_targets(self) -> list[dict[str, Any]]:
        data = self._api("/api/v1/targets", {"state": "active"})
        return list(data.get("activeTargets", []))

    def target_health(self, address: str) -> str | None:
        """``up``/``down``/``unknown`` for an active target, None if Prometheus does not have it."""
        for t in self._active_targets():
            if t.get("labels", {}).get("instance") == address or t.get("scrapeUrl", "").startswith(f"http://{address}/"):
                return str(t.get("health"))
        return None

    def _last_error(self, address: str) -> str:
        try:
            for t in self._active_targets():
                if t.get("scrapeUrl", "").startswith(f"http://{address}/"):
                    return str(t.get("lastError") or t.get("health"))
        except (HarnessError, OSError):
            pass
        return "not active yet"

    # ---- HTTP API
    def _api(self, path: str, params: dict[str, str]) -> dict[str, Any]:
        url = f"{self.url}{path}?{urllib.parse.urlencode(params)}"
        try:
            with urllib.request.urlopen(url, timeout=10) as r:
                text = r.read().decode()
        except urllib.error.HTTPError as exc:  # 400/422 carry the PromQL error as JSON
            text = exc.read().decode()
        try:
            body = json.loads(text)
        except ValueError:
            raise HarnessError(f"prometheus {path} {params}: not JSON: {text[:300]!r}") from None
        if body.get("status") != "success":
            raise HarnessError(f"prometheus {path} {params}: {body.get('errorType')}: {body.get('error')}")
        return dict(body["data"])

    def query(self, promql: str) -> list[tuple[dict[str, str], float]]:
        """Instant query (``/api/v1/query``): ``[(labels, value), ...]`` for a vector, ``[({}, value)]`` for a
        scalar. Raises HarnessError on a PromQL error."""
        data = self._api("/api/v1/query", {"query": promql})
        if data["resultType"] == "vector":
            return [(dict(s["metric"]), float(s["value"][1])) for s in data["result"]]
        if data["resultType"] == "scalar":
            return [({}, float(data["result"][1]))]
        raise HarnessError(f"prometheus query {promql!r}: unexpected result type {data['resultType']}")

    def query_value(self, promql: str) -> float | None:
        """The single value of a query; None for an empty vector. Raises HarnessError if several series."""
        result = self.query(promql)
        if not result:
            return None
        if len(result) > 1:
            raise HarnessError(f"prometheus query {promql!r} returned {len(result)} series: {result}")
        return result[0][1]

    def wait_value(
        self, promql: str, expected: float | None, timeout: float = 30, rel_tol: float = 1e-9
    ) -> float | None:
        """Poll ``query_value`` until it equals ``expected`` (``math.isclose`` with ``rel_tol``; None = empty
        vector); returns the value. Raises HarnessError after ``timeout`` seconds, naming the last value."""
        last: list[float | None] = [None]

        def matches() -> bool:
            last[0] = value = self.query_value(promql)
            if expected is None or value is None:
                return value is None and expected is None
            return math.isclose(value, expected, rel_tol=rel_tol, abs_tol=1e-12)

        try:
            wait_until(matches, timeout, f"{promql!r} == {expected}", interval=0.25)
        except HarnessError as exc:
            raise HarnessError(f"{exc} (last value: {last[0]})") from exc
        return last[0]


def start_prometheus(cluster: Cluster, timeout: float = 60) -> Prometheus:
    """Start Prometheus on 127.0.0.1 (a free port) as a harness process of ``cluster``; waits for ``/-/ready``
    (not for the first scrape: ``Prometheus.wait_scraping``).

    Raises:
        HarnessError: the binary is missing, or Prometheus exited or was not ready within ``timeout`` s.
    """
    if not prometheus_available():
        raise HarnessError(f"{PROMETHEUS_BINARY} missing: apt-get install prometheus (.ci/run does)")
    (port,) = free_ports(1)
    data_dir = cluster.work_dir / "prometheus-data"
    shutil.rmtree(data_dir, ignore_errors=True)
    data_dir.mkdir(parents=True)
    prom = Prometheus(cluster, port, cluster.work_dir / "prometheus.yml", data_dir)
    prom.shared.start()
    prom.write_config()
    args = [PROMETHEUS_BINARY, f"--config.file={prom.config_file}", f"--storage.tsdb.path={data_dir}",
            f"--web.listen-address=127.0.0.1:{port}", "--web.enable-lifecycle",
            "--storage.tsdb.retention.time=1h", "--log.level=info"]
    cluster.logs_dir.mkdir(parents=True, exist_ok=True)
    with open(cluster.logs_dir / f"{PROCESS_NAME}.log", "ab") as logf:
        proc = subprocess.Popen(args, stdin=subprocess.DEVNULL, stdout=logf, stderr=subprocess.STDOUT,
                                cwd=cluster.work_dir, start_new_session=True,
                                preexec_fn=_prctl_pdeathsig() if cluster._die_with_parent else None)
    cluster._procs[PROCESS_NAME] = proc
    cluster.state.setdefault("processes", {})[PROCESS_NAME] = {"pid": proc.pid, "pgid": proc.pid,
                                                               "exe": PROMETHEUS_BINARY}
    cluster.state.setdefault("ports", {})["prometheus"] = port
    cluster._save_state()

    def ready() -> bool:
        cluster._check_alive(PROCESS_NAME)
        try:
            with urllib.request.urlopen(f"{prom.url}/-/ready", timeout=2) as r:
                return bool(r.status == 200)
        except (urllib.error.URLError, OSError):
            return False

    try:
        wait_until(ready, timeout, f"prometheus ready at {prom.url}")
    except HarnessError:
        stop_prometheus(cluster, prom)
        raise
    log(f"prometheus up at {prom.url}")
    return prom


def stop_prometheus(cluster: Cluster, prom: Prometheus | None = None, grace: float = 8.0) -> None:
    """Stop the Prometheus process this harness started, its shared engine endpoint and remove its data dir."""
    stop_component(cluster, PROCESS_NAME, grace)
    cluster.state.get("ports", {}).pop("prometheus", None)
    if prom is not None:
        prom.shared.stop()
        shutil.rmtree(prom.data_dir, ignore_errors=True)
