"""InferenceServer spec + effective configuration -> engine Deployment (a plain dict; pure, deterministic).

Shape (apps/v1): one container ``engine`` running the engine's command with flags from the effective
configuration; ``nvidia.com/gpu`` requests = limits = ``gpu.count``; node selector on
``nvidia.com/gpu.product``; strategy ``Recreate`` (a rolling update would wait forever for GPUs the old
pod holds); startup probe whose ``failureThreshold x periodSeconds`` >= ``startupTimeoutSeconds``;
readiness and liveness probes on the engine health path; ``/dev/shm`` as a memory-backed emptyDir of
``shm_bytes``; ``terminationMessagePolicy: FallbackToLogsOnError``. The user's image, args, env
(``valueFrom`` passed through untouched: the operator never reads Secrets), pod labels, annotations
and tolerations apply; ctxfit's own labels/annotations win on conflicts.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from ctxfit.api import API_GROUP, API_VERSION, KIND, EffectiveConfig, InferenceServerSpec, bytes_to_quantity
from ctxfit.engines import get_engine

from .affinity import node_affinity
from .cache import CacheVolume, apply_cache
from .inferencepool import ROUTING_ANNOTATIONS, ROUTING_LABELS, pool_pod_metadata
from .labels import (
    ATTEMPT_ANNOTATION,
    TEMPLATE_HASH_ANNOTATION,
    common_labels,
    effective_annotations,
    owner_reference,
    selector_labels,
    template_hash,
)

TERMINATION_GRACE_SECONDS = 30
"""``terminationGracePeriodSeconds`` of every engine pod (Deployment and LeaderWorkerSet groups): the longest a
deleted engine pod goes on terminating (Kubernetes Pod lifecycle, "Termination of Pods")."""
CONTAINER_NAME = "engine"
PORT_NAME = "http"
SHM_VOLUME = "dshm"
GPU_RESOURCE = "nvidia.com/gpu"
GPU_PRODUCT_LABEL = "nvidia.com/gpu.product"
STARTUP_PERIOD_SECONDS = 10
PROBE_TIMEOUT_SECONDS = 5
READINESS_PERIOD_SECONDS = 10
LIVENESS_PERIOD_SECONDS = 15
LIVENESS_FAILURES = 4
PROGRESS_MARGIN_SECONDS = 300


@dataclass(frozen=True)
class RenderInput:
    """Everything the renderer reads.

    Attributes:
        name, namespace, uid: the InferenceServer's identity (uid for ownerReferences).
        spec: its validated spec.
        effective: the configuration to run.
        attempt: 1-based attempt number (pod annotation ``ctxfit.io/attempt``).
        gpu_product: GFD product for the node selector (spec's, else the chosen node's); None = no selector.
        image: operator-wide default image for this engine (``CTXFIT_VLLM_IMAGE``...); the spec's wins.
        replicas: Deployment replicas; None = ``spec.replicas`` (0 releases the GPUs after a failure).
        avoid_nodes: node names the pod must not land on (a start failed there: driver too old).
        cache: the weights cache (``render.cache``); None = no volume, the engine downloads by itself.
        min_cuda: CUDA (major, minor) the image needs from the node's driver (``render.affinity``).
    """

    name: str
    namespace: str
    uid: str
    spec: InferenceServerSpec
    effective: EffectiveConfig
    attempt: int
    gpu_product: str | None = None
    image: str | None = None
    replicas: int | None = None
    avoid_nodes: tuple[str, ...] = ()
    cache: CacheVolume | None = None
    min_cuda: tuple[int, int] | None = None


def engine_image(spec: InferenceServerSpec, operator_image: str | None) -> str:
    """The container image, the one precedence rule: ``spec.engine.image`` > the operator's image for the engine
    (``CTXFIT_VLLM_IMAGE``/``CTXFIT_SGLANG_IMAGE``) > the engine's official image for ``spec.engine.version``."""
    return spec.engine.image or operator_image or get_engine(spec.engine.kind).default_image(spec.engine.version)


def image_for(inp: RenderInput) -> str:
    """``engine_image`` of the rendered server (``inp.image``: the operator's image)."""
    return engine_image(inp.spec, inp.image)


def _probe(path: str, period: int, failures: int, timeout: int = PROBE_TIMEOUT_SECONDS) -> dict[str, Any]:
    return {"httpGet": {"path": path, "port": PORT_NAME}, "periodSeconds": period, "timeoutSeconds": timeout,
            "failureThreshold": failures, "successThreshold": 1}


def startup_failure_threshold(effective: EffectiveConfig) -> int:
    """Smallest threshold with ``threshold x STARTUP_PERIOD_SECONDS >= startup_timeout_seconds`` (>= 1)."""
    return max(1, math.ceil(effective.startup_timeout_seconds / STARTUP_PERIOD_SECONDS))


def _resources(spec: InferenceServerSpec, effective: EffectiveConfig) -> dict[str, Any]:
    amounts: dict[str, str] = {
        GPU_RESOURCE: str(spec.gpu.count),
        "memory": bytes_to_quantity(effective.memory_limit_bytes),
    }
    if spec.resources.cpu:
        amounts["cpu"] = spec.resources.cpu
    return {"limits": dict(sorted(amounts.items())), "requests": dict(sorted(amounts.items()))}


