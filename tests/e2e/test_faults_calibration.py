"""On the real local control plane: the calibration ConfigMap is shared input, never trusted
(docs/design/calibration-trust.md).

- A tenant (the impersonated ``ctxfit-edit`` user, bound in its own namespace only) runs servers whose engines print
  crafted start-up logs (+1.8 GiB KV pool, the issue's figure). Its own next server is calibrated by them; another
  namespace's servers, on the same GPU product (the exact key) and on another (the "any GPU" fallback), are planned
  exactly as without calibration.
- A ConfigMap hand-edited with ``residualBytes: .inf`` and other bad numbers: every server is still planned, with the
  valid entries, and one Warning Event on the ConfigMap says what was dropped; a text over the size bound is not
  parsed (a Warning Event) and planning goes on with the last table read.
"""

from __future__ import annotations

import json
import time
import uuid
from pathlib import Path
from typing import Any

import yaml
from sim_startup import StartupLogServer, vllm_startup_log

from .operator_kit import OperatorProcess, ServerClient, bind, can_i, kubectl

GIB = 1 << 30
CONFIGMAP = "ctxfit-calibration"
CRAFTED = int(1.8 * GIB)
OURS = {"app.kubernetes.io/managed-by": "ctxfit", "app.kubernetes.io/component": "calibration"}
TENANT = "mallory-editor"
H100, H200 = "NVIDIA-H100-80GB-HBM3", "NVIDIA-H200"


def llama(name: str, product: str = H100, target: int = 32768) -> dict[str, Any]:
    return {
        "apiVersion": "ctxfit.io/v1alpha1", "kind": "InferenceServer", "metadata": {"name": name},
        "spec": {"model": {"name": "meta-llama/Llama-3.1-8B-Instruct", "weightsPerGPU": "62Gi"},
                 "engine": {"kind": "vllm", "version": "0.19.0"},
                 "gpu": {"count": 1, "product": product}, "context": {"target": target},
                 "pod": {"annotations": {"sim.ctxfit.io/delay-ms": "6000"}}},
    }


def as_user(cluster: Any, namespace: str, obj: dict[str, Any]) -> None:
    out = kubectl(cluster, "create", "-f", "-", user=TENANT, namespace=namespace, input=json.dumps(obj))
    assert out.returncode == 0, out.stderr


def plan_of(api: ServerClient, name: str) -> dict[str, Any]:
    plan: dict[str, Any] = api.wait(lambda: api.get(name).get("status", {}).get("plan"), f"{name} planned", 60)
    return plan


def table(api: ServerClient, namespace: str) -> dict[str, Any]:
    try:
        cm = api.core.read_namespaced_config_map(CONFIGMAP, namespace)
    except Exception:  # noqa: BLE001 - not created yet
        return {}
    loaded: dict[str, Any] = yaml.safe_load(cm.data["calibration.yaml"]) or {}
    return loaded


def configmap_events(api: ServerClient, namespace: str) -> list[Any]:
    return list(api.core.list_namespaced_event(
        namespace, field_selector=f"involvedObject.kind=ConfigMap,involvedObject.name={CONFIGMAP}").items)


def test_one_tenant_never_moves_another_tenants_plan(cluster: Any, crd: Path, user_roles: None, api: ServerClient,
                                                    namespace: str, tmp_path: Path) -> None:
    tenant_ns = f"e2e-tenant-{uuid.uuid4().hex[:6]}"
    cluster.create_namespace(tenant_ns)
    tenant = ServerClient(Path(cluster.kubeconfig), tenant_ns, Path(cluster.bin_dir) / "kubectl")
    bind(cluster, tenant_ns, TENANT, "edit")
    plans: dict[str, dict[str, Any]] = {}

    def crafted(server: str, context: int) -> str:
        plan = plans.get(server) or tenant.wait(lambda: tenant.get(server)["status"]["plan"], f"{server} planned", 60)
        plans[server] = plan
        uncalibrated = plan["perGPU"]["kvCacheBytes"] - (plan.get("calibrationBytes") or 0)
        return vllm_startup_log(kv_cache_bytes=uncalibrated + CRAFTED, kv_bytes_per_token=plan["kvBytesPerToken"],
                                max_model_len=context)

    op = OperatorProcess(Path(cluster.kubeconfig), f"{namespace},{tenant_ns}", tmp_path / "operator.log",
                         CTXFIT_CALIBRATION_NAMESPACE=namespace, CTXFIT_CALIBRATION_CONFIGMAP=CONFIGMAP).start()
    try:
        tenant.wait(lambda: can_i(cluster, TENANT, tenant_ns, "create", "inferenceservers.ctxfit.io"), "aggregation")
        assert not can_i(cluster, TENANT, namespace, "create", "inferenceservers.ctxfit.io")
        assert not can_i(cluster, TENANT, namespace, "update", "configmaps", CONFIGMAP)
        with StartupLogServer(cluster, tenant.core, tenant_ns, crafted):
            for i in (1, 2):
                as_user(cluster, tenant_ns, llama(f"crafted-{i}"))
            servers = {f"{tenant_ns}/crafted-{i}" for i in (1, 2)}
            api.wait(lambda: {s["server"] for e in table(api, namespace).get("entries", []) for s in e["samples"]}
                     == servers, "the tenant's two start-ups recorded", timeout=150)
        uncalibrated = plans["crafted-1"]
        assert not uncalibrated.get("calibrationBytes")

        # the tenant's own next server follows its own start-ups ...
        as_user(cluster, tenant_ns, llama("crafted-3"))
        own = plan_of(tenant, "crafted-3")
        assert 1.1 * GIB < own["calibrationBytes"] < 1.3 * GIB, own  # median 1.8 GiB shrunk by 2/3
        assert "samples of this namespace only" in own["reasons"][0]

        # ... another namespace's do not: the exact key, and another GPU product (the "any GPU" fallback)
        api.create(llama("victim-h100"))
        api.create(llama("victim-h200", H200))
        for name in ("victim-h100", "victim-h200"):
            plan = plan_of(api, name)
            assert not plan.get("calibrationBytes"), plan
            assert not any("calibrated from" in r for r in plan["reasons"]), plan["reasons"]
        victim = plan_of(api, "victim-h100")
        assert victim["perGPU"]["kvCacheBytes"] == uncalibrated["perGPU"]["kvCacheBytes"], "planned as uncalibrated"
        assert victim["contextLength"] == uncalibrated["contextLength"]
        assert "Traceback" not in op.log_path.read_text()
    finally:
        op.stop()
        print(f"--- operator log ---\n{(tmp_path / 'operator.log').read_text()[-6000:]}")
        tenant.delete_all()
        kubectl(cluster, "delete", "namespace", tenant_ns, "--wait=false", "--ignore-not-found")


