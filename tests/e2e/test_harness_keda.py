"""The autoscaling add-ons of the harness: a real Prometheus scraping fake engine metrics, and
the real KEDA operator (built from the Go module proxy by hack/keda-bins.sh) accepting a ScaledObject
whose prometheus trigger queries that Prometheus. No ctxfit operator here: a hand-written ScaledObject
targets a plain Deployment (kwok runs its pods)."""

from __future__ import annotations

import uuid
from typing import Any

import ctxfit_cluster as cc
import pytest
from addons_keda import SCALEDOBJECTS, KedaOperator, hpa_name
from addons_prometheus import TARGETS_JOB, Prometheus, engine_target_labels
from engine_metrics_fixture import VLLM_LABELS, EngineMetrics

IMAGE = "ghcr.io/ctxfit/fake-engine:sim"  # never pulled: kwok runs no containers
POD_MONITOR_LABELS = {"namespace", "pod", "container", "endpoint", "server", "engine_kind"}


def kv_query(namespace: str, server: str, metric: str = "vllm:kv_cache_usage_perc") -> str:
    return f'max({metric}{{namespace="{namespace}",server="{server}"}})'


# (engine kind, metric, low value, high value): both vLLM KV names, vLLM's queue, SGLang's KV and queue
SERIES = [
    ("vllm", "vllm:kv_cache_usage_perc", 0.12, 0.91),
    ("vllm", "vllm:gpu_cache_usage_perc", 0.2, 0.85),
    ("vllm", "vllm:num_requests_waiting", 0, 17),
    ("sglang", "sglang:token_usage", 0.05, 0.93),
    ("sglang", "sglang:num_queue_reqs", 1, 42),
]


@pytest.mark.parametrize(("engine_kind", "metric", "low", "high"), SERIES, ids=[s[1] for s in SERIES])
def test_prometheus_scrapes_the_values_the_test_sets(
    prometheus: Prometheus, engine_pod: Any, namespace: str, engine_kind: str, metric: str, low: float, high: float
) -> None:
    server = f"srv-{engine_kind}"
    pod = engine_pod(namespace, server, f"{server}-0", engine_kind)
    query = kv_query(namespace, server, metric)
    pod.set(metric, low)
    assert prometheus.wait_value(query, low) == low
    pod.set(metric, high)
    assert prometheus.wait_value(query, high) == high
    ((labels, value),) = prometheus.query(f'{metric}{{namespace="{namespace}"}}')
    assert value == high
    assert {k: labels[k] for k in POD_MONITOR_LABELS} == engine_target_labels(namespace, server, f"{server}-0",
                                                                              engine_kind)
    pod.clear()
    assert prometheus.wait_value(query, None) is None, "a pod's series go stale when it stops serving them"


def test_two_pods_of_one_server_aggregate(prometheus: Prometheus, engine_pod: Any, namespace: str) -> None:
    a = engine_pod(namespace, "kimi", "kimi-a")
    b = engine_pod(namespace, "kimi", "kimi-b")
    a.set("vllm:num_requests_waiting", 3)
    b.set("vllm:num_requests_waiting", 5)
    query = f'sum(vllm:num_requests_waiting{{namespace="{namespace}",server="kimi"}})'
    assert prometheus.wait_value(query, 8) == 8
    b.clear()
    assert prometheus.wait_value(query, 3) == 3


def test_a_separate_target_gets_real_target_labels(prometheus: Prometheus, namespace: str) -> None:
    with EngineMetrics() as endpoint:
        endpoint.set("vllm:kv_cache_usage_perc", 0.33, **VLLM_LABELS)
        labels = engine_target_labels(namespace, "solo", "solo-0", "vllm")
        prometheus.add_target(endpoint.address, labels)
        try:
            assert prometheus.wait_value(kv_query(namespace, "solo"), 0.33) == 0.33
            ((series, _),) = prometheus.query(f'vllm:kv_cache_usage_perc{{namespace="{namespace}"}}')
            assert series["job"] == TARGETS_JOB and series["instance"] == endpoint.address
            assert {k: series[k] for k in labels} == labels
            assert endpoint.scrapes > 0
        finally:
            prometheus.remove_target(endpoint.address)


def deployment(name: str, replicas: int) -> dict[str, Any]:
    labels = {"app": name}
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": name, "labels": labels},
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": labels},
            "template": {"metadata": {"labels": labels},
                         "spec": {"containers": [{"name": "engine", "image": IMAGE}],
                                  "terminationGracePeriodSeconds": 0}},
        },
    }


def scaled_object(name: str, target: str, server_address: str, query: str, *, min_replicas: int,
                  max_replicas: int, threshold: str, cooldown_seconds: int = 300) -> dict[str, Any]:
    """A ScaledObject with one prometheus trigger (https://keda.sh/docs/2.20/scalers/prometheus/); polled
    every second; ``cooldown_seconds`` (KEDA's default 300) before an inactive target goes to 0."""
    return {
        "apiVersion": "keda.sh/v1alpha1",
        "kind": "ScaledObject",
        "metadata": {"name": name},
        "spec": {
            "scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": target},
            "minReplicaCount": min_replicas,
            "maxReplicaCount": max_replicas,
            "pollingInterval": 1,
            "cooldownPeriod": cooldown_seconds,
            "triggers": [{"type": "prometheus", "name": "kv-cache",
                          "metadata": {"serverAddress": server_address, "query": query, "threshold": threshold}}],
        },
    }


