"""The in-cluster demo on any cluster whose node really runs pods (`make kind-demo` runs it on kind;
tests/e2e/test_kind_demo.py on the harness's real node):

1. fake GPUs on ``--node``: the GFD labels and ``nvidia.com/gpu`` capacity of the GPUs manifests/kimi-128k.yaml
   asks for (8x RTX PRO 6000), as cluster_nodes.advertise_gpus gives the harness's real node;
2. the chart from charts/ctxfit with the built image (``--image``, pullPolicy Never: loaded, not pulled) and
   hack/fake-engine as the operator's default vLLM image (``operator.vllmImage``);
3. a Hub stand-in (hack/hub_standin.py in the fake engine image) as a Deployment and Service, so the server's
   ``model-download`` fetches a tiny repo instead of Kimi's 540 GB;
4. manifests/kimi-128k.yaml with two changes a laptop needs: host resources of a few GiB instead of 500Gi (no
   kind node has them), and engine env pointing the download at the stand-in (``HF_ENDPOINT``, by ClusterIP) and
   sizing the fake engine's KV pool from ``ctxfit plan`` (0.5 GiB below the plan's, as the local demo does);
5. waits until the server is Ready and prints ``kubectl get infsrv``, its Events and the engine's /v1/models.

Only the standard library, PyYAML and the ``ctxfit`` CLI; talks to the cluster through kubectl and helm.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import yaml
from cluster_nodes import GPU_TYPES, NodeSpec, advertise_gpus

REPO = Path(__file__).resolve().parent.parent
KIMI = REPO / "manifests" / "kimi-128k.yaml"
GIB = 1 << 30
HUB_PORT = 8080


class Kube:
    def __init__(self, kubectl: str, helm: str, kubeconfig: str | None) -> None:
        self.kc = ["--kubeconfig", kubeconfig] if kubeconfig else []
        self._kubectl, self._helm = kubectl, helm

    def kubectl(self, *args: str, input: str | None = None, check: bool = True) -> str:
        proc = subprocess.run([self._kubectl, *self.kc, *args], input=input, capture_output=True, text=True,
                              check=False, timeout=300)
        if check and proc.returncode != 0:
            raise SystemExit(f"kubectl {' '.join(args)}: {proc.stderr.strip()}")
        return proc.stdout

    def helm(self, *args: str) -> str:
        proc = subprocess.run([self._helm, *self.kc, *args], capture_output=True, text=True, check=False, timeout=600)
        if proc.returncode != 0:
            raise SystemExit(f"helm {' '.join(args)}: {proc.stderr.strip()[-2000:]}")
        return proc.stdout


def plan(manifest: Path) -> dict[str, Any]:
    out = subprocess.run([sys.executable, "-m", "ctxfit.cli", "plan", "-f", str(manifest), "-o", "json"],
                         capture_output=True, text=True, check=True)
    result: dict[str, Any] = json.loads(out.stdout)
    return result


def hub(namespace: str, image: str, model: str, tolerations: list[dict[str, Any]]) -> list[dict[str, Any]]:
    labels = {"app.kubernetes.io/name": "hub-standin"}
    return [
        {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "hub-standin", "namespace": namespace},
         "spec": {"selector": {"matchLabels": labels}, "template": {"metadata": {"labels": labels}, "spec": {
             "tolerations": tolerations,
             "containers": [{"name": "hub", "image": image, "imagePullPolicy": "IfNotPresent",
                             "command": ["python3", "/opt/engine/app/hub_standin.py", "--port", str(HUB_PORT), model],
                             "ports": [{"containerPort": HUB_PORT}],
                             "readinessProbe": {"tcpSocket": {"port": HUB_PORT}, "periodSeconds": 1}}]}}}},
        {"apiVersion": "v1", "kind": "Service", "metadata": {"name": "hub-standin", "namespace": namespace},
         "spec": {"selector": labels, "ports": [{"port": HUB_PORT, "targetPort": HUB_PORT}]}},
    ]


def demo_server(manifest: Path, hub_url: str, tolerations: list[dict[str, Any]]) -> dict[str, Any]:
    server: dict[str, Any] = yaml.safe_load(manifest.read_text())
    planned = plan(manifest)
    spec = server["spec"]
    spec["resources"] = {"memory": "2Gi", "cpu": "500m", "shm": "256Mi"}
    spec["engine"].setdefault("env", []).extend([
        {"name": "HF_ENDPOINT", "value": hub_url},
        {"name": "FAKE_ENGINE_KV_CACHE_BYTES", "value": str(planned["kvPoolBytes"] - GIB // 2)},
        {"name": "FAKE_ENGINE_KV_BYTES_PER_TOKEN", "value": str(planned["kvBytesPerToken"])},
        {"name": "FAKE_ENGINE_LOAD_SECONDS", "value": "5"},
    ])
    if tolerations:
        spec.setdefault("pod", {})["tolerations"] = tolerations
    return server


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--node", required=True, help="the node to give fake GPUs (kind: <cluster>-control-plane)")
    ap.add_argument("--image", default="localhost/ctxfit:dev")
    ap.add_argument("--engine-image", default="localhost/ctxfit-fake-engine:dev")
    ap.add_argument("--kubeconfig")
    ap.add_argument("--kubectl", default="kubectl")
    ap.add_argument("--helm", default="helm")
    ap.add_argument("--namespace", default="ctxfit-demo", help="where kimi-128k and the Hub stand-in go")
    ap.add_argument("--release-namespace", default="ctxfit-system")
    ap.add_argument("--toleration", action="append", default=[], help="a taint key the pods must tolerate")
    ap.add_argument("--timeout", type=float, default=600)
    opts = ap.parse_args()
    kube = Kube(opts.kubectl, opts.helm, opts.kubeconfig)
    tolerations = [{"key": key, "operator": "Exists"} for key in opts.toleration]
    server = yaml.safe_load(KIMI.read_text())
    gpu_type = next(name for name, t in GPU_TYPES.items() if t["product"] == server["spec"]["gpu"]["product"])
    gpus = NodeSpec(name=opts.node, gpu_count=server["spec"]["gpu"]["count"], **GPU_TYPES[gpu_type])
    print(f"== fake GPUs on node {opts.node}: {gpus.gpu_count}x {gpus.product}", flush=True)
    advertise_gpus(kube.kubectl, opts.node, gpus)

    repository, _, tag = opts.image.rpartition(":")
    print(f"== helm install ctxfit ({opts.image}, default vLLM image {opts.engine_image})", flush=True)
    values = ["--set", f"image.repository={repository}", "--set", f"image.tag={tag}",
              "--set", "image.pullPolicy=Never", "--set", f"operator.vllmImage={opts.engine_image}",
              "--set-json", f"tolerations={json.dumps(tolerations)}"]
    kube.helm("upgrade", "--install", "ctxfit", str(REPO / "charts" / "ctxfit"), "--namespace",
              opts.release_namespace, "--create-namespace", "--take-ownership", *values, "--wait", "--timeout", "300s")

    ns = opts.namespace
    if kube.kubectl("get", "namespace", ns, check=False) == "":
        kube.kubectl("create", "namespace", ns)
    print("== Hub stand-in", flush=True)
    model = server["spec"]["model"]["name"]
    kube.kubectl("apply", "-f", "-", input=yaml.safe_dump_all(hub(ns, opts.engine_image, model, tolerations)))
    kube.kubectl("-n", ns, "rollout", "status", "deployment/hub-standin", "--timeout=180s")
    hub_ip = kube.kubectl("-n", ns, "get", "service", "hub-standin", "-o", "jsonpath={.spec.clusterIP}").strip()

    name = server["metadata"]["name"]
    print(f"== {KIMI.relative_to(REPO)} (host resources lowered for a laptop, download from the stand-in)", flush=True)
    kube.kubectl("-n", ns, "apply", "-f", "-",
                 input=yaml.safe_dump(demo_server(KIMI, f"http://{hub_ip}:{HUB_PORT}", tolerations)))
    deadline = time.monotonic() + opts.timeout
    phase = ""
    while time.monotonic() < deadline:
        status = json.loads(kube.kubectl("-n", ns, "get", "inferenceserver", name, "-o", "json")).get("status", {})
        if status.get("phase") != phase:
            phase = status.get("phase", "")
            print(f"   phase {phase}: {status.get('message', '')}", flush=True)
        if phase in ("Ready", "Failed"):
            break
        time.sleep(2)
    print(kube.kubectl("-n", ns, "get", "inferenceserver", name, "-o", "wide"))
    print(kube.kubectl("-n", ns, "get", "events", "--field-selector", f"involvedObject.name={name}",
                       "--sort-by=.lastTimestamp", check=False))
    return 0 if phase == "Ready" else 1


if __name__ == "__main__":
    sys.exit(main())
