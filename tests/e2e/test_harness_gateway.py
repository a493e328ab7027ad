"""The gateway add-on of the harness: the Gateway API and InferencePool CRDs (fetched pinned by
hack/gateway-bins.sh) install and serve, and GIE's lightweight endpoint picker (built from the same module)
reads a rendered InferencePool and admits exactly the pods it should: Ready, selected by the pool label.
No ctxfit operator here: a rendered pool and hand-made pods with the labels ctxfit renders (kwok runs them)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from addons_gateway import (
    HTTPROUTE_CRD,
    INFERENCE_POOL_CRD,
    Lwepp,
    gateway_available,
    install_gateway_crds,
    lwepp_available,
    start_lwepp,
    stop_lwepp,
    wait_lwepp_pods,
)
from ctxfit.api import InferenceServer
from ctxfit.render.inferencepool import POOL_LABEL, pool_input, render_inference_pool

GOLDEN = Path(__file__).resolve().parents[1] / "golden" / "gateway"
IMAGE = "ghcr.io/ctxfit/fake-engine:sim"  # never pulled: kwok runs no containers


@pytest.fixture(scope="module")
def gateway_crds(cluster: Any) -> list[str]:
    if not gateway_available(cluster):
        pytest.fail("Gateway API / InferencePool CRDs missing: run bash hack/k8s-bins.sh (make test does)")
    return install_gateway_crds(cluster)


@pytest.fixture
def lwepp_for(cluster: Any) -> Iterator[Any]:
    if not lwepp_available(cluster):
        pytest.fail("lwepp not built: run bash hack/k8s-bins.sh (make test does)")

    def start(namespace: str, pool: str) -> Lwepp:
        return start_lwepp(cluster, namespace, pool)

    yield start
    stop_lwepp(cluster)


def _pod(name: str, labels: dict[str, str]) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "labels": labels},
            "spec": {"containers": [{"name": "engine", "image": IMAGE,
                                     "ports": [{"name": "http", "containerPort": 8000}]}]}}


def test_crds_are_established_and_served(cluster: Any, gateway_crds: list[str]) -> None:
    assert INFERENCE_POOL_CRD in gateway_crds and HTTPROUTE_CRD in gateway_crds
    assert "gateways.gateway.networking.k8s.io" in gateway_crds
    served = cluster.kubectl("api-resources", "--api-group=inference.networking.k8s.io", "-o", "name").split()
    assert served == [INFERENCE_POOL_CRD]


def test_lwepp_admits_the_ready_pods_the_pool_selects(cluster: Any, gateway_crds: list[str], namespace: str,
                                                      lwepp_for: Any) -> None:
    srv = InferenceServer.model_validate(yaml.safe_load((GOLDEN / "vllm-single" / "inferenceserver.yaml")
                                                        .read_text()))
    pool = render_inference_pool(pool_input(srv.metadata.name, namespace, "00000000-0000-4000-8000-000000000026",
                                            srv.spec))
    del pool["metadata"]["ownerReferences"]  # no InferenceServer here: the garbage collector would delete it
    cluster.apply(pool, namespace=namespace)
    name = pool["metadata"]["name"]
    serving = {POOL_LABEL: name}
    cluster.apply([_pod("leader-0", {**serving, "ctxfit.io/role": "leader"}),
                   _pod("leader-1", serving),
                   _pod("unready", {**serving, "sim.ctxfit.io/behavior": "never-ready"}),
                   _pod("worker-0", {"ctxfit.io/role": "worker"}),
                   _pod("other-pool", {POOL_LABEL: "another"})], namespace=namespace)
    lwepp = lwepp_for(namespace, name)
    got = wait_lwepp_pods(lwepp, {"leader-0", "leader-1"}, timeout=60)
    assert got == {"leader-0", "leader-1"}, lwepp.log_path.read_text()[-3000:]
    assert lwepp.selector() == serving
