"""Autoscaling fixtures: a real Prometheus and the real KEDA operator on the session's local cluster.

Import the fixtures into a test module (as with test_operator_kit)::

    from .autoscaling_kit import engine_pod, keda, prometheus  # noqa: F401 - fixtures

- ``prometheus`` (session): ``addons_prometheus.Prometheus`` on 127.0.0.1, 1 s scrapes. ``.url`` is a
  prometheus trigger's ``serverAddress``; ``.query(promql)``, ``.query_value(promql)``,
  ``.wait_value(promql, expected, timeout=30)``; ``.add_target(address, labels)`` for a separate endpoint.
- ``engine_pod`` (function): a factory ``engine_pod(namespace, server, pod, engine_kind="vllm",
  engine_labels=None) -> engine_metrics_fixture.EnginePod``; ``.set(metric, value)``/``.remove(metric)``/
  ``.clear()``. Its series carry the chart PodMonitor's labels (``namespace``, ``pod``, ``container``,
  ``endpoint``, ``server``, ``engine_kind``) plus the engine's own (``model_name`` and ``engine``/``tp_rank``).
  Cleared after the test.
- ``keda`` (session): ``addons_keda.KedaOperator`` (the operator runs, its CRDs are installed);
  ``.scaler_metric(namespace, scaled_object, trigger_index=0)`` is what its scale loop last read.

A missing binary fails the test (``make test`` builds KEDA through hack/k8s-bins.sh; .ci/run installs
Debian's prometheus): these fixtures never skip.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from addons_keda import KEDA_BINARY, KedaOperator, keda_available, start_keda, stop_keda
from addons_proc import stop_component
from addons_prometheus import (
    PROCESS_NAME,
    PROMETHEUS_BINARY,
    Prometheus,
    prometheus_available,
    start_prometheus,
    stop_prometheus,
)
from engine_metrics_fixture import EnginePod

from .conftest import report


@pytest.fixture(scope="session")
def prometheus(cluster: Any) -> Iterator[Prometheus]:
    """A Prometheus for the session (scrapes the shared fake engine endpoint); stopped at the end."""
    if not prometheus_available():
        pytest.fail(f"{PROMETHEUS_BINARY} missing: apt-get install prometheus (.ci/run does)")
    stop_component(cluster, PROCESS_NAME)  # one left over by a crashed session on a reused cluster
    t0 = time.monotonic()
    prom = start_prometheus(cluster)
    prom.wait_scraping()
    report(f"ctxfit e2e harness: Prometheus up and scraping in {time.monotonic() - t0:.1f} s ({prom.url})")
    yield prom
    stop_prometheus(cluster, prom)


@pytest.fixture(scope="session")
def keda(cluster: Any) -> Iterator[KedaOperator]:
    """The KEDA operator for the session (CRDs installed); stopped at the end."""
    if not keda_available(cluster):
        pytest.fail(f"{KEDA_BINARY} not built: run bash hack/k8s-bins.sh (make test does)")
    stop_component(cluster, KEDA_BINARY)  # one left over by a crashed session on a reused cluster
    t0 = time.monotonic()
    operator = start_keda(cluster)
    report(f"ctxfit e2e harness: KEDA operator ready in {time.monotonic() - t0:.1f} s (CRDs included)")
    yield operator
    stop_keda(cluster)


@pytest.fixture
def engine_pod(prometheus: Prometheus) -> Iterator[Callable[..., EnginePod]]:
    """Factory of fake engine pods' metrics on the session's Prometheus; their series go away afterwards."""
    made: list[EnginePod] = []

    def make(namespace: str, server: str, pod: str, engine_kind: str = "vllm",
             engine_labels: dict[str, str] | None = None) -> EnginePod:
        p = prometheus.engine_pod(namespace, server, pod, engine_kind, engine_labels)
        made.append(p)
        return p

    yield make
    for p in made:
        p.clear()
