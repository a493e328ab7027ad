"""On the real local control plane: hand edits of every field ctxfit renders (and of every
privilege or node choice added by hand) are reverted, claim retention follows the spec at every change, and a
ScaledObject deleted or paused by hand is seen at once (the resync is 5 minutes here: only a watch can see it).
"""

from __future__ import annotations

import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kubernetes.client.rest import ApiException

from .operator_kit import OperatorProcess, ServerClient, base

SLOW_RESYNC = {"CTXFIT_RESYNC_SECONDS": "300"}
"""No resync during a test: what is seen, is seen through a watch."""


@pytest.fixture
def slow_op(cluster: Any, crd: Path, namespace: str, tmp_path: Path) -> Iterator[OperatorProcess]:
    operator = OperatorProcess(Path(cluster.kubeconfig), namespace, tmp_path / "operator.log", **SLOW_RESYNC).start()
    yield operator
    operator.stop()
    print(f"--- operator log ---\n{operator.log_path.read_text()[-6000:]}")


def _template(api: ServerClient, name: str) -> dict[str, Any]:
    deployment = api.deployment(name)
    assert deployment is not None
    template: dict[str, Any] = deployment["spec"]["template"]
    return template


EDITS: dict[str, tuple[list[dict[str, Any]], Any]] = {
    "node-selector": ([{"op": "replace", "path": "/spec/template/spec/nodeSelector",
                        "value": {"nvidia.com/gpu.product": "NVIDIA-B200"}}],
                      lambda t: t["spec"]["nodeSelector"]["nvidia.com/gpu.product"] == "NVIDIA-H100-80GB-HBM3"),
    "init-image": ([{"op": "replace", "path": "/spec/template/spec/initContainers/0/image",
                     "value": "registry.example/evil-downloader:1"}],
                   lambda t: t["spec"]["initContainers"][0]["image"] != "registry.example/evil-downloader:1"),
    "privileged": ([{"op": "add", "path": "/spec/template/spec/containers/0/securityContext",
                     "value": {"privileged": True}}],
                   lambda t: not (t["spec"]["containers"][0].get("securityContext") or {}).get("privileged")),
    "host-network": ([{"op": "add", "path": "/spec/template/spec/hostNetwork", "value": True}],
                     lambda t: not t["spec"].get("hostNetwork")),
}


@pytest.mark.parametrize("case", list(EDITS), ids=list(EDITS))
def test_a_hand_edit_of_what_ctxfit_renders_or_a_privilege_added_is_reverted(
        slow_op: OperatorProcess, api: ServerClient, case: str) -> None:
    api.create(base())  # the default cache: a claim and the model-download init container
    api.wait_phase("base", "Ready", timeout=90)
    assert _template(api, "base")["spec"]["initContainers"][0]["name"] == "model-download"
    patch, reverted = EDITS[case]
    api.apps.patch_namespaced_deployment("base", api.namespace, patch, _content_type="application/json-patch+json")
    events = api.wait(lambda: [e for e in api.events("base") if e["reason"] == "DriftReverted"], "DriftReverted",
                      timeout=30)
    assert events[0]["type"] == "Warning"
    api.wait(lambda: reverted(_template(api, "base")), f"{case} reverted", timeout=30)
    slow_op.settle(4)
    assert len([e for e in api.events("base") if e["reason"] == "DriftReverted"]) == 1, "reverted once, no loop"


def _claim(api: ServerClient, name: str) -> Any:
    try:
        return api.core.read_namespaced_persistent_volume_claim(name, api.namespace)
    except ApiException as exc:
        if exc.status == 404:
            return None
        raise


def test_retain_added_after_creation_keeps_the_claim_when_the_server_goes(op: OperatorProcess,
                                                                           api: ServerClient) -> None:
    api.create(base())
    api.wait_phase("base", "Ready", timeout=90)
    uid = api.get("base")["metadata"]["uid"]
    claim = api.wait(lambda: _claim(api, "base-weights"), "the claim")
    assert [r.uid for r in claim.metadata.owner_references or []] == [uid]
    attempts = len(api.get("base")["status"]["attempts"])
    api.patch_spec("base", {"model": {"cache": {"volumeClaimTemplate": {"retain": True}}}})
    kept = api.wait(lambda: (c := _claim(api, "base-weights")) and not c.metadata.owner_references and c,
                    "the ownerReference removed", timeout=30)
    assert kept.metadata.annotations["ctxfit.io/owner-uid"] == uid
    assert len(api.get("base")["status"]["attempts"]) == attempts, "retain restarts no engine"
    api.custom.delete_namespaced_custom_object("ctxfit.io", "v1alpha1", api.namespace, "inferenceservers", "base")
    time.sleep(8)
    survivor = _claim(api, "base-weights")
    assert survivor is not None and survivor.metadata.deletion_timestamp is None, "retained"
    api.core.delete_namespaced_persistent_volume_claim("base-weights", api.namespace)


@pytest.fixture
def keda_slow_op(cluster: Any, crd: Path, namespace: str, tmp_path: Path) -> Iterator[OperatorProcess]:
    sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "hack"))
    from addons_keda import _install_crds, keda_available

    assert keda_available(cluster), "KEDA's binaries and CRDs are built by hack/k8s-bins.sh"
    _install_crds(cluster)  # the ScaledObject kind served (no KEDA operator needed to see who writes it)
    operator = OperatorProcess(Path(cluster.kubeconfig), namespace, tmp_path / "operator.log", **SLOW_RESYNC,
                               CTXFIT_KEDA_ENABLED="true", CTXFIT_PROMETHEUS_ADDRESS="http://prometheus.invalid:9090")
    yield operator.start()
    operator.stop()
    print(f"--- operator log ---\n{operator.log_path.read_text()[-6000:]}")


def _scaled_object(api: ServerClient, name: str) -> dict[str, Any] | None:
    try:
        found: dict[str, Any] = api.custom.get_namespaced_custom_object("keda.sh", "v1alpha1", api.namespace,
                                                                        "scaledobjects", name)
        return found
    except ApiException as exc:
        if exc.status == 404:
            return None
        raise


def test_a_scaled_object_deleted_or_paused_by_hand_is_seen_at_once(keda_slow_op: OperatorProcess,
                                                                   api: ServerClient) -> None:
    obj = base()
    obj["spec"]["autoscaling"] = {"minReplicas": 1, "maxReplicas": 2}
    api.create(obj)
    first = api.wait(lambda: _scaled_object(api, "base"), "the ScaledObject", timeout=60)
    api.custom.delete_namespaced_custom_object("keda.sh", "v1alpha1", api.namespace, "scaledobjects", "base")
    again = api.wait(lambda: (s := _scaled_object(api, "base")) and s["metadata"]["uid"] != first["metadata"]["uid"]
                     and s, "created again (a watch, not the 300 s resync)", timeout=20)
    assert again["metadata"]["annotations"]["autoscaling.keda.sh/paused"] == "false"
    api.custom.patch_namespaced_custom_object("keda.sh", "v1alpha1", api.namespace, "scaledobjects", "base", {
        "metadata": {"annotations": {"autoscaling.keda.sh/paused": "true"}}})
    api.wait(lambda: (_scaled_object(api, "base") or {}).get("metadata", {}).get("annotations", {}).get(
        "autoscaling.keda.sh/paused") == "false", "resumed (the pause by hand reverted)", timeout=20)
