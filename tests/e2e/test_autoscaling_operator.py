"""Autoscaling end to end: the ctxfit operator, the real KEDA operator and a real Prometheus on the
local control plane (kwok GPU nodes run the engine pods; hack/README.md "Autoscaling add-ons").

- a server with ``spec.autoscaling`` gets a ScaledObject that KEDA accepts: its HPA ``keda-hpa-<name>`` exists
  with the server's bounds, and ``status.autoscaling`` / ``kubectl get infsrv`` show the replicas;
- the rendered trigger queries, evaluated by the real Prometheus on fake engine series (both vLLM KV metric
  names and SGLang's), give the sums the test expects at low and high pressure, and KEDA's own scale loop
  reads the same values;
- the operator leaves replicas alone while KEDA owns them (the Deployment scaled as the HPA would stays so
  across reconciles), a step-down keeps the replica count, and a Failed server's ScaledObject is paused.

KEDA's metrics apiserver is not run (hack/addons_keda.py), so the HPA exists and enforces its bounds but does
not act on the trigger values: the replica count in these tests is set by the test, as the HPA would set it.
"""

from __future__ import annotations

import contextlib
import math
import subprocess
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from addons_keda import KedaOperator, hpa_name
from addons_prometheus import Prometheus
from ctxfit.controller.kube.answers import resource_missing
from ctxfit.controller.kube.client import Kube
from ctxfit.controller.kube.keda import KEDA_GROUP, KEDA_PLURAL, KEDA_VERSION, get_scaled_object
from ctxfit.controller.kube.rest import SCALED_OBJECTS, Resource
from engine_metrics_fixture import EnginePod
from kubernetes import client, config
from kubernetes.client.rest import ApiException

from .operator_kit import OperatorProcess, ServerClient, condition, manifest, with_sim

NAME = "llama31-8b-autoscaled"
PAUSED = "autoscaling.keda.sh/paused"
HPA_TOLERANCE = 0.1
"""kube-controller-manager's default ``--horizontal-pod-autoscaler-tolerance``."""
WEIGHTS_MESSAGE = (
    "Loading safetensors checkpoint shards:  40% Completed | 2/4\ntorch.OutOfMemoryError: CUDA out of memory. "
    "Tried to allocate 1.50 GiB. GPU 0 has a total capacity of 79.19 GiB of which 512.00 MiB is free."
)
KV_MESSAGE = (
    "ValueError: To serve at least one request with the models's max seq len (131072), (16.00 GiB KV cache is "
    "needed, which is larger than the available KV cache memory (12.21 GiB). Based on the available memory, the "
    "estimated maximum model length is 100000. Try increasing `gpu_memory_utilization` or decreasing "
    "`max_model_len` when initializing the engine."
)


@pytest.fixture
def keda_op(cluster: Any, crd: Path, namespace: str, tmp_path: Path, keda: KedaOperator,
            prometheus: Prometheus) -> Iterator[OperatorProcess]:
    """The operator with KEDA on (the chart's ``autoscaling.keda.enabled`` and ``prometheusAddress``)."""
    operator = OperatorProcess(Path(cluster.kubeconfig), namespace, tmp_path / "operator.log",
                               CTXFIT_KEDA_ENABLED="true", CTXFIT_PROMETHEUS_ADDRESS=prometheus.url).start()
    yield operator
    operator.stop()
    print(f"--- operator log ({operator.log_path}) ---\n{operator.log_path.read_text()[-6000:]}")


@pytest.fixture
def kube_api(api: ServerClient) -> Iterator[tuple[client.CustomObjectsApi, client.AutoscalingV2Api]]:
    """ScaledObject and HPA clients; this namespace's ScaledObjects are deleted afterwards."""
    custom = client.CustomObjectsApi(api.core.api_client)
    yield custom, client.AutoscalingV2Api(api.core.api_client)
    with contextlib.suppress(ApiException):
        custom.delete_collection_namespaced_custom_object(KEDA_GROUP, KEDA_VERSION, api.namespace, KEDA_PLURAL)


