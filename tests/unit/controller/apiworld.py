"""The namespace, nodes, children and a served fake API server that the ownership, refusal-storm, verdict,
claim-lifecycle and writes-per-pass tests share (no test module imports another)."""

from __future__ import annotations

from typing import Any

from ctxfit.controller.kube.claims import ClaimsApi
from ctxfit.controller.kube.client import Kube
from ctxfit.controller.reconcile import Runtime
from ctxfit.controller.settings import Settings
from ctxfit.controller.telemetry.metrics import Metrics
from ctxfit.controller.views.pods import GPUNode, PodView, pod_view

from tests.unit.controller.kube.fakeapi import FakeApiServer

NS = "team-a"


UID = "uid-the-server"


H100 = (GPUNode("h100-0", "NVIDIA-H100-80GB-HBM3", 81559, 8, (9, 0), 1536 << 30, True),
        GPUNode("h100-1", "NVIDIA-H100-80GB-HBM3", 81559, 8, (9, 0), 1536 << 30, True))


SERVED = {"inferenceservers", "deployments", "services", "persistentvolumeclaims", "storageclasses", "events",
          "pods", "leaderworkersets", "scaledobjects", "configmaps"}


def child(which: str, name: str, ownership: str) -> dict[str, Any]:
    _group, _plural, api_version, kind, suffix = CHILDREN[which]
    meta: dict[str, Any] = {"name": name + suffix, "labels": {"team": "billing"}}
    if ownership == "ours":
        meta["ownerReferences"] = [{**OURS_REF, "name": name}]
        if kind == "PersistentVolumeClaim":
            meta["annotations"] = {"ctxfit.io/owner-uid": UID}
    elif ownership == "forged-labels":
        meta["labels"] = {k: v.replace("NAME", name) for k, v in FORGED_LABELS.items()}
    elif ownership == "other-uid":
        meta["ownerReferences"] = [{**OURS_REF, "name": name, "uid": "uid-an-earlier-server"}]
    elif ownership == "other-kind":
        meta["ownerReferences"] = [{**OURS_REF, "name": name, "kind": "Deployment", "apiVersion": "apps/v1"}]
    elif ownership == "replicaset":
        meta["ownerReferences"] = [{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "x", "uid": UID,
                                    "controller": True}]
    elif ownership == "other-marker":
        meta["annotations"] = {"ctxfit.io/owner-uid": "uid-someone-else"}
    body: dict[str, Any] = {"apiVersion": api_version, "kind": kind, "metadata": meta}
    if kind == "Service":
        body["spec"] = {"type": "ClusterIP", "selector": {"app": "billing"},
                        "ports": [{"name": "http", "port": 8080, "targetPort": 8080, "protocol": "TCP"}]}
    elif kind == "PersistentVolumeClaim":
        body["spec"] = {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "20Gi"}},
                        "storageClassName": "standard"}
        body["status"] = {"phase": "Bound", "capacity": {"storage": "20Gi"}}
    else:
        body["spec"] = {"replicas": 3, "template": {"metadata": {"labels": {"app": "billing"}}}}
    return body


def spec(*, nodes: int, autoscaling: bool, retain: bool, storage_class: str) -> dict[str, Any]:
    out: dict[str, Any] = {
        "model": {"name": "meta-llama/Llama-3.1-8B-Instruct", "weightsPerGPU": "16Gi",
                  "architecture": {"attention": "gqa", "numLayers": 32, "numKVHeads": 8, "headDim": 128},
                  "cache": {"volumeClaimTemplate": {"retain": retain, "storageClassName": storage_class}}},
        "engine": {"kind": "vllm"},
        "gpu": {"count": 8 if nodes > 1 else 1, "product": "NVIDIA-H100-80GB-HBM3"},
        "context": {"target": 32768},
    }
    if nodes > 1:
        out["nodes"] = nodes
        out["parallelism"] = {"tensor": 8, "pipeline": nodes}
    if autoscaling:
        out["autoscaling"] = {"minReplicas": 1, "maxReplicas": 3}
    return out


