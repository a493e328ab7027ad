"""The resolver pod really runs: on the harness's real node (a kubelet with containerd, the operator
image imported; tests/e2e/realnode_kit.py), pinned there by ``CTXFIT_RESOLVER_NODE_SELECTOR``.

A gated repo with ``tokenSecretRef``: the operator (a host process) creates the resolver pod; the real kubelet
reads the Secret for its ``secretKeyRef`` (the operator never does), the operator's image runs
``python -m ctxfit.hub.resolver`` against the Hub stand-in listening on the host end of the node's veth, the
kubelet writes the termination message, the operator reads it, deletes the pod and plans; the engine pod then
runs on a kwok GPU node (simulated) and the server is Ready with the resolved plan.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.hubfixtures.repos import fixture_repo
from tests.hubfixtures.server import TOKEN, HubStandIn

from .operator_kit import OperatorProcess, ServerClient
from .resolution_kit import assert_resolved, info_requests, server


@pytest.fixture
def node_hub(real_node: Any) -> Iterator[HubStandIn]:
    stand_in = HubStandIn(host=real_node.host_ip).start()
    yield stand_in
    stand_in.stop()


@pytest.fixture
def node_op(cluster: Any, crd: Path, namespace: str, tmp_path: Path, node_hub: HubStandIn, real_node: Any,
            operator_image: str) -> Iterator[OperatorProcess]:
    operator = OperatorProcess(Path(cluster.kubeconfig), namespace, tmp_path / "operator.log", HF_ENDPOINT=node_hub.url,
                               HF_HOME=str(tmp_path / "hf"), CTXFIT_CACHE=str(tmp_path / "ctxfit"),
                               CTXFIT_RESOLVER_IMAGE=operator_image,
                               CTXFIT_RESOLVER_NODE_SELECTOR=f"kubernetes.io/hostname={real_node.name}",
                               CTXFIT_RESOLVER_TOLERATIONS="ctxfit.io/real-node=true:NoSchedule",
                               CTXFIT_RESOLVE_POLL_SECONDS="0.5").start()
    yield operator
    operator.stop()
    log = operator.log_path.read_text()
    print(f"--- operator log ({operator.log_path}) ---\n{log[-6000:]}")
    assert TOKEN not in log


def test_a_gated_repo_is_resolved_by_a_resolver_pod_that_really_runs(
        api: ServerClient, node_op: OperatorProcess, node_hub: HubStandIn, real_node: Any) -> None:
    repo = "meta-llama/Llama-3.2-3B"
    api.core.create_namespaced_secret(api.namespace, {"metadata": {"name": "hf"}, "stringData": {"token": TOKEN}})
    api.create(server("llama", repo, tokenSecretRef={"name": "hf", "key": "token"}))
    seen: dict[str, Any] = {}

    def resolver_ran() -> bool:
        items = api.core.list_namespaced_pod(api.namespace, label_selector="ctxfit.io/resolver=llama").items
        for p in items:
            seen["pod"] = api.core.api_client.sanitize_for_serialization(p)
        return info_requests(node_hub, repo) > 0

    api.wait(resolver_ran, "the resolver pod to reach the Hub stand-in", timeout=120)
    pod = seen["pod"]
    assert pod["spec"]["nodeSelector"] == {"kubernetes.io/hostname": real_node.name}
    assert TOKEN not in str(pod["spec"])
    ready = assert_resolved(api, "llama", repo)
    assert ready["status"]["model"]["resolved"]["sha"] == fixture_repo(repo).sha
    api.wait(lambda: not api.core.list_namespaced_pod(api.namespace, label_selector="ctxfit.io/resolver=llama").items,
             "the resolver pod deleted", timeout=60)


def test_a_preloaded_claim_is_resolved_by_a_resolver_pod_that_really_mounts_it(
        api: ServerClient, node_op: OperatorProcess, node_hub: HubStandIn) -> None:
    api.core.create_namespaced_persistent_volume_claim(api.namespace, {
        "metadata": {"name": "weights"},
        "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "20Gi"}}}})
    claim = api.wait(lambda: (c := api.core.read_namespaced_persistent_volume_claim("weights", api.namespace))
                     and c.status.phase == "Bound" and c, "the claim bound")
    root = Path(api.core.read_persistent_volume(claim.spec.volume_name).spec.host_path.path)
    checkout = root / "preloaded" / "qwen3-8b"
    checkout.mkdir(parents=True, exist_ok=True)
    for name, f in fixture_repo("Qwen/Qwen3-8B").files.items():
        path = checkout / name
        if f.header:
            with path.open("wb") as out:
                out.write(f.header)
                out.truncate(f.size)  # sparse: only the headers are real bytes
        else:
            path.write_bytes(f.content)
    for p in [root, root / "preloaded", checkout, *checkout.iterdir()]:  # readable by the image's user
        p.chmod(0o755 if p.is_dir() else 0o644)
    before = len(node_hub.requests)
    api.create(server("preloaded", "/models/qwen3-8b", cache={"persistentVolumeClaim": {
        "claimName": "weights", "subPath": "preloaded", "readOnly": True}}))
    ready = api.wait_phase("preloaded", "Ready", timeout=180)
    resolved = ready["status"]["model"]["resolved"]
    assert resolved["source"] == "volume" and resolved["repo"] == "/models/qwen3-8b"
    assert resolved["checkpointBytes"] == fixture_repo("Qwen/Qwen3-8B").checkpoint().checkpoint_bytes
    assert len(node_hub.requests) == before  # read from the volume, not the Hub