def scaled_object(custom: client.CustomObjectsApi, namespace: str, name: str = NAME) -> dict[str, Any] | None:
    try:
        out: dict[str, Any] = custom.get_namespaced_custom_object(KEDA_GROUP, KEDA_VERSION, namespace, KEDA_PLURAL,
                                                                  name)
        return out
    except ApiException as exc:
        if exc.status == 404:
            return None
        raise


def keda_condition(obj: dict[str, Any] | None, kind: str) -> str | None:
    for cond in (obj or {}).get("status", {}).get("conditions", []):
        if cond["type"] == kind:
            return str(cond["status"])
    return None


def hpa(autoscaling: client.AutoscalingV2Api, namespace: str, name: str = NAME) -> Any:
    try:
        return autoscaling.read_namespaced_horizontal_pod_autoscaler(hpa_name(name), namespace)
    except ApiException as exc:
        if exc.status == 404:
            return None
        raise


def server(**autoscaling: Any) -> dict[str, Any]:
    obj = manifest("llama31-8b-autoscaling.yaml")
    obj["spec"]["autoscaling"].update(autoscaling)
    return obj


def accepted(api: ServerClient, custom: client.CustomObjectsApi, name: str = NAME) -> dict[str, Any]:
    """Wait until KEDA reports the server's ScaledObject Ready; returns it."""
    found: dict[str, Any] = api.wait(
        lambda: (so := scaled_object(custom, api.namespace, name)) and keda_condition(so, "Ready") == "True" and so,
        f"KEDA to accept ScaledObject {name}", timeout=90)
    return found


def scale(api: ServerClient, replicas: int, name: str = NAME) -> None:
    """Set the Deployment's replicas through its scale subresource, as the HPA does."""
    api.apps.patch_namespaced_deployment_scale(name, api.namespace, {"spec": {"replicas": replicas}})


def ready_pods(api: ServerClient, name: str = NAME, attempt: int | None = None) -> list[dict[str, Any]]:
    return [p for p in api.pods(name)
            if any(c["type"] == "Ready" and c["status"] == "True" for c in p["status"].get("conditions") or [])
            and (attempt is None or p["metadata"]["annotations"].get("ctxfit.io/attempt") == str(attempt))]


def reconciles(op: OperatorProcess) -> float:
    for line in op.scrape().splitlines():
        if line.startswith("ctxfit_reconcile_duration_seconds_count"):
            return float(line.split()[-1])
    return 0.0


def test_keda_accepts_the_scaled_object_and_its_hpa_has_the_bounds(
        keda_op: OperatorProcess, api: ServerClient, kube_api: Any, cluster: Any) -> None:
    custom, autoscaling = kube_api
    api.create(server(minReplicas=1, maxReplicas=3))
    api.wait_phase(NAME, "Ready")
    so = accepted(api, custom)
    assert so["spec"]["scaleTargetRef"] == {"apiVersion": "apps/v1", "kind": "Deployment", "name": NAME}
    assert (so["spec"]["minReplicaCount"], so["spec"]["maxReplicaCount"]) == (1, 3)
    assert so["metadata"]["annotations"][PAUSED] == "false"
    assert so["metadata"]["ownerReferences"][0]["kind"] == "InferenceServer"
    found = api.wait(lambda: hpa(autoscaling, api.namespace), f"HPA {hpa_name(NAME)}")
    assert (found.spec.min_replicas, found.spec.max_replicas) == (1, 3)
    assert found.spec.scale_target_ref.name == NAME and found.spec.scale_target_ref.kind == "Deployment"
    srv = api.wait(lambda: (s := api.get(NAME)) and condition(s, "Autoscaling")["status"] == "True" and s,
                   "condition Autoscaling True")
    assert condition(srv, "Autoscaling")["reason"] == "ScaledObjectReady"
    auto = srv["status"]["autoscaling"]
    assert (auto["minReplicas"], auto["maxReplicas"], auto["scaledObject"], auto["paused"]) == (1, 3, NAME, False)
    assert str(auto["kvCacheUsageThreshold"]) == so["spec"]["triggers"][0]["metadata"]["threshold"]
    assert str(auto["queueThreshold"]) == so["spec"]["triggers"][1]["metadata"]["threshold"]
    assert (auto["desiredReplicas"], srv["status"]["replicas"]) == (1, 1)
    assert any(e["reason"] == "ScaledObjectCreated" for e in api.events(NAME))
    table = subprocess.run([str(Path(cluster.bin_dir) / "kubectl"), "get", "infsrv", NAME, "-n", api.namespace],
                           capture_output=True, text=True, env=api.env, check=True).stdout.splitlines()
    column = table[0].index("REPLICAS")  # kubectl aligns each column under its header
    assert table[1][column:].split()[0] == "1", table


