"""Shared pieces of the operator e2e tests (no tests here): the operator subprocess, a small API client,
manifest and server builders; the fixtures that use them (``crd``, ``api``, ``op``...) are in conftest.py."""

from __future__ import annotations

import copy
import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any

import yaml
from kubernetes import client, config
from kubernetes.client import CustomObjectsApi
from kubernetes.client.rest import ApiException

REPO = Path(__file__).resolve().parents[2]
CRD_FILE = REPO / "crds" / "inferenceservers.ctxfit.io.yaml"
GPU_PRODUCT_LABEL = "nvidia.com/gpu.product"
PRODUCT = "NVIDIA-H100-80GB-HBM3"
"""The product of the H100 nodes in the harness's default node pool."""
GROUP, VERSION, PLURAL = "ctxfit.io", "v1alpha1", "inferenceservers"
WAIT_SECONDS = float(os.environ.get("CTXFIT_E2E_WAIT", "60"))

FAST_OPERATOR_ENV = {
    "CTXFIT_BACKOFF_SECONDS": "0",
    "CTXFIT_RESYNC_SECONDS": "5",
    "CTXFIT_NODE_RECHECK_SECONDS": "2",
    "CTXFIT_WORKERS": "4",
}
"""Test settings: no backoff between attempts, frequent resync (the issue: short backoffs in tests)."""


def manifest(name: str) -> dict[str, Any]:
    """A fresh copy of ``manifests/NAME``."""
    loaded: dict[str, Any] = yaml.safe_load((REPO / "manifests" / name).read_text())
    return copy.deepcopy(loaded)


def with_sim(obj: dict[str, Any], behavior: str, *, message: str | None = None,
             fail_if: tuple[str, int] | None = None, exit_code: int | None = None) -> dict[str, Any]:
    """Set the simulated engine's fate on the pod template (hack/README.md contract)."""
    pod = obj["spec"].setdefault("pod", {})
    pod.setdefault("labels", {})["sim.ctxfit.io/behavior"] = behavior
    annotations = pod.setdefault("annotations", {})
    annotations["sim.ctxfit.io/restart-delay-ms"] = "1000"
    if message is not None:
        annotations["sim.ctxfit.io/message"] = message
    if exit_code is not None:
        annotations["sim.ctxfit.io/exit-code"] = str(exit_code)
    if fail_if is not None:
        annotations["sim.ctxfit.io/fail-if-annotation"] = fail_if[0]
        annotations["sim.ctxfit.io/fail-if-above"] = str(fail_if[1])
    return obj


def engine_args(deployment: dict[str, Any]) -> list[str]:
    """The engine container's arguments in a Deployment."""
    return list(deployment["spec"]["template"]["spec"]["containers"][0]["args"])


def condition(server: dict[str, Any], kind: str) -> dict[str, Any]:
    """The status condition of type ``kind`` (KeyError when absent)."""
    for cond in server.get("status", {}).get("conditions", []):
        if cond["type"] == kind:
            return dict(cond)
    raise KeyError(f"no {kind} condition in {server.get('status')}")


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


class OperatorProcess:
    """``python -m ctxfit.controller`` watching one namespace, its output in ``log_path``."""

    def __init__(self, kubeconfig: Path, namespace: str, log_path: Path, **env: str) -> None:
        self.kubeconfig, self.namespace, self.log_path = kubeconfig, namespace, log_path
        self.metrics_port, self.health_port = free_port(), free_port()
        self.env = {**os.environ, **FAST_OPERATOR_ENV, **env, "KUBECONFIG": str(kubeconfig),
                    "CTXFIT_WATCH_NAMESPACES": namespace, "CTXFIT_METRICS_PORT": str(self.metrics_port),
                    "CTXFIT_HEALTH_PORT": str(self.health_port)}
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> OperatorProcess:
        with self.log_path.open("ab") as log:
            self.proc = subprocess.Popen([sys.executable, "-m", "ctxfit.controller"], env=self.env, stdout=log,
                                         stderr=subprocess.STDOUT, start_new_session=True, cwd=REPO)
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            if not self.alive():
                raise RuntimeError(f"operator exited early:\n{self.log_path.read_text()[-3000:]}")
            try:
                if self.healthz() == 200:
                    return self
            except OSError:
                pass
            time.sleep(0.2)
        raise RuntimeError(f"operator not healthy in 30 s:\n{self.log_path.read_text()[-3000:]}")

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def healthz(self) -> int:
        with urllib.request.urlopen(f"http://127.0.0.1:{self.health_port}/healthz", timeout=2) as rsp:
            status: int = rsp.status
            return status

    def scrape(self) -> str:
        with urllib.request.urlopen(f"http://127.0.0.1:{self.metrics_port}/metrics", timeout=2) as rsp:
            text: str = rsp.read().decode()
            return text

    def settle(self, seconds: float) -> None:
        """Give the operator time to (not) act."""
        time.sleep(seconds)

    def stop(self, sig: int = signal.SIGTERM, timeout: float = 15) -> None:
        if self.proc is None or self.proc.poll() is not None:
            return
        os.killpg(self.proc.pid, sig)
        try:
            self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(timeout=5)


