"""An InferenceServer whose engine really runs: hack/fake-engine's image on the harness's real node (which
advertises one NVIDIA-A10G through GFD labels and `nvidia.com/gpu` capacity, so the pod the operator renders is
scheduled there unchanged), with the operator in-cluster from the chart (as tests/e2e/test_chart_incluster.py).

The fake engine holds a 3 GiB KV pool at 128 KiB per token (Llama 3.1 8B's): 24,576 tokens. The plan for the
A10G asks for 32,768, so:

1. the `model-download` init container really runs (the engine image's huggingface_hub, `snapshot_download`)
   against a Hub stand-in on the host end of the node's veth (`HF_ENDPOINT` from spec.engine.env), into the
   server's weights claim;
2. the first start fails as vLLM does (the real `_check_enough_kv_cache_memory` text, exit 1); the kubelet
   restarts it; the operator reads the failure back, classifies KVCacheTooSmall from that text and steps down;
3. the second start fits: the kubelet's startup probe on /health waits through the load (the port is closed
   until the engine is up), readiness and liveness pass, the server is Ready;
4. the operator read the engine's start-up log through the kubelet: `status.observed` is the fake engine's pool,
   and `/v1/models` answers with `max_model_len` = the context in status.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from typing import Any

import cluster_realnode as rn
import ctxfit_cluster as cc
import images
import pytest
from hub_standin import HubStandIn, tiny_safetensors

from .realnode_kit import http_get
from .test_chart_e2e import CHART, helm
from .test_chart_incluster import _ready_pod, _values

GIB = 1 << 30
MODEL = "meta-llama/Llama-3.1-8B-Instruct"
KV_POOL = 3 * GIB
PER_TOKEN = 131072  # 32 layers x 8 KV heads x 128 x 2 (K, V) x 2 bytes
CONFIG = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 4096, "num_hidden_layers": 32,
          "num_attention_heads": 32, "num_key_value_heads": 8, "head_dim": 128, "intermediate_size": 14336,
          "max_position_embeddings": 131072, "vocab_size": 128256, "torch_dtype": "bfloat16"}
REPO = {
    "config.json": json.dumps(CONFIG).encode(),
    "generation_config.json": b'{"bos_token_id": 128000, "eos_token_id": [128001, 128009]}',
    "tokenizer.json": b'{"version": "1.0", "model": {"type": "BPE", "vocab": {}, "merges": []}}',
    "tokenizer_config.json": b'{"model_max_length": 131072}',
    "model-00001-of-00001.safetensors": tiny_safetensors({"lm_head.weight": ("BF16", [64, 64])}),
    "README.md": b"not downloaded: not a file the engine loads",
}


@pytest.fixture
def operator_in_cluster(cluster: cc.Cluster, real_node: rn.RealNode, operator_image: str,
                        ) -> Iterator[str]:
    rel = ns = f"ctxfit-fe-{uuid.uuid4().hex[:6]}"
    helm(cluster, "install", rel, str(CHART), "--namespace", ns, "--create-namespace", "--take-ownership",
         *_values(operator_image), "--wait", "--timeout", "180s")
    try:
        yield ns
    finally:
        helm(cluster, "uninstall", rel, "--namespace", ns, "--wait", check=False)
        cluster.kubectl("delete", "namespace", ns, "--wait=false", "--ignore-not-found", check=False)


def _server(name: str, image: str, hub_url: str) -> dict[str, Any]:
    return {
        "apiVersion": "ctxfit.io/v1alpha1", "kind": "InferenceServer", "metadata": {"name": name},
        "spec": {
            "model": {"name": MODEL},
            "engine": {"kind": "vllm", "version": "0.19.0", "image": image, "env": [
                {"name": "HF_ENDPOINT", "value": hub_url},
                {"name": "FAKE_ENGINE_KV_CACHE_BYTES", "value": str(KV_POOL)},
                {"name": "FAKE_ENGINE_KV_BYTES_PER_TOKEN", "value": str(PER_TOKEN)},
                {"name": "FAKE_ENGINE_LOAD_SECONDS", "value": "12"}]},
            "gpu": {"count": 1, "product": rn.DEFAULT_GPUS.product},
            "context": {"target": 32768, "minimum": 4096},
            "resources": {"memory": "2Gi", "cpu": "500m", "shm": "64Mi"},
            "startup": {"timeoutSeconds": 60},
            "pod": {"tolerations": [rn.TOLERATION]},
        },
    }


@pytest.mark.timeout(900)
def test_fake_engine_on_the_real_node(cluster: cc.Cluster, real_node: rn.RealNode,
                                      container_engine: images.Engine, fake_engine_image: str,
                                      operator_in_cluster: str, namespace: str, tmp_path) -> None:
    archive = tmp_path / "fake-engine.tar"
    container_engine.save(fake_engine_image, archive)
    real_node.import_image(archive)
    assert _ready_pod(cluster, operator_in_cluster) is not None
    name = "fake-llama"
    with HubStandIn({MODEL: REPO}, host=real_node.host_ip) as hub:
        cluster.apply(_server(name, fake_engine_image, hub.url), namespace=namespace)

        def ready() -> dict[str, Any] | None:
            obj: dict[str, Any] = cluster.kubectl_json("-n", namespace, "get", "inferenceserver", name)
            status = obj.get("status", {})
            if status.get("phase") == "Failed":
                pytest.fail(f"Failed:\n{json.dumps(status, indent=1)[-4000:]}")
            return obj if status.get("phase") == "Ready" else None

        try:
            server = cc.wait_until(ready, 420, f"{namespace}/{name} Ready", interval=1)
        except cc.HarnessError:
            pytest.fail("\n".join([
                cluster.kubectl("-n", namespace, "get", "inferenceserver", name, "-o", "yaml", check=False)[-4000:],
                cluster.kubectl("-n", namespace, "get", "pods", "-o", "wide", check=False),
                cluster.kubectl("-n", namespace, "describe", "pods", check=False)[-4000:],
                cluster.kubectl("-n", operator_in_cluster, "logs", "-l", "app.kubernetes.io/name=ctxfit", "--tail=80",
                                check=False)]))
        status = server["status"]

        # 2. the first start failed with the engine's own text, classified and stepped down from
        attempts = status["attempts"]
        assert len(attempts) == 2, json.dumps(attempts, indent=1)
        assert attempts[0]["effective"]["contextLength"] == 32768
        assert attempts[0]["failureKind"] == "KVCacheTooSmall", json.dumps(attempts[0], indent=1)
        assert "24576" in (attempts[0].get("evidence") or ""), attempts[0]
        context = status["contextLength"]
        assert context == attempts[1]["effective"]["contextLength"] and context * PER_TOKEN <= KV_POOL

        # 1. the download ran for real, against the stand-in, only the files the engine loads
        pods = cluster.kubectl_json("-n", namespace, "get", "pods", "-l", f"ctxfit.io/server={name}")["items"]
        pod = next(p for p in pods
                   if p["status"].get("phase") == "Running" and not p["metadata"].get("deletionTimestamp"))
        assert pod["spec"]["nodeName"] == real_node.name
        init = pod["status"]["initContainerStatuses"][0]
        assert init["name"] == "model-download" and init["state"]["terminated"]["exitCode"] == 0, init
        download_log = cluster.kubectl("-n", namespace, "logs", pod["metadata"]["name"], "-c", "model-download")
        assert "ctxfit-download: complete" in download_log, download_log
        assert hub.served["model-00001-of-00001.safetensors"] == len(REPO["model-00001-of-00001.safetensors"])
        assert hub.served["config.json"] > 0 and "README.md" not in hub.served

        # 3. probes: the engine container started (startup probe passed) and is ready
        engine = next(c for c in pod["status"]["containerStatuses"] if c["name"] == "engine")
        assert engine["started"] is True and engine["ready"] is True
        spec_engine = next(c for c in pod["spec"]["containers"] if c["name"] == "engine")
        assert spec_engine["startupProbe"]["httpGet"]["path"] == "/health"

        # 4. the start-up log, read back through the kubelet, and the engine's own answer
        observed = status["observed"]
        assert observed["kvCacheBytes"] == KV_POOL and observed["kvCacheTokens"] == KV_POOL // PER_TOKEN
        assert observed["servedContextLength"] == context
        models = json.loads(http_get(f"http://{pod['status']['podIP']}:8000/v1/models"))
        assert models["data"][0]["id"] == MODEL and models["data"][0]["max_model_len"] == context

    cluster.kubectl("-n", namespace, "delete", "inferenceserver", name, "--wait=true", "--timeout=120s")