def full_download_pod(server: dict[str, Any]) -> PodView | None:
    """A pod of the newest attempt whose download ran out of space on the claim it mounts."""
    status = server.get("status") or {}
    attempts = status.get("attempts") or []
    model = status.get("model") or {}
    if not attempts or not model.get("claimName"):
        return None
    name = server["metadata"]["name"]
    return pod_view({
        "metadata": {"name": f"{name}-pod", "namespace": NS, "uid": "pod-uid",
                     "labels": {"ctxfit.io/server": name},
                     "annotations": {"ctxfit.io/attempt": str(attempts[-1]["number"]),
                                     "ctxfit.io/cache-claim": model["claimName"]}},
        "spec": {"initContainers": [{"name": "model-download"}], "containers": [{"name": "engine"}]},
        "status": {"phase": "Pending", "initContainerStatuses": [{
            "name": "model-download", "restartCount": 0,
            "state": {"terminated": {"exitCode": 1, "reason": "Error", "message": ENOSPC,
                                     "startedAt": "2026-01-01T00:00:00Z", "finishedAt": "2099-01-01T00:00:00Z"}}}]},
    })


NAME = "billing"


KEY = ("ctxfit.io", "inferenceservers", NS, NAME)


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def world(**spec_kw: Any) -> FakeApiServer:
    api = FakeApiServer(served=SERVED)
    api.put("storage.k8s.io", "storageclasses", "", {"metadata": {"name": "standard", "annotations": {
        "storageclass.kubernetes.io/is-default-class": "true"}}, "allowVolumeExpansion": False})
    body = {"nodes": 1, "autoscaling": False, "retain": False, "storage_class": "standard", **spec_kw}
    api.put("ctxfit.io", "inferenceservers", NS, {"apiVersion": "ctxfit.io/v1alpha1", "kind": "InferenceServer",
                                                  "metadata": {"name": NAME, "uid": UID}, "spec": spec(**body)})
    return api


def runtime(api: FakeApiServer) -> Runtime:
    kube = Kube(api.api_client(), instance="test")
    cfg = Settings(metrics_port=0, health_port=0, calibration_configmap="", backoff_seconds=0)
    return Runtime(settings=cfg, kube=kube, metrics=Metrics(), claims=ClaimsApi(kube))


def writes_to(api: FakeApiServer, plural: str, name: str) -> list[str]:
    return [f"{r.method} {r.status}" for r in api.writes() if r.key[1] == plural and r.key[3] in ("", name)]


def condition(api: FakeApiServer, kind: str) -> dict[str, Any]:
    return next(c for c in api.objects[KEY]["status"]["conditions"] if c["type"] == kind)


CHILDREN = {  # child -> (group, plural, apiVersion, kind, name suffix)
    "deployment": ("apps", "deployments", "apps/v1", "Deployment", ""),
    "lws": ("leaderworkerset.x-k8s.io", "leaderworkersets", "leaderworkerset.x-k8s.io/v1", "LeaderWorkerSet", ""),
    "service": ("", "services", "v1", "Service", ""),
    "scaledobject": ("keda.sh", "scaledobjects", "keda.sh/v1alpha1", "ScaledObject", ""),
    "claim": ("", "persistentvolumeclaims", "v1", "PersistentVolumeClaim", "-weights"),
    "claim2": ("", "persistentvolumeclaims", "v1", "PersistentVolumeClaim", "-weights-2"),
}


OURS_REF = {"apiVersion": "ctxfit.io/v1alpha1", "kind": "InferenceServer", "uid": UID, "controller": True,
            "blockOwnerDeletion": True}


FORGED_LABELS = {"app.kubernetes.io/managed-by": "ctxfit", "ctxfit.io/server": "NAME"}


ENOSPC = "OSError: [Errno 28] No space left on device: '/models/hub/models--x/blobs/a.incomplete'"