def trigger(so: dict[str, Any], name: str) -> tuple[int, str, float]:
    """(index, query, threshold) of the ScaledObject's trigger ``name``."""
    for index, item in enumerate(so["spec"]["triggers"]):
        if item["name"] == name:
            return index, item["metadata"]["query"], float(item["metadata"]["threshold"])
    raise KeyError(name)


def check_pressure(prometheus: Prometheus, keda: KedaOperator, namespace: str, so: dict[str, Any],
                   pods: list[EnginePod], trigger_name: str, metric: str, low: list[float], high: list[float]) -> None:
    """Low pressure: the trigger's query sums ``low`` and the HPA would not add a replica to ``len(pods)``
    (the average is within its tolerance of the threshold); high: it sums ``high`` and the HPA would add one.
    KEDA's scale loop reads the same values from the same Prometheus."""
    index, query, threshold = trigger(so, trigger_name)
    for values, scale_out in ((low, False), (high, True)):
        for p, value in zip(pods, values, strict=True):
            p.set(metric, value)
        expected = sum(values)
        got = prometheus.wait_value(query, expected, rel_tol=1e-9)
        assert got is not None and math.isclose(got, expected)
        average = got / len(pods)
        assert (average > threshold * (1 + HPA_TOLERANCE)) is scale_out, (trigger_name, values, threshold)
        assert (math.ceil(got / threshold) > len(pods)) is scale_out
        deadline = time.monotonic() + 60  # KEDA polls every pollingInterval (15 s)
        seen = None
        while time.monotonic() < deadline:
            seen = keda.scaler_metric(namespace, so["metadata"]["name"], index)
            if seen is not None and math.isclose(seen, expected, rel_tol=1e-3, abs_tol=1e-3):
                break
            time.sleep(1)
        assert seen is not None and math.isclose(seen, expected, rel_tol=1e-3, abs_tol=1e-3), \
            f"KEDA read {seen} for {trigger_name}, Prometheus says {expected}"
    for p in pods:
        p.remove(metric)


def pressures(threshold: float) -> tuple[list[float], list[float]]:
    """Per-pod KV usage below the threshold and well above it (1.5x, capped at 0.99)."""
    return [round(threshold / 4, 3), round(threshold / 2, 3)], [min(0.99, round(threshold * 1.5, 3))] * 2


def test_vllm_triggers_at_low_and_high_pressure_with_both_metric_names(
        keda_op: OperatorProcess, api: ServerClient, kube_api: Any, prometheus: Prometheus, keda: KedaOperator,
        engine_pod: Callable[..., EnginePod]) -> None:
    custom, _ = kube_api
    api.create(server())
    so = accepted(api, custom)
    pods = [engine_pod(api.namespace, NAME, f"{NAME}-{i}") for i in range(2)]
    _, _, kv_threshold = trigger(so, "kv-cache-usage")
    _, _, queue_threshold = trigger(so, "requests-waiting")
    assert 0 < kv_threshold < 1 and queue_threshold >= 1
    low, high = pressures(kv_threshold)
    for metric in ("vllm:kv_cache_usage_perc", "vllm:gpu_cache_usage_perc"):
        check_pressure(prometheus, keda, api.namespace, so, pods, "kv-cache-usage", metric, low, high)
    check_pressure(prometheus, keda, api.namespace, so, pods, "requests-waiting", "vllm:num_requests_waiting",
                   [0, 1], [queue_threshold * 2] * 2)
    # vLLM 0.9.2-0.10 export both names: one pod's usage still counts once
    _, query, _ = trigger(so, "kv-cache-usage")
    for p in pods:
        p.set("vllm:kv_cache_usage_perc", 0.4)
        p.set("vllm:gpu_cache_usage_perc", 0.4)
    assert prometheus.wait_value(query, 0.8) == pytest.approx(0.8)


