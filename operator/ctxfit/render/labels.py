"""Labels, annotations and the pod-template hash shared by the rendered objects (pure).

Contracts other parts rely on (the Helm chart's PodMonitor, the simulated engine in hack/, dashboards):
- labels ``app.kubernetes.io/{name,instance,component,managed-by}``, ``ctxfit.io/server``,
  ``ctxfit.io/engine`` on the Deployment, its pods and the Service;
- pod annotations with the effective configuration as plain integers/strings (``ctxfit.io/context-length``,
  ..., ``ctxfit.io/attempt``), so ``kubectl get pod -o yaml`` tells what runs and tests can key on them;
- ``ctxfit.io/pod-template-hash`` on the Deployment: sha256 of the canonical JSON of the pod template.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

from ctxfit.api import EffectiveConfig, EngineKind
from ctxfit.engines.common import format_fraction

DOMAIN = "ctxfit.io"
SERVER_LABEL = f"{DOMAIN}/server"
ENGINE_LABEL = f"{DOMAIN}/engine"
ATTEMPT_ANNOTATION = f"{DOMAIN}/attempt"
TEMPLATE_HASH_ANNOTATION = f"{DOMAIN}/pod-template-hash"
OWNER_UID_ANNOTATION = f"{DOMAIN}/owner-uid"
"""On the operator's weights claims: the uid of the InferenceServer that created it. A retained claim has no
ownerReference (it outlives its server), so this is how the operator knows it is its own
(``controller/views/ownership.py``)."""
COMPONENT = "inference-server"
MANAGED_BY = "ctxfit"


def selector_labels(name: str) -> dict[str, str]:
    """The immutable Deployment selector and the Service selector: ``{ctxfit.io/server: NAME}``."""
    return {SERVER_LABEL: name}


def common_labels(name: str, engine: EngineKind) -> dict[str, str]:
    """Labels on every rendered object and on the engine pods (recommended ``app.kubernetes.io`` set)."""
    return {
        "app.kubernetes.io/name": engine.value,
        "app.kubernetes.io/instance": name,
        "app.kubernetes.io/component": COMPONENT,
        "app.kubernetes.io/managed-by": MANAGED_BY,
        SERVER_LABEL: name,
        ENGINE_LABEL: engine.value,
    }


def effective_annotations(effective: EffectiveConfig, attempt: int) -> dict[str, str]:
    """The effective configuration as pod annotations (integers in bytes/tokens/seconds, fractions as flags)."""
    out = {
        f"{DOMAIN}/context-length": str(effective.context_length),
        f"{DOMAIN}/kv-cache-dtype": effective.kv_cache_dtype,
        f"{DOMAIN}/max-num-seqs": str(effective.max_num_seqs),
        f"{DOMAIN}/cuda-graph-max-bs": str(effective.cuda_graph_max_batch_size),
        f"{DOMAIN}/memory-limit-bytes": str(effective.memory_limit_bytes),
        f"{DOMAIN}/shm-bytes": str(effective.shm_bytes),
        f"{DOMAIN}/startup-timeout-seconds": str(effective.startup_timeout_seconds),
        ATTEMPT_ANNOTATION: str(attempt),
    }
    if effective.gpu_memory_utilization is not None:
        out[f"{DOMAIN}/gpu-memory-utilization"] = format_fraction(effective.gpu_memory_utilization)
    if effective.mem_fraction_static is not None:
        out[f"{DOMAIN}/mem-fraction-static"] = format_fraction(effective.mem_fraction_static)
    for key, value in (("max-loras", effective.max_loras), ("max-lora-rank", effective.max_lora_rank),
                       ("num-speculative-tokens", effective.num_speculative_tokens)):
        if value is not None:
            out[f"{DOMAIN}/{key}"] = str(value)
    return dict(sorted(out.items()))


def template_hash(template: dict[str, Any]) -> str:
    """First 16 hex digits of sha256 over the canonical JSON (sorted keys) of a pod template."""
    text = json.dumps(template, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def owner_reference(api_version: str, kind: str, name: str, uid: str) -> dict[str, Any]:
    """A controller ownerReference: deleting the InferenceServer garbage-collects the object."""
    return {"apiVersion": api_version, "kind": kind, "name": name, "uid": uid, "controller": True,
            "blockOwnerDeletion": True}
