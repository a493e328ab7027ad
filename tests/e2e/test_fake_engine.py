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
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import cluster_realnode as rn
import ctxfit_cluster as cc
import images
import pytest
from hub_standin import HubStandIn

from . import fake_engine_kit as kit
from .chart_kit import ready_pod
from .realnode_kit import http_get


@pytest.fixture
def operator_in_cluster(cluster: cc.Cluster, real_node: rn.RealNode, operator_image: str,
                        ) -> Iterator[str]:
    with kit.chart_operator(cluster, operator_image, "ctxfit-fe") as ns:
        yield ns


@pytest.mark.timeout(900)
def test_fake_engine_on_the_real_node(cluster: cc.Cluster, real_node: rn.RealNode,
                                      container_engine: images.Engine, fake_engine_image: str,
                                      operator_in_cluster: str, namespace: str, tmp_path: Path) -> None:
    kit.load_fake_engine(container_engine, fake_engine_image, real_node, tmp_path)
    assert ready_pod(cluster, operator_in_cluster) is not None
    name = "fake-llama"
    with HubStandIn({kit.MODEL: kit.REPO}, host=real_node.host_ip) as hub:
        server_object = kit.fake_engine_server(name, fake_engine_image, hub.url, kv_pool=kit.KV_POOL, load_seconds=12,
                                               startup_timeout=60)
        cluster.apply(server_object, namespace=namespace)
        try:
            server: dict[str, Any] = cc.wait_until(lambda: kit.ready_server(cluster, namespace, name), 420,
                                                   f"{namespace}/{name} Ready", interval=1)
        except cc.HarnessError:
            pytest.fail(kit.diagnose(cluster, operator_in_cluster, namespace))
        status = server["status"]

        # 2. the first start failed with the engine's own text, classified and stepped down from
        attempts = status["attempts"]
        assert len(attempts) == 2, json.dumps(attempts, indent=1)
        assert attempts[0]["effective"]["contextLength"] == 32768
        assert attempts[0]["failureKind"] == "KVCacheTooSmall", json.dumps(attempts[0], indent=1)
        assert "24576" in (attempts[0].get("evidence") or ""), attempts[0]
        context = status["contextLength"]
        assert context == attempts[1]["effective"]["contextLength"] and context * kit.PER_TOKEN <= kit.KV_POOL

        # 1. the download ran for real, against the stand-in, only the files the engine loads
        pods = cluster.kubectl_json("-n", namespace, "get", "pods", "-l", f"ctxfit.io/server={name}")["items"]
        pod = next(p for p in pods
                   if p["status"].get("phase") == "Running" and not p["metadata"].get("deletionTimestamp"))
        assert pod["spec"]["nodeName"] == real_node.name
        init = pod["status"]["initContainerStatuses"][0]
        assert init["name"] == "model-download" and init["state"]["terminated"]["exitCode"] == 0, init
        download_log = cluster.kubectl("-n", namespace, "logs", pod["metadata"]["name"], "-c", "model-download")
        assert "ctxfit-download: complete" in download_log, download_log
        assert hub.served["model-00001-of-00001.safetensors"] == len(kit.REPO["model-00001-of-00001.safetensors"])
        assert hub.served["config.json"] > 0 and "README.md" not in hub.served

        # 3. probes: the engine container started (startup probe passed) and is ready
        engine = next(c for c in pod["status"]["containerStatuses"] if c["name"] == "engine")
        assert engine["started"] is True and engine["ready"] is True
        spec_engine = next(c for c in pod["spec"]["containers"] if c["name"] == "engine")
        assert spec_engine["startupProbe"]["httpGet"]["path"] == "/health"

        # 4. the start-up log, read back through the kubelet, and the engine's own answer
        observed = status["observed"]
        assert observed["kvCacheBytes"] == kit.KV_POOL and observed["kvCacheTokens"] == kit.KV_POOL // kit.PER_TOKEN
        assert observed["servedContextLength"] == context
        models = json.loads(http_get(f"http://{pod['status']['podIP']}:8000/v1/models"))
        assert models["data"][0]["id"] == kit.MODEL and models["data"][0]["max_model_len"] == context

    cluster.kubectl("-n", namespace, "delete", "inferenceserver", name, "--wait=true", "--timeout=120s")