class ServerClient:
    """The few API reads and writes the tests need, in one namespace."""

    def __init__(self, kubeconfig: Path, namespace: str, kubectl_bin: Path) -> None:
        api_client = config.new_client_from_config(config_file=str(kubeconfig))
        self.custom = client.CustomObjectsApi(api_client)
        self.apps = client.AppsV1Api(api_client)
        self.core = client.CoreV1Api(api_client)
        self.namespace, self.kubectl_bin = namespace, kubectl_bin
        self.env = {**os.environ, "KUBECONFIG": str(kubeconfig)}

    def create(self, obj: dict[str, Any]) -> dict[str, Any]:
        out: dict[str, Any] = self.custom.create_namespaced_custom_object(GROUP, VERSION, self.namespace, PLURAL, obj)
        return out

    def patch_spec(self, name: str, spec_patch: dict[str, Any]) -> None:
        """JSON merge patch of ``spec`` (None deletes a key)."""
        self.custom.patch_namespaced_custom_object(GROUP, VERSION, self.namespace, PLURAL, name,
                                                   {"spec": spec_patch})

    def kubectl_apply(self, obj: dict[str, Any]) -> subprocess.CompletedProcess[str]:
        return subprocess.run([str(self.kubectl_bin), "apply", "-n", self.namespace, "-f", "-"],
                              input=json.dumps(obj), capture_output=True, text=True, env=self.env)

    def get(self, name: str) -> dict[str, Any]:
        out: dict[str, Any] = self.custom.get_namespaced_custom_object(GROUP, VERSION, self.namespace, PLURAL, name)
        return out

    def wait(self, predicate: Callable[[], Any], what: str, timeout: float = WAIT_SECONDS) -> Any:
        deadline = time.monotonic() + timeout
        last: Exception | None = None
        while time.monotonic() < deadline:
            try:
                value = predicate()
                if value:
                    return value
            except (ApiException, KeyError, IndexError, TypeError) as exc:
                last = exc
            time.sleep(0.25)
        raise AssertionError(f"timed out after {timeout:.0f} s waiting for {what} (last error: {last})")

    def wait_phase(self, name: str, phase: str, timeout: float = WAIT_SECONDS) -> dict[str, Any]:
        seen: list[Any] = []

        def check() -> dict[str, Any] | None:
            server = self.get(name)
            status = server.get("status", {})
            seen.append(status.get("phase"))
            return server if status.get("phase") == phase else None

        try:
            result: dict[str, Any] = self.wait(check, f"{name} phase {phase}", timeout)
            return result
        except AssertionError:
            status = self.get(name).get("status", {})
            raise AssertionError(f"{name} never reached {phase}; status: {json.dumps(status, indent=1)}") from None

    def deployment(self, name: str, missing_ok: bool = False) -> dict[str, Any] | None:
        try:
            obj = self.apps.read_namespaced_deployment(name, self.namespace)
        except ApiException as exc:
            if exc.status == 404 and missing_ok:
                return None
            raise
        out: dict[str, Any] = self.apps.api_client.sanitize_for_serialization(obj)
        return out

    def service(self, name: str) -> dict[str, Any]:
        out: dict[str, Any] = self.core.api_client.sanitize_for_serialization(
            self.core.read_namespaced_service(name, self.namespace))
        return out

    def pods(self, server: str) -> list[dict[str, Any]]:
        items = self.core.list_namespaced_pod(self.namespace, label_selector=f"ctxfit.io/server={server}").items
        return [self.core.api_client.sanitize_for_serialization(p) for p in items if not p.metadata.deletion_timestamp]

    def node(self, name: str) -> dict[str, Any]:
        out: dict[str, Any] = self.core.api_client.sanitize_for_serialization(self.core.read_node(name))
        return out

    def lease(self, namespace: str, name: str) -> Any:
        return client.CoordinationV1Api(self.core.api_client).read_namespaced_lease(name, namespace)

    def events(self, name: str) -> list[dict[str, Any]]:
        items = self.core.list_namespaced_event(
            self.namespace, field_selector=f"involvedObject.kind=InferenceServer,involvedObject.name={name}").items
        return [{"reason": e.reason, "message": e.message, "type": e.type} for e in items]

    def delete_all(self) -> None:
        """Delete the servers and, directly, their Deployments: the garbage collector notices a new CRD's
        owners only at its next discovery resync (~30 s), and the next test needs the GPUs back."""
        for item in self.custom.list_namespaced_custom_object(GROUP, VERSION, self.namespace, PLURAL)["items"]:
            self.custom.delete_namespaced_custom_object(GROUP, VERSION, self.namespace, PLURAL,
                                                        item["metadata"]["name"])
        self.apps.delete_collection_namespaced_deployment(self.namespace, propagation_policy="Foreground")


