"""Predict, then verify on the local control plane.

The simulated engine's pods serve real-format start-up logs (hack/sim_startup.py) with a capacity the
test chooses: ``StartupLogServer`` gives every new engine pod its own kwok ``Logs`` while the pod's
readiness is held back by ``sim.ctxfit.io/delay-ms``, so the log is there when the operator reads it.
"""

from __future__ import annotations

import signal
from pathlib import Path
from typing import Any

import yaml
from sim_startup import StartupLogServer, sglang_startup_log, vllm_startup_log

from .operator_kit import OperatorProcess, ServerClient, condition, manifest

GIB = 1 << 30
READY_DELAY_MS = "6000"
CONFIGMAP = "ctxfit-calibration"
RESIDUAL = int(-2.5 * GIB)


def llama(name: str, target: int) -> dict[str, Any]:
    return {
        "apiVersion": "ctxfit.io/v1alpha1", "kind": "InferenceServer", "metadata": {"name": name},
        "spec": {"model": {"name": "meta-llama/Llama-3.1-8B-Instruct", "weightsPerGPU": "62Gi"},
                 "engine": {"kind": "vllm", "version": "0.19.0"},
                 "gpu": {"count": 1, "product": "NVIDIA-H100-80GB-HBM3"},
                 "context": {"target": target},
                 "pod": {"annotations": {"sim.ctxfit.io/delay-ms": READY_DELAY_MS}}},
    }


def start_operator(cluster: Any, namespace: str, tmp_path: Path) -> OperatorProcess:
    return OperatorProcess(Path(cluster.kubeconfig), namespace, tmp_path / "operator.log",
                           CTXFIT_CALIBRATION_NAMESPACE=namespace, CTXFIT_CALIBRATION_CONFIGMAP=CONFIGMAP).start()


def calibration(api: ServerClient) -> dict[str, Any]:
    cm = api.core.read_namespaced_config_map(CONFIGMAP, api.namespace)
    loaded: dict[str, Any] = yaml.safe_load(cm.data["calibration.yaml"])
    return loaded


def sample_ids(api: ServerClient) -> list[str]:
    try:
        table = calibration(api)
    except Exception:  # noqa: BLE001 - not created yet
        return []
    return [s["id"] for e in table["entries"] for s in e["samples"]]


def observed(api: ServerClient, name: str) -> dict[str, Any] | None:
    status = api.get(name).get("status", {})
    obs: dict[str, Any] | None = status.get("observed")
    return obs if obs and status.get("phase") == "Ready" else None