def test_sglang_triggers_at_low_and_high_pressure(
        keda_op: OperatorProcess, api: ServerClient, kube_api: Any, prometheus: Prometheus, keda: KedaOperator,
        engine_pod: Callable[..., EnginePod]) -> None:
    custom, _ = kube_api
    obj = server()
    obj["metadata"]["name"] = "llama-sglang"
    obj["spec"]["engine"] = {"kind": "sglang", "version": "0.5.23"}
    api.create(obj)
    so = accepted(api, custom, "llama-sglang")
    assert "sglang:token_usage" in so["spec"]["triggers"][0]["metadata"]["query"]
    pods = [engine_pod(api.namespace, "llama-sglang", f"llama-sglang-{i}", "sglang") for i in range(2)]
    _, _, kv_threshold = trigger(so, "kv-cache-usage")
    _, _, queue_threshold = trigger(so, "requests-waiting")
    low, high = pressures(kv_threshold)
    check_pressure(prometheus, keda, api.namespace, so, pods, "kv-cache-usage", "sglang:token_usage", low, high)
    check_pressure(prometheus, keda, api.namespace, so, pods, "requests-waiting", "sglang:num_queue_reqs",
                   [1, 0], [queue_threshold * 2] * 2)


def test_the_operator_leaves_replicas_to_the_autoscaler(
        keda_op: OperatorProcess, api: ServerClient, kube_api: Any, cluster: Any) -> None:
    custom, autoscaling = kube_api
    api.create(server(minReplicas=1, maxReplicas=4))
    api.wait_phase(NAME, "Ready")
    accepted(api, custom)
    api.wait(lambda: hpa(autoscaling, api.namespace), f"HPA {hpa_name(NAME)}")
    scale(api, 3)
    api.wait(lambda: len(ready_pods(api)) == 3, "3 Ready engine pods")
    before = api.deployment(NAME)
    assert before is not None
    count = reconciles(keda_op)
    keda_op.settle(12)  # CTXFIT_RESYNC_SECONDS=5: at least two periodic reconciles
    assert reconciles(keda_op) >= count + 2, "the operator reconciled meanwhile"
    after = api.deployment(NAME)
    assert after is not None and after["spec"]["replicas"] == 3, "the operator wrote replicas back"
    assert after["metadata"]["generation"] == before["metadata"]["generation"], "no write to the Deployment spec"
    assert not [e for e in api.events(NAME) if e["reason"] == "DriftReverted"]
    srv = api.wait(lambda: (s := api.get(NAME))["status"].get("replicas") == 3 and s, "status.replicas 3")
    auto = srv["status"]["autoscaling"]
    assert (auto["desiredReplicas"], auto["currentReplicas"]) == (3, 3)
    assert srv["status"]["phase"] == "Ready"