def base(name: str = "base") -> dict[str, Any]:
    """BASE of tests/fixtures/operator-faults.md: Llama-3.1-8B on one H100 (default node pool), vLLM, context 32768."""
    return {
        "apiVersion": f"{GROUP}/{VERSION}", "kind": "InferenceServer", "metadata": {"name": name},
        "spec": {
            "model": {"name": "meta-llama/Llama-3.1-8B-Instruct", "weightsPerGPU": "16Gi",
                      "architecture": {"attention": "gqa", "numLayers": 32, "numKVHeads": 8, "headDim": 128}},
            "engine": {"kind": "vllm"},
            "gpu": {"count": 1, "product": PRODUCT},
            "context": {"target": 32768},
        },
    }


def variant(path: str, value: Any, name: str = "base") -> dict[str, Any]:
    obj = base(name)
    cur = obj
    keys = path.split(".")
    for key in keys[:-1]:
        cur = cur.setdefault(key, {})
    cur[keys[-1]] = value
    return obj


KV_MESSAGE = (
    "ValueError: To serve at least one request with the models's max seq len (262144), (17.16 GiB KV cache is "
    "needed, which is larger than the available KV cache memory (11.70 GiB). Based on the available memory, the "
    "estimated maximum model length is 178752. Try increasing `gpu_memory_utilization` or decreasing "
    "`max_model_len` when initializing the engine."
)


def kimi_262k() -> dict[str, Any]:
    """Kimi at 262144 with weights the planner thinks leave room (64Gi/GPU); the engine says 178752."""
    obj = manifest("kimi-128k.yaml")
    obj["spec"]["context"]["target"] = 262144
    obj["spec"]["model"]["weightsPerGPU"] = "64Gi"
    return with_sim(obj, "crash", message=KV_MESSAGE, fail_if=("ctxfit.io/context-length", 178752))


LWS = ("leaderworkerset.x-k8s.io", "v1", "leaderworkersets")


def group(custom: CustomObjectsApi, namespace: str, name: str) -> dict[str, Any] | None:
    try:
        out: dict[str, Any] = custom.get_namespaced_custom_object(LWS[0], LWS[1], namespace, LWS[2], name)
        return out
    except ApiException as exc:
        if exc.status == 404:
            return None
        raise


def kubectl(cluster: Any, *args: str, user: str | None = None, input: str | None = None,
            namespace: str | None = None) -> subprocess.CompletedProcess[str]:
    cmd = [str(Path(cluster.bin_dir) / "kubectl"), "--kubeconfig", str(cluster.kubeconfig)]
    if user:
        cmd += [f"--as={user}"]
    if namespace:
        cmd += ["-n", namespace]
    return subprocess.run([*cmd, *args], input=input, capture_output=True, text=True, timeout=60)


def can_i(cluster: Any, user: str, namespace: str, verb: str, resource: str, *extra: str) -> bool:
    out = kubectl(cluster, "auth", "can-i", verb, resource, *extra, user=user, namespace=namespace)
    return out.stdout.strip() == "yes"


def bind(cluster: Any, namespace: str, user: str, role: str, kind: str = "ClusterRole") -> None:
    out = kubectl(cluster, "create", "rolebinding", f"{user}-{role}", f"--{kind.lower()}={role}", f"--user={user}",
                  namespace=namespace)
    assert out.returncode == 0, out.stderr