def conditions(obj: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {c["type"]: c for c in obj.get("status", {}).get("conditions", [])}


def test_keda_accepts_a_prometheus_scaled_object(
    cluster: Any, keda: KedaOperator, prometheus: Prometheus, engine_pod: Any, namespace: str
) -> None:
    server = f"kimi-{uuid.uuid4().hex[:4]}"
    pod = engine_pod(namespace, server, f"{server}-0")
    pod.set("vllm:kv_cache_usage_perc", 0.42)
    query = kv_query(namespace, server)
    assert prometheus.wait_value(query, 0.42) == 0.42

    cluster.apply(deployment(server, replicas=1), namespace=namespace)
    cluster.apply(scaled_object(server, server, prometheus.url, query, min_replicas=2, max_replicas=5,
                                threshold="0.78"), namespace=namespace)
    group, _, plural = SCALEDOBJECTS

    def ready() -> dict[str, Any] | None:
        so = cluster.kubectl_json("get", f"{plural}.{group}", server, "-n", namespace)
        return so if conditions(so).get("Ready", {}).get("status") == "True" else None

    so = cc.wait_until(ready, 120, f"ScaledObject {server} Ready (KEDA log: {keda.log_path})")
    assert conditions(so)["Ready"]["reason"] == "ScaledObjectReady"
    assert so["status"]["hpaName"] == hpa_name(server)
    assert so["status"]["scaleTargetKind"] == "apps/v1.Deployment"

    hpa = cluster.kubectl_json("get", "hpa", hpa_name(server), "-n", namespace)
    assert hpa["spec"]["minReplicas"] == 2 and hpa["spec"]["maxReplicas"] == 5
    assert hpa["spec"]["scaleTargetRef"] == {"apiVersion": "apps/v1", "kind": "Deployment", "name": server}
    (metric,) = hpa["spec"]["metrics"]
    assert metric["type"] == "External"
    assert metric["external"]["target"] == {"type": "AverageValue", "averageValue": "780m"}
    owner = hpa["metadata"]["ownerReferences"][0]
    assert (owner["kind"], owner["name"]) == ("ScaledObject", server)
    # Without KEDA's metrics apiserver the HPA cannot read the trigger, but it still enforces its bounds
    cc.wait_until(lambda: cluster.kubectl_json("get", "deployment", server, "-n", namespace)["spec"]["replicas"] == 2,
                  120, "the HPA to raise the Deployment to minReplicas")

    # KEDA's scale loop evaluates the trigger query against the real Prometheus every pollingInterval
    cc.wait_until(lambda: keda.scaler_metric(namespace, server) == 0.42, 90, "KEDA to read 0.42 from Prometheus")
    pod.set("vllm:kv_cache_usage_perc", 0.91)
    cc.wait_until(lambda: keda.scaler_metric(namespace, server) == 0.91, 90, "KEDA to read 0.91 from Prometheus")
    so = cluster.kubectl_json("get", f"{plural}.{group}", server, "-n", namespace)
    assert conditions(so)["Active"]["status"] == "True", "a value above activationThreshold (0) is active"

    cluster.kubectl("delete", f"{plural}.{group}", server, "-n", namespace, "--wait=true", timeout=60)
    cc.wait_until(lambda: cluster.kubectl_proc("get", "hpa", hpa_name(server), "-n", namespace).returncode != 0,
                  30, "KEDA to delete its HPA with the ScaledObject")


def replicas(cluster: Any, namespace: str, name: str) -> int:
    return int(cluster.kubectl_json("get", "deployment", name, "-n", namespace)["spec"]["replicas"])


def test_keda_scales_to_zero_and_back_on_the_prometheus_value(
    cluster: Any, keda: KedaOperator, prometheus: Prometheus, engine_pod: Any, namespace: str
) -> None:
    """KEDA's own scale loop (not the HPA) moves a ``minReplicaCount: 0`` target between 0 and 1 on the
    trigger's activation (value > ``activationThreshold``, default 0): the real Prometheus value drives it."""
    server = f"idle-{uuid.uuid4().hex[:4]}"
    pod = engine_pod(namespace, server, f"{server}-0")
    pod.set("vllm:num_requests_waiting", 0)
    query = f'sum(vllm:num_requests_waiting{{namespace="{namespace}",server="{server}"}})'
    assert prometheus.wait_value(query, 0) == 0
    cluster.apply(deployment(server, replicas=1), namespace=namespace)
    cluster.apply(scaled_object(server, server, prometheus.url, query, min_replicas=0, max_replicas=3,
                                threshold="4", cooldown_seconds=1), namespace=namespace)
    cc.wait_until(lambda: replicas(cluster, namespace, server) == 0, 60, "KEDA to scale the idle target to 0")
    pod.set("vllm:num_requests_waiting", 6)
    cc.wait_until(lambda: replicas(cluster, namespace, server) == 1, 60, "KEDA to activate the target (0 -> 1)")
    assert keda.scaler_metric(namespace, server) == 6
