"""Weights cache against the real local control plane.

The harness's default StorageClass uses kube-controller-manager's hostPath provisioner, so claims really
bind (hack/cluster_storage.py); kwok's simulated download (hack/kwok/download-stages.yaml) plays the
`model-download` init container: it succeeds after a delay, or fails with a given message, optionally
only while the pod's claim is smaller than a threshold.
"""

from __future__ import annotations

import time
from typing import Any

from cluster_storage import with_download
from ctxfit.api import GiB, quantity_to_bytes
from kubernetes.client.rest import ApiException

from .operator_kit import KV_MESSAGE, OperatorProcess, ServerClient, condition, manifest, with_sim

NAME = "kimi-k25"
GATED = (
    "huggingface_hub.errors.GatedRepoError: 403 Client Error. (Request ID: Root=1-6750)\n\nCannot access gated repo "
    "for url https://huggingface.co/api/models/moonshotai/Kimi-K2.5/revision/main.\nAccess to model "
    "moonshotai/Kimi-K2.5 is restricted and you are not in the authorized list. Visit "
    "https://huggingface.co/moonshotai/Kimi-K2.5 to ask for access."
)
ENOSPC = "OSError: [Errno 28] No space left on device: '/models/hub/models--moonshotai--Kimi-K2.5/blobs/7d1.incomplete'"


def claims(api: ServerClient) -> dict[str, dict[str, Any]]:
    items = api.core.list_namespaced_persistent_volume_claim(api.namespace).items
    return {c.metadata.name: api.core.api_client.sanitize_for_serialization(c) for c in items
            if not c.metadata.deletion_timestamp}


def claim_of(pod: dict[str, Any]) -> str:
    return next(v["persistentVolumeClaim"]["claimName"] for v in pod["spec"]["volumes"] if "persistentVolumeClaim" in v)


def test_one_claim_serves_every_attempt(api: ServerClient, op: OperatorProcess) -> None:
    obj = manifest("kimi-128k.yaml")
    obj["spec"]["context"]["target"] = 262144
    obj["spec"]["model"]["weightsPerGPU"] = "64Gi"
    with_sim(obj, "crash", message=KV_MESSAGE, fail_if=("ctxfit.io/context-length", 178752))
    with_download(obj, delay_ms=2500)
    api.create(obj)
    downloading = api.wait_phase(NAME, "Downloading")
    assert "downloading moonshotai/Kimi-K2.5 (main) into claim kimi-k25-weights" in downloading["status"]["message"]
    bound = api.wait(lambda: claims(api).get("kimi-k25-weights", {}).get("status", {}).get("phase") == "Bound",
                     "claim bound")
    assert bound
    first = claim_of(api.wait(lambda: api.pods(NAME), "attempt 1 pod")[0])
    server = api.wait_phase(NAME, "Ready", timeout=120)
    status = server["status"]
    assert [a["number"] for a in status["attempts"]] == [1, 2]
    pods = api.pods(NAME)
    assert [p["metadata"]["annotations"]["ctxfit.io/attempt"] for p in pods] == ["2"]
    assert first == claim_of(pods[0]) == "kimi-k25-weights"
    assert list(claims(api)) == ["kimi-k25-weights"], "no second claim"
    size = claims(api)["kimi-k25-weights"]["spec"]["resources"]["requests"]["storage"]
    assert quantity_to_bytes(size) == 615 * GiB
    assert condition(server, "WeightsCached")["status"] == "True"
    assert status["model"]["cache"] == "volumeClaimTemplate" and status["model"]["claimName"] == "kimi-k25-weights"
    assert status["model"]["downloadSeconds"] >= 2, "the simulated 2.5 s download, from the kubelet-style times"


def test_gated_model_fails_permanently_without_a_step_down(api: ServerClient, op: OperatorProcess) -> None:
    obj = manifest("kimi-128k.yaml")
    obj["spec"]["model"]["tokenSecretRef"] = {"name": "hf-token", "key": "token"}
    with_download(obj, message=GATED)
    api.create(obj)
    server = api.wait_phase(NAME, "Failed", timeout=90)
    status = server["status"]
    assert [a["failureKind"] for a in status["attempts"]] == ["ModelAccessDenied"]
    assert "Secret hf-token key token" in status["message"] and "request access" in status["message"]
    assert condition(server, "Ready")["reason"] == "PermanentFailure"
    deployment = api.wait(lambda: (api.deployment(NAME) or {}).get("spec", {}).get("replicas") == 0, "scaled to 0")
    assert deployment
    env = {e["name"]: e for e in (api.deployment(NAME) or {})["spec"]["template"]["spec"]["initContainers"][0]["env"]}
    assert env["HF_TOKEN"]["valueFrom"]["secretKeyRef"] == {"name": "hf-token", "key": "token"}


def test_a_full_owned_claim_is_replaced_by_a_larger_one(api: ServerClient, op: OperatorProcess) -> None:
    obj = manifest("kimi-128k.yaml")
    with_download(obj, delay_ms=500, message=ENOSPC, fail_below_bytes=700 * GiB)
    api.create(obj)
    api.wait(lambda: "kimi-k25-weights-2" in claims(api), "a second, larger claim", timeout=90)
    server = api.wait_phase(NAME, "Ready", timeout=120)
    grown = claims(api)["kimi-k25-weights-2"]
    assert quantity_to_bytes(grown["spec"]["resources"]["requests"]["storage"]) == 923 * GiB
    assert [a["number"] for a in server["status"]["attempts"]] == [1], "same attempt: no step-down"
    assert claim_of(api.pods(NAME)[0]) == "kimi-k25-weights-2"
    api.wait(lambda: "kimi-k25-weights" not in claims(api), "the full claim deleted", timeout=60)
    reasons = [e["reason"] for e in api.events(NAME)]
    assert "ClaimGrown" in reasons


def _pvc_gone(api: ServerClient, name: str) -> bool:
    try:
        api.core.read_namespaced_persistent_volume_claim(name, api.namespace)
    except ApiException as exc:
        return exc.status == 404
    return False


def test_deleting_the_server_deletes_its_claim_unless_retain(api: ServerClient, op: OperatorProcess) -> None:
    owned = manifest("kimi-128k.yaml")
    kept = manifest("kimi-128k.yaml")
    kept["metadata"]["name"] = "kept"
    kept["spec"]["model"]["cache"] = {"volumeClaimTemplate": {"retain": True, "size": "100Gi"}}
    kept["spec"]["gpu"]["product"] = owned["spec"]["gpu"]["product"]
    api.create(owned)
    api.create(kept)
    api.wait(lambda: {"kimi-k25-weights", "kept-weights"} <= set(claims(api)), "both claims")
    for name in (NAME, "kept"):
        api.custom.delete_namespaced_custom_object("ctxfit.io", "v1alpha1", api.namespace, "inferenceservers", name)
    api.wait(lambda: _pvc_gone(api, "kimi-k25-weights"), "the owned claim garbage-collected", timeout=150)
    time.sleep(3)
    assert "kept-weights" in claims(api), "retain: true keeps the claim"
    api.core.delete_namespaced_persistent_volume_claim("kept-weights", api.namespace)