def bad_table(namespace: str) -> str:
    valid = {"id": "old-uid/1", "server": f"{namespace}/old", "residualBytes": -GIB, "time": "2026-12-01T00:00:00Z"}
    entry = {"engine": "vllm", "version": "0.19", "gpu": H100, "tp": 1, "pp": 1, "count": 5, "samples": [valid]}
    text = yaml.safe_dump({"entries": [entry]}, sort_keys=False)
    hostile = "".join(f"- {{engine: vllm, version: '0.19', gpu: {H100}, tp: 1, pp: 1, samples: [{{id: inf{i}/1, "
                      f"server: x/y, residualBytes: {bad}}}]}}\n"
                      for i, bad in enumerate((".inf", "-.inf", ".nan", "1e999", "'12'")))
    broken_sample = text.replace("  samples:\n", "  samples:\n  - {id: nan/1, server: x/z, residualBytes: .nan}\n")
    return broken_sample + hostile


def test_a_hand_edited_configmap_never_stops_planning(cluster: Any, crd: Path, user_roles: None, api: ServerClient,
                                                     namespace: str, tmp_path: Path) -> None:
    from kubernetes import client

    api.core.create_namespaced_config_map(namespace, client.V1ConfigMap(
        metadata=client.V1ObjectMeta(name=CONFIGMAP, labels=OURS), data={"calibration.yaml": bad_table(namespace)}))
    bind(cluster, namespace, TENANT, "edit")
    op = OperatorProcess(Path(cluster.kubeconfig), namespace, tmp_path / "operator.log",
                         CTXFIT_CALIBRATION_NAMESPACE=namespace, CTXFIT_CALIBRATION_CONFIGMAP=CONFIGMAP).start()
    try:
        api.wait(lambda: can_i(cluster, TENANT, namespace, "create", "inferenceservers.ctxfit.io"), "aggregation")
        as_user(cluster, namespace, llama("first"))
        first = plan_of(api, "first")
        assert first["calibrationBytes"] == -GIB // 2, first  # the one valid sample, shrunk by 1/2
        events = api.wait(lambda: [e for e in configmap_events(api, namespace)
                                   if e.reason == "CalibrationEntryDropped"], "a Warning Event on the ConfigMap")
        assert len(events) == 1 and events[0].type == "Warning", events
        assert "6 problem(s)" in events[0].message and "residualBytes" in events[0].message, events[0].message

        # over the size bound: not parsed, the last table read plans on
        cm = api.core.read_namespaced_config_map(CONFIGMAP, namespace)
        cm.data["calibration.yaml"] = bad_table(namespace) + "#" + "x" * (300 * 1024) + "\n"
        api.core.replace_namespaced_config_map(CONFIGMAP, namespace, cm)
        time.sleep(3)  # past the 2 s cache of the table
        started = time.monotonic()
        as_user(cluster, namespace, llama("second"))
        second = plan_of(api, "second")
        assert time.monotonic() - started < 30
        assert second["calibrationBytes"] == -GIB // 2, second
        too_large = api.wait(lambda: [e for e in configmap_events(api, namespace)
                                      if e.reason == "CalibrationTableTooLarge"], "the size Event")
        assert len(too_large) == 1 and "not read" in too_large[0].message
        op.settle(4)
        assert len([e for e in configmap_events(api, namespace) if e.reason == "CalibrationTableTooLarge"]) == 1
        assert op.alive() and "Traceback" not in op.log_path.read_text()
    finally:
        op.stop()
        print(f"--- operator log ---\n{(tmp_path / 'operator.log').read_text()[-6000:]}")