def test_observe_calibrate_and_survive_restarts(cluster: Any, crd: Path, api: ServerClient, namespace: str,
                                                tmp_path: Path) -> None:
    plans: dict[str, dict[str, Any]] = {}

    def make(server: str, context: int) -> str:
        # the pod can appear before the status that holds the plan (a new server's first pass only creates
        # the Deployment): wait for the plan rather than serve no log
        plan = plans.get(server) or api.wait(lambda: api.get(server)["status"]["plan"], f"{server} planned", 60)
        plans[server] = plan
        uncalibrated = plan["perGPU"]["kvCacheBytes"] - (plan.get("calibrationBytes") or 0)
        return vllm_startup_log(kv_cache_bytes=uncalibrated + RESIDUAL, kv_bytes_per_token=plan["kvBytesPerToken"],
                                max_model_len=context)

    op = start_operator(cluster, namespace, tmp_path)
    try:
        with StartupLogServer(cluster, api.core, api.namespace, make):
            api.create(llama("first", 32768))
            obs = api.wait(lambda: observed(api, "first"), "first observed", timeout=120)
            first = api.get("first")
            assert abs(obs["errorBytes"] - RESIDUAL) < 0.006 * GIB
            assert obs["kvCacheTokens"] > 32768 and obs["servedContextLength"] == 32768
            assert obs["attempt"] == 1 and obs["sourceLines"]
            assert any(e["reason"] == "Observed" and "predicted 7.14 GiB / observed 4.64 GiB" in e["message"]
                       for e in api.events("first"))
            uid = first["metadata"]["uid"]
            assert api.wait(lambda: sample_ids(api) == [f"{uid}/1"], "the ConfigMap gains the sample")
            entry = calibration(api)["entries"][0]
            assert (entry["engine"], entry["version"], entry["gpu"], entry["tp"], entry["pp"], entry["count"]) == \
                ("vllm", "0.19", "NVIDIA-H100-80GB-HBM3", 1, 1, 1)

            # a second server with the same key is planned with the calibration: smaller chosen context
            api.create(llama("second", 57344))
            second = api.wait(lambda: api.get("second").get("status", {}).get("plan"), "second planned")
            assert second["reasons"][0].startswith(
                "calibrated from 1 start-up of vLLM 0.19 on NVIDIA-H100-80GB-HBM3 at TP 1 PP 1: -1.00 GiB")
            assert second["calibrationBytes"] == -GIB
            assert second["contextLength"] < 57344, "uncalibrated, 57344 fits the predicted 58448"

            # kill the operator mid-way (a server just created), restart it: no sample lost, none twice
            api.create(llama("third", 32768))
            api.wait(lambda: api.pods("third"), "third's pod")
            op.stop(signal.SIGKILL)
            op = start_operator(cluster, namespace, tmp_path)
            api.wait(lambda: observed(api, "third") and observed(api, "second"), "all observed", timeout=120)
            uids = {n: api.get(n)["metadata"]["uid"] for n in ("first", "second", "third")}
            want = sorted(f"{u}/1" for u in uids.values())
            assert api.wait(lambda: sorted(sample_ids(api)) == want, "three samples, once each")
            op.stop(signal.SIGKILL)
            op = start_operator(cluster, namespace, tmp_path)
            op.settle(4)
            ids = sample_ids(api)
            assert sorted(ids) == want and len(ids) == len(set(ids))
            assert calibration(api)["entries"][0]["count"] == 3
            text = op.scrape()
            assert 'ctxfit_kv_cache_tokens{engine="vllm",name="first",namespace="' in text
            assert 'source="observed"' in text and "ctxfit_prediction_error_bytes{" in text
    finally:
        op.stop()
        print(f"--- operator log ---\n{(tmp_path / 'operator.log').read_text()[-6000:]}")


def test_sglang_pool_below_context_is_clamped_then_steps(cluster: Any, crd: Path, api: ServerClient,
                                                         namespace: str, tmp_path: Path) -> None:
    pool = 300_000

    def make(server: str, context: int) -> str:
        return sglang_startup_log(max_total_num_tokens=pool, context_len=context, kv_bytes_per_token=3800)

    obj = manifest("dsv4-flash-512k.yaml")
    obj["spec"]["pod"] = {"annotations": {"sim.ctxfit.io/delay-ms": READY_DELAY_MS}}
    op = start_operator(cluster, namespace, tmp_path)
    try:
        with StartupLogServer(cluster, api.core, api.namespace, make):
            api.create(obj)
            server = api.wait(lambda: (s := api.get("dsv4-flash")).get("status", {}).get("phase") == "Ready"
                              and len(s["status"]["attempts"]) == 2 and s["status"].get("observed", {}).get(
                                  "attempt") == 2 and s, "attempt 2 Ready and observed", timeout=150)
            st = server["status"]
            first, second = st["attempts"]
            assert first["effective"]["contextLength"] == 524288
            assert first["failureKind"] == "KVCacheTooSmall" and first["evidence"].startswith("ContextClamped:")
            assert 131072 <= second["effective"]["contextLength"] <= pool
            assert st["contextLength"] == second["effective"]["contextLength"]
            degraded = condition(server, "Degraded")
            assert (degraded["status"], degraded["reason"]) == ("True", "ContextClamped")
            assert "300000" in degraded["message"]
            assert any(e["type"] == "Warning" and e["reason"] == "ContextClamped" for e in api.events("dsv4-flash"))
            assert st["observed"]["kvCacheTokens"] == pool
            assert "ctxfit_context_clamped{" in op.scrape()
    finally:
        op.stop()
        print(f"--- operator log ---\n{(tmp_path / 'operator.log').read_text()[-6000:]}")