def _env(spec: InferenceServerSpec) -> list[dict[str, Any]]:
    """User env in the user's order (later entries may reference earlier ones as ``$(NAME)``)."""
    return [var.to_wire() for var in spec.engine.env]


def port_name(rank: int) -> str:
    """Container/Service port name of a data-parallel rank's API port: ``http``, then ``http-rank1``..."""
    return PORT_NAME if rank == 0 else f"{PORT_NAME}-rank{rank}"


def _readiness(health_path: str, command: list[str] | None) -> dict[str, Any]:
    if command is None:
        return _probe(health_path, READINESS_PERIOD_SECONDS, 3)
    return {"exec": {"command": command}, "periodSeconds": READINESS_PERIOD_SECONDS,
            "timeoutSeconds": PROBE_TIMEOUT_SECONDS, "failureThreshold": 3, "successThreshold": 1}


def render_pod_template(inp: RenderInput) -> dict[str, Any]:
    """The Deployment's pod template (labels, annotations, one engine container, /dev/shm volume).

    In an InferencePool (``spec.routing.inferencePool``) the pod also carries the pool label, the context labels
    for ``effective.context_length`` and the active-ports annotations (``render.inferencepool``).
    """
    spec, effective = inp.spec, inp.effective
    engine = get_engine(spec.engine.kind)
    launch = engine.launch(spec, effective)
    user_labels = {k: v for k, v in spec.pod.labels.items() if k not in ROUTING_LABELS}
    user_annotations = {k: v for k, v in spec.pod.annotations.items() if k not in ROUTING_ANNOTATIONS}
    labels = {**user_labels, **common_labels(inp.name, spec.engine.kind)}
    annotations = {**user_annotations, **effective_annotations(effective, inp.attempt)}
    pool = spec.routing.inference_pool
    if pool is not None:
        pool_labels, pool_annotations = pool_pod_metadata(pool.pool_name(inp.name), effective.context_length,
                                                          launch.ports)
        labels.update(pool_labels)
        annotations.update(pool_annotations)
    container: dict[str, Any] = {
        "name": CONTAINER_NAME,
        "image": image_for(inp),
        "command": launch.command,
        "args": launch.args,
        "ports": [{"name": port_name(rank), "containerPort": port, "protocol": "TCP"}
                  for rank, port in enumerate(launch.ports)],
        "resources": _resources(spec, effective),
        "volumeMounts": [{"name": SHM_VOLUME, "mountPath": "/dev/shm"}],
        "startupProbe": _probe(engine.health_path, STARTUP_PERIOD_SECONDS, startup_failure_threshold(effective)),
        "readinessProbe": _readiness(engine.health_path, launch.readiness_command),
        "livenessProbe": _probe(engine.health_path, LIVENESS_PERIOD_SECONDS, LIVENESS_FAILURES, timeout=10),
        "terminationMessagePolicy": "FallbackToLogsOnError",
    }
    env = _env(spec)
    if env:
        container["env"] = env
    pod_spec: dict[str, Any] = {
        "containers": [container],
        "volumes": [{"name": SHM_VOLUME, "emptyDir": {"medium": "Memory",
                                                       "sizeLimit": bytes_to_quantity(effective.shm_bytes)}}],
        "tolerations": [{"key": GPU_RESOURCE, "operator": "Exists", "effect": "NoSchedule"},
                        *(t.to_wire() for t in spec.pod.tolerations)],
        "terminationGracePeriodSeconds": TERMINATION_GRACE_SECONDS,
    }
    if inp.gpu_product:
        pod_spec["nodeSelector"] = {GPU_PRODUCT_LABEL: inp.gpu_product}
    affinity = node_affinity(inp.min_cuda, inp.avoid_nodes)
    if affinity is not None:
        pod_spec["affinity"] = affinity
    template = {"metadata": {"labels": dict(sorted(labels.items())), "annotations": dict(sorted(annotations.items()))},
                "spec": pod_spec}
    if inp.cache is not None:
        apply_cache(template, container, spec, container["image"], inp.cache)
    return template


def render_deployment(inp: RenderInput) -> dict[str, Any]:
    """The engine Deployment, owned by the InferenceServer, carrying the pod template's hash."""
    template = render_pod_template(inp)
    replicas = inp.spec.replicas if inp.replicas is None else inp.replicas
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {
            "name": inp.name,
            "namespace": inp.namespace,
            "labels": common_labels(inp.name, inp.spec.engine.kind),
            "annotations": {TEMPLATE_HASH_ANNOTATION: template_hash(template),
                            ATTEMPT_ANNOTATION: str(inp.attempt)},
            "ownerReferences": [owner_reference(f"{API_GROUP}/{API_VERSION}", KIND, inp.name, inp.uid)],
        },
        "spec": {
            "replicas": replicas,
            "strategy": {"type": "Recreate"},
            "revisionHistoryLimit": 3,
            "progressDeadlineSeconds": inp.effective.startup_timeout_seconds + PROGRESS_MARGIN_SECONDS,
            "selector": {"matchLabels": selector_labels(inp.name)},
            "template": template,
        },
    }
