"""What the e2e tests whose engine really runs share (tests/e2e/test_fake_engine.py,
tests/e2e/test_chart_incluster_gateway.py):

- ``REPO``: the Llama 3.1 8B repo (its real config, a tiny shard) the Hub stand-in (hack/hub_standin.py) serves the
  server's ``model-download`` init container; ``PER_TOKEN``: its KV bytes per token; ``KV_POOL``: the fake engine's
  pool (3 GiB: 24,576 tokens);
- ``chart_operator``: the operator installed in-cluster by helm from the chart (the operator image), uninstalled after;
- ``load_fake_engine``: hack/fake-engine's image imported into the real node's containerd;
- ``fake_engine_server``: an InferenceServer of that engine on the real node (its pool, load time and the Hub through
  ``spec.engine.env``);
- ``ready_server``: the server when Ready, a test failure with its status when Failed (for ``cc.wait_until``);
- ``diagnose``: what a test that timed out shows (the servers, their pods, the operator's log).
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import cluster_realnode as rn
import ctxfit_cluster as cc
import images
import pytest
from hub_standin import tiny_safetensors

from .chart_kit import CHART, helm, incluster_values

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


@contextmanager
def chart_operator(cluster: cc.Cluster, operator_image: str, prefix: str, *sets: str) -> Iterator[str]:
    """``helm install`` of the chart with the operator image (and ``sets``: more helm flags) into a new namespace
    ``<prefix>-<random>`` (the release's name too), waited for; yields that namespace; uninstalls and deletes it."""
    rel = ns = f"{prefix}-{uuid.uuid4().hex[:6]}"
    helm(cluster, "install", rel, str(CHART), "--namespace", ns, "--create-namespace", "--take-ownership",
         *incluster_values(operator_image), *sets, "--wait", "--timeout", "180s")
    try:
        yield ns
    finally:
        helm(cluster, "uninstall", rel, "--namespace", ns, "--wait", check=False)
        cluster.kubectl("delete", "namespace", ns, "--wait=false", "--ignore-not-found", check=False)


def load_fake_engine(container_engine: images.Engine, image: str, node: rn.RealNode, tmp_path: Path) -> None:
    """The fake engine's image saved by the container engine and imported into the real node's containerd."""
    archive = tmp_path / "fake-engine.tar"
    container_engine.save(image, archive)
    node.import_image(archive)


def fake_engine_server(name: str, image: str, hub_url: str, *, kv_pool: int, load_seconds: int,
                       startup_timeout: int, gpus: int = 1, **spec: Any) -> dict[str, Any]:
    """A vLLM 0.19 InferenceServer of ``MODEL`` whose engine is the fake engine ``image`` on the real node: a
    ``kv_pool`` bytes KV pool at ``PER_TOKEN``, ``load_seconds`` to load, the Hub at ``hub_url``; ``gpus`` A10Gs,
    context 32,768 (minimum 4,096); ``spec``: more spec fields (parallelism, routing)."""
    return {
        "apiVersion": "ctxfit.io/v1alpha1", "kind": "InferenceServer", "metadata": {"name": name},
        "spec": {
            "model": {"name": MODEL},
            "engine": {"kind": "vllm", "version": "0.19.0", "image": image, "env": [
                {"name": "HF_ENDPOINT", "value": hub_url},
                {"name": "FAKE_ENGINE_KV_CACHE_BYTES", "value": str(kv_pool)},
                {"name": "FAKE_ENGINE_KV_BYTES_PER_TOKEN", "value": str(PER_TOKEN)},
                {"name": "FAKE_ENGINE_LOAD_SECONDS", "value": str(load_seconds)}]},
            "gpu": {"count": gpus, "product": rn.DEFAULT_GPUS.product},
            "context": {"target": 32768, "minimum": 4096},
            "resources": {"memory": "2Gi", "cpu": "500m", "shm": "64Mi"},
            "startup": {"timeoutSeconds": startup_timeout},
            "pod": {"tolerations": [rn.TOLERATION]},
            **spec,
        },
    }


def ready_server(cluster: cc.Cluster, ns: str, name: str) -> dict[str, Any] | None:
    """The InferenceServer ``ns/name`` when Ready, None before; fails the test (with its status) when Failed."""
    obj: dict[str, Any] = cluster.kubectl_json("-n", ns, "get", "inferenceserver", name)
    status = obj.get("status", {})
    if status.get("phase") == "Failed":
        pytest.fail(f"{name} Failed:\n{json.dumps(status, indent=1)[-4000:]}")
    return obj if status.get("phase") == "Ready" else None


def diagnose(cluster: cc.Cluster, release_ns: str, ns: str, *more: tuple[str, ...], pods: str = "") -> str:
    """The InferenceServers of ``ns`` (YAML), its pods (wide, with labels) and their description (``pods``: a label
    selector), each ``more`` ``kubectl get`` of ``ns``, and the operator's log (release namespace ``release_ns``)."""
    selector = ("-l", pods) if pods else ()
    return "\n".join([
        cluster.kubectl("-n", ns, "get", "inferenceservers", "-o", "yaml", check=False)[-5000:],
        cluster.kubectl("-n", ns, "get", "pods", "-o", "wide", "--show-labels", check=False),
        cluster.kubectl("-n", ns, "describe", "pods", *selector, check=False)[-4000:],
        *(cluster.kubectl("-n", ns, "get", *args, check=False)[-2000:] for args in more),
        cluster.kubectl("-n", release_ns, "logs", "-l", "app.kubernetes.io/name=ctxfit", "--tail=80", check=False),
    ])