def test_a_step_down_keeps_the_replica_count(
        keda_op: OperatorProcess, api: ServerClient, kube_api: Any) -> None:
    """The engine refuses 131072 (KV cache too small, "estimated maximum model length is 100000"); meanwhile the
    autoscaler took the Deployment to 3. Attempt 2 runs the lower context on the same 3 replicas."""
    custom, autoscaling = kube_api
    obj = with_sim(server(minReplicas=1, maxReplicas=4), "crash", message=KV_MESSAGE,
                   fail_if=("ctxfit.io/context-length", 100000))
    obj["spec"]["context"] = {"target": 131072, "minimum": 8192}
    obj["spec"]["pod"]["annotations"]["sim.ctxfit.io/delay-ms"] = "10000"  # pending long enough to scale first
    api.create(obj)
    api.wait(lambda: api.deployment(NAME, missing_ok=True), "the Deployment")
    scale(api, 3)
    srv = api.wait_phase(NAME, "Ready", timeout=120)
    attempts = srv["status"]["attempts"]
    assert [a["outcome"] for a in attempts] == ["Failed", "Succeeded"]
    assert attempts[0]["failureKind"] == "KVCacheTooSmall"
    assert attempts[1]["effective"]["contextLength"] <= 100000
    deployment = api.deployment(NAME)
    assert deployment is not None and deployment["spec"]["replicas"] == 3
    assert deployment["metadata"]["annotations"]["ctxfit.io/attempt"] == "2"
    api.wait(lambda: len(ready_pods(api, attempt=2)) == 3, "3 Ready pods of attempt 2")
    found = hpa(autoscaling, api.namespace)
    assert found is not None and (found.spec.min_replicas, found.spec.max_replicas) == (1, 4)
    assert keda_condition(scaled_object(custom, api.namespace), "Ready") == "True"


def test_a_failed_server_pauses_its_scaled_object(
        keda_op: OperatorProcess, api: ServerClient, kube_api: Any) -> None:
    custom, autoscaling = kube_api
    obj = with_sim(server(minReplicas=2, maxReplicas=4), "crash", message=WEIGHTS_MESSAGE)
    obj["spec"]["replicas"] = 2
    obj["spec"]["pod"]["annotations"]["sim.ctxfit.io/delay-ms"] = "10000"  # KEDA's HPA exists before the crash
    api.create(obj)
    accepted(api, custom)
    api.wait(lambda: hpa(autoscaling, api.namespace), f"HPA {hpa_name(NAME)} before the failure")
    srv = api.wait_phase(NAME, "Failed", timeout=90)
    assert condition(srv, "Ready")["reason"] == "PermanentFailure"
    so = api.wait(lambda: (s := scaled_object(custom, api.namespace)) and s["metadata"]["annotations"].get(PAUSED)
                  == "true" and keda_condition(s, "Paused") == "True" and s, "ScaledObject paused by KEDA")
    assert so["spec"]["minReplicaCount"] == 2
    api.wait(lambda: hpa(autoscaling, api.namespace) is None, "KEDA to delete the HPA of the paused ScaledObject")
    api.wait(lambda: api.deployment(NAME)["spec"]["replicas"] == 0, "Deployment at 0 replicas")  # type: ignore[index]
    api.wait(lambda: not api.pods(NAME), "engine pods gone (GPUs released)")
    keda_op.settle(8)
    assert api.deployment(NAME)["spec"]["replicas"] == 0, "nothing scaled the Failed server up"  # type: ignore[index]
    srv = api.get(NAME)
    assert condition(srv, "Autoscaling")["reason"] == "AutoscalingPaused"
    assert srv["status"]["autoscaling"]["paused"] is True
    assert any(e["reason"] == "AutoscalingPaused" for e in api.events(NAME))


def test_the_api_server_tells_a_missing_keda_from_a_missing_scaled_object(
        api: ServerClient, cluster: Any, keda: KedaOperator) -> None:
    """What ``kube/keda.py`` relies on to say "KEDA not installed" (``answers.resource_missing``): kube-apiserver's
    404 for a resource it does not serve names no object; its 404 for a missing ScaledObject does (KEDA's CRDs are
    installed here)."""
    kube = Kube(config.new_client_from_config(config_file=str(cluster.kubeconfig)))
    assert get_scaled_object(kube, api.namespace, "nothing-here") is None
    with pytest.raises(ApiException) as missing:
        kube.rest.call_json("GET", Resource("absent.ctxfit.io", "v1", "things"), api.namespace, "x")
    assert missing.value.status == 404 and resource_missing(missing.value)
    with pytest.raises(ApiException) as no_object:
        kube.rest.call_json("GET", SCALED_OBJECTS, api.namespace, "x")
    assert no_object.value.status == 404 and not resource_missing(no_object.value)
