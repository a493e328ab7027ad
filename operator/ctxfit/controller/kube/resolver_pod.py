"""The resolver pod of a gated repository (``token``) or a preloaded claim (``volume``), rendered (no I/O).

It runs the operator's image (``python -m ctxfit.hub.resolver``) in the server's namespace, owned by the server,
with the Secret as ``HF_TOKEN`` through ``secretKeyRef`` (the kubelet reads it, the operator never does) or the claim
mounted read-only; it reports through its termination message (``kube/resolution.py`` reads it back).
"""

from __future__ import annotations

import hashlib
import os
from typing import Any

from ctxfit.api import API_GROUP, API_VERSION, KIND
from ctxfit.render.cache import CACHE_MOUNT_PATH
from ctxfit.render.labels import MANAGED_BY, owner_reference

from ..converge.types import Need
from ..settings import Settings

RESOLVER_LABEL = "ctxfit.io/resolver"
RESOLVER_CONTAINER = "resolver"


def resolver_pod_name(server: str, key: tuple[str, ...]) -> str:
    """``<server>-resolve-<8 hex of the key>`` (a new key, e.g. another revision, is another pod)."""
    digest = hashlib.sha256("\0".join(key).encode()).hexdigest()[:8]
    return f"{server[:200]}-resolve-{digest}"


def _toleration(text: str) -> dict[str, str]:
    """``key[=value][:Effect]`` -> a core/v1 Toleration (``Equal`` with a value, else ``Exists``)."""
    spec, _, effect = text.partition(":")
    key, eq, value = spec.partition("=")
    out = {"key": key.strip(), "operator": "Equal" if eq else "Exists"}
    if eq:
        out["value"] = value.strip()
    if effect.strip():
        out["effect"] = effect.strip()
    return out


def resolver_pod(wanted: Need, server: str, namespace: str, uid: str, settings: Settings) -> dict[str, Any]:
    """The resolver pod for ``wanted`` (``token`` or ``volume``) as a core/v1 Pod dict, owned by the server ``server``
    (uid ``uid``) in ``namespace``; see ``ctxfit.hub.resolver``.

    Runs ``settings.resolver_image`` for at most ``settings.resolve_timeout_seconds`` (activeDeadlineSeconds), 50m
    CPU / 128 MiB requested, 512 MiB memory limit, a 256 MiB ``/tmp``; a token only through ``secretKeyRef`` (the
    operator never reads the Secret), a claim mounted read-only. Pure: raises nothing, reads only ``HF_ENDPOINT``.
    """
    env: list[dict[str, Any]] = [{"name": "CTXFIT_RESOLVE_REPO", "value": wanted.repo},
                                 {"name": "CTXFIT_RESOLVE_REVISION", "value": wanted.revision},
                                 {"name": "CTXFIT_CACHE", "value": "/tmp/ctxfit"},
                                 {"name": "HF_HUB_DISABLE_TELEMETRY", "value": "1"}]
    if os.environ.get("HF_ENDPOINT"):
        env.append({"name": "HF_ENDPOINT", "value": os.environ["HF_ENDPOINT"]})
    mounts: list[dict[str, Any]] = [{"name": "tmp", "mountPath": "/tmp"}]
    volumes: list[dict[str, Any]] = [{"name": "tmp", "emptyDir": {"sizeLimit": "256Mi"}}]
    if wanted.key[0] == "adapter-token":  # a gated LoRA adapter: its adapter_config.json, with the token
        env.append({"name": "CTXFIT_RESOLVE_ADAPTER", "value": "1"})
    if wanted.kind == "token" and wanted.secret is not None:
        env += [{"name": "HF_HOME", "value": "/tmp/hf"},
                {"name": "HF_TOKEN", "valueFrom": {"secretKeyRef": {"name": wanted.secret[0],
                                                                     "key": wanted.secret[1]}}}]
    if wanted.kind == "volume" and wanted.claim is not None:
        claim, sub_path = wanted.claim
        mount: dict[str, Any] = {"name": "model-cache", "mountPath": CACHE_MOUNT_PATH, "readOnly": True}
        if sub_path:
            mount["subPath"] = sub_path
        mounts.append(mount)
        volumes.append({"name": "model-cache", "persistentVolumeClaim": {"claimName": claim, "readOnly": True}})
        if wanted.repo.startswith("/"):
            env.append({"name": "CTXFIT_RESOLVE_DIR", "value": wanted.repo})
        else:  # the claim holds the Hugging Face cache (HF_HOME), as the download container fills it
            env += [{"name": "HF_HOME", "value": CACHE_MOUNT_PATH}, {"name": "HF_HUB_OFFLINE", "value": "1"},
                    {"name": "CTXFIT_RESOLVE_OFFLINE", "value": "1"}]
    return {
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {
            "name": resolver_pod_name(server, wanted.key), "namespace": namespace,
            "labels": {"app.kubernetes.io/managed-by": MANAGED_BY, "app.kubernetes.io/component": "resolver",
                       "app.kubernetes.io/instance": server[:63], RESOLVER_LABEL: server[:63]},
            "ownerReferences": [owner_reference(f"{API_GROUP}/{API_VERSION}", KIND, server, uid)],
        },
        "spec": {
            "restartPolicy": "Never",
            "activeDeadlineSeconds": int(settings.resolve_timeout_seconds),
            "automountServiceAccountToken": False,
            "enableServiceLinks": False,
            "securityContext": {"seccompProfile": {"type": "RuntimeDefault"}},
            "containers": [{
                "name": RESOLVER_CONTAINER, "image": settings.resolver_image,
                "imagePullPolicy": "IfNotPresent",
                "command": ["python", "-m", "ctxfit.hub.resolver"], "env": env, "volumeMounts": mounts,
                "terminationMessagePolicy": "File",
                "resources": {"requests": {"cpu": "50m", "memory": "128Mi"}, "limits": {"memory": "512Mi"}},
                "securityContext": {"allowPrivilegeEscalation": False, "readOnlyRootFilesystem": True,
                                    "capabilities": {"drop": ["ALL"]}},
            }],
            "volumes": volumes,
            **({"nodeSelector": dict(item.split("=", 1) for item in settings.resolver_node_selector if "=" in item)}
               if settings.resolver_node_selector else {}),
            **({"tolerations": [_toleration(t) for t in settings.resolver_tolerations]}
               if settings.resolver_tolerations else {}),
        },
    }
