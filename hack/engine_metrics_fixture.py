"""A fake inference-engine ``/metrics`` endpoint whose series the test sets (Prometheus text format).

One ``EngineMetrics`` is one engine pod's metrics port: an HTTP server on 127.0.0.1 (a free port, a
daemon thread) that serves ``GET /metrics`` from a ``prometheus_client`` registry. The series are gauges
with any label set, e.g.::

    with EngineMetrics() as pod:
        pod.set("vllm:kv_cache_usage_perc", 0.42, model_name="m", engine="0")
        pod.set("vllm:num_requests_waiting", 3, model_name="m", engine="0")
        pod.remove("vllm:num_requests_waiting", model_name="m", engine="0")   # Prometheus marks it stale

Metric names and their usual engine labels (the names ctxfit's engines list: ``ctxfit.engines.vllm``
``kv_usage_metrics``/``waiting_metric``, ``ctxfit.engines.sglang`` likewise):

- vLLM: ``vllm:kv_cache_usage_perc`` (older ``vllm:gpu_cache_usage_perc``), ``vllm:num_requests_waiting``;
  labels ``model_name``, ``engine`` (the engine-core index) — see ``VLLM_LABELS``;
- SGLang: ``sglang:token_usage``, ``sglang:num_queue_reqs``; labels ``model_name``, ``tp_rank`` —
  see ``SGLANG_LABELS``.

Target labels (``namespace``, ``pod``, ``server``, ``engine_kind``...) come from the scrape target on a
cluster (the chart's PodMonitor). Two ways to get them here (``addons_prometheus``):

- ``EnginePod``: a view of one shared endpoint that puts the target labels on the series themselves;
  Prometheus scrapes that endpoint with ``honor_labels: true``, so the stored series carry exactly those
  labels, with no reload (a value set is queryable within ~1 s). The usual way in tests;
- one ``EngineMetrics`` per pod registered with ``Prometheus.add_target(address, labels)``: real target
  labels, at the cost of a config reload (~5 s: Prometheus's discovery manager sends target updates at
  most every 5 s).
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.exposition import CONTENT_TYPE_LATEST
from prometheus_client.metrics_core import Metric
from prometheus_client.registry import Collector

VLLM_LABELS = {"model_name": "m", "engine": "0"}
SGLANG_LABELS = {"model_name": "m", "tp_rank": "0"}
HELP = "set by the test (hack/engine_metrics_fixture.py)"

SeriesKey = tuple[str, tuple[tuple[str, str], ...]]


class _Series(Collector):
    """A collector over a dict (metric name, sorted labels) -> value; gauges, any label set per sample."""

    def __init__(self) -> None:
        self.values: dict[SeriesKey, float] = {}
        self.lock = threading.Lock()

    def collect(self) -> Iterator[Metric]:
        with self.lock:
            items = sorted(self.values.items())
        families: dict[str, Metric] = {}
        for (name, labels), value in items:
            family = families.setdefault(name, Metric(name, HELP, "gauge"))
            family.add_sample(name, dict(labels), value)
        yield from families.values()


class EngineMetrics:
    """One fake engine metrics endpoint on 127.0.0.1; ``set``/``remove`` series, ``stop`` when done.

    Attributes after ``start()`` (or entering the context): ``port`` (int), ``address`` (``"127.0.0.1:PORT"``,
    the scrape target), ``url`` (``http://127.0.0.1:PORT/metrics``).
    """

    def __init__(self) -> None:
        self._series = _Series()
        self.registry = CollectorRegistry(auto_describe=False)
        self.registry.register(self._series)
        self._server: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None
        self.scrapes = 0

    @property
    def port(self) -> int:
        if self._server is None:
            raise RuntimeError("EngineMetrics not started")
        return int(self._server.server_address[1])

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    @property
    def url(self) -> str:
        return f"http://{self.address}/metrics"

    def start(self) -> EngineMetrics:
        """Bind a free port on 127.0.0.1 and serve in a daemon thread; returns self."""
        fixture = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                if self.path.split("?", 1)[0] != "/metrics":
                    self.send_error(404)
                    return
                body = generate_latest(fixture.registry)
                fixture.scrapes += 1
                self.send_response(200)
                self.send_header("Content-Type", CONTENT_TYPE_LATEST)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, format: str, *args: Any) -> None:
                pass

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, name=f"engine-metrics-{self.port}",
                                        daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop serving and close the port (idempotent)."""
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None
        if self._thread is not None:
            self._thread.join(timeout=5)
            self._thread = None

    def __enter__(self) -> EngineMetrics:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    @staticmethod
    def _key(name: str, labels: dict[str, str]) -> SeriesKey:
        return name, tuple(sorted((k, str(v)) for k, v in labels.items()))

    def set(self, name: str, value: float, **labels: str) -> None:
        """Set gauge ``name{labels}`` to ``value`` (created if new). Raises ValueError on a bad metric name."""
        Metric(name, HELP, "gauge")  # validates the name (colons allowed, as in vllm:... and sglang:...)
        with self._series.lock:
            self._series.values[self._key(name, labels)] = float(value)

    def remove(self, name: str, **labels: str) -> None:
        """Stop serving ``name{labels}`` (Prometheus marks it stale at the next scrape). No error if absent."""
        with self._series.lock:
            self._series.values.pop(self._key(name, labels), None)

    def clear(self) -> None:
        """Serve no series at all."""
        with self._series.lock:
            self._series.values.clear()

    def clear_matching(self, **labels: str) -> None:
        """Stop serving every series whose labels include all of ``labels``."""
        want = {(k, str(v)) for k, v in labels.items()}
        with self._series.lock:
            for key in [k for k in self._series.values if want <= set(k[1])]:
                del self._series.values[key]

    def pod(self, target_labels: dict[str, str], engine_labels: dict[str, str] | None = None) -> EnginePod:
        """A view of this endpoint as one engine pod's series (see ``EnginePod``)."""
        return EnginePod(self, target_labels, engine_labels or {})

    def text(self) -> str:
        """The current exposition text (what a scrape returns)."""
        return generate_latest(self.registry).decode()


class EnginePod:
    """One engine pod's series inside a shared ``EngineMetrics`` endpoint scraped with ``honor_labels``.

    Every series gets ``target_labels`` (what a PodMonitor target would add: ``namespace``, ``pod``,
    ``server``, ``engine_kind``...) plus ``engine_labels`` (the engine's own, e.g. ``VLLM_LABELS``);
    keyword labels given to ``set``/``remove`` replace ``engine_labels`` for that call.
    """

    def __init__(self, endpoint: EngineMetrics, target_labels: dict[str, str], engine_labels: dict[str, str]) -> None:
        self.endpoint = endpoint
        self.target_labels = dict(target_labels)
        self.engine_labels = dict(engine_labels)

    def labels(self, **labels: str) -> dict[str, str]:
        """The full label set of a series of this pod."""
        return {**(labels or self.engine_labels), **self.target_labels}

    def set(self, name: str, value: float, **labels: str) -> None:
        """Set ``name`` for this pod to ``value``."""
        self.endpoint.set(name, value, **self.labels(**labels))

    def remove(self, name: str, **labels: str) -> None:
        """Stop serving ``name`` for this pod."""
        self.endpoint.remove(name, **self.labels(**labels))

    def clear(self) -> None:
        """Stop serving every series of this pod (as if the pod went away)."""
        self.endpoint.clear_matching(**self.target_labels)
