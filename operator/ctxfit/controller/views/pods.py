"""Pure views of what Kubernetes shows: engine pods and GPU nodes (no kopf, no API client).

``pod_view(pod)`` folds a Pod into the few facts reconciliation needs (attempt, readiness, the engine
container's termination); ``gpu_node(node)`` reads GPU Feature Discovery labels and allocatable
resources; ``eligible_nodes`` picks the nodes a spec can run on.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from ctxfit.api import InferenceServerSpec, quantity_to_bytes
from ctxfit.render import ATTEMPT_ANNOTATION, SERVER_LABEL, TEMPLATE_HASH_ANNOTATION
from ctxfit.render.deployment import CONTAINER_NAME, GPU_PRODUCT_LABEL, GPU_RESOURCE
from ctxfit.vocab.text import capped, clean_text

from .cache import DownloadView, download_view
from .nodes import driver_too_old, node_cuda, required_cuda
from .ownership import Holder, holder_of
from .pod_facts import PodFacts, pod_facts
from .routing import pod_labels_of
from .workloads import LiveDeployment, live_deployment

GPU_MEMORY_LABEL = "nvidia.com/gpu.memory"
"""GFD label: memory of one GPU in MiB."""
COMPUTE_MAJOR_LABEL = "nvidia.com/gpu.compute.major"
COMPUTE_MINOR_LABEL = "nvidia.com/gpu.compute.minor"
CRASH_WAITING_REASONS = frozenset({"CrashLoopBackOff", "RunContainerError", "CreateContainerError"})


@dataclass(frozen=True)
class Termination:
    """The engine container's last termination (``state.terminated`` or ``lastState.terminated``)."""

    reason: str | None
    exit_code: int | None
    message: str
    finished_at: str | None


@dataclass(frozen=True)
class PodView:
    """One engine pod as reconciliation sees it.

    Attributes:
        name, namespace, server: identity and the ``ctxfit.io/server`` label.
        attempt: the ``ctxfit.io/attempt`` annotation (None when missing or not a number).
        ready: the pod's Ready condition is True.
        deleting: has a deletionTimestamp.
        termination: engine container terminated now or before (None while it never stopped).
        restart_count: engine container restarts.
        waiting_reason: e.g. ``CrashLoopBackOff``.
        created: creationTimestamp (RFC 3339), for the startup deadline.
        node: the node it runs on, if scheduled.
        phase: pod phase.
        facts: ownership, scheduling, image and start facts (``controller/views/pod_facts.py``).
        download: the ``model-download`` init container (None: the pod has none).
        reason, message: the pod's ``status.reason``/``status.message`` (e.g. Evicted and why).
        uid: ``metadata.uid`` (a LeaderWorkerSet group recreated has a leader of the same name and a new uid).
        routing_labels: its InferencePool and context labels, sorted (``views.routing.pod_labels_of``).
    """

    name: str
    namespace: str
    server: str
    attempt: int | None
    ready: bool
    deleting: bool
    termination: Termination | None
    restart_count: int
    waiting_reason: str | None
    created: str | None
    node: str | None
    phase: str | None
    facts: PodFacts = PodFacts()  # noqa: RUF009 - frozen: one shared empty value is safe
    download: DownloadView | None = None
    reason: str | None = None
    message: str = ""
    uid: str = ""
    routing_labels: tuple[tuple[str, str], ...] = ()

    @property
    def failed(self) -> bool:
        """The engine container stopped (terminated, crash-looping, or the pod itself Failed - unless its node
        or the control plane stopped it: a lost pod is not an engine failure)."""
        return self.termination is not None or self.waiting_reason in CRASH_WAITING_REASONS \
            or (self.phase == "Failed" and not self.facts.disrupted)


def _engine_status(statuses: Iterable[Mapping[str, Any]]) -> Mapping[str, Any] | None:
    listed = list(statuses)
    for status in listed:
        if status.get("name") == CONTAINER_NAME:
            return status
    return listed[0] if listed else None


def _termination(status: Mapping[str, Any]) -> Termination | None:
    for key in ("state", "lastState"):
        terminated = (status.get(key) or {}).get("terminated")
        if terminated:
            code = terminated.get("exitCode")
            return Termination(
                reason=terminated.get("reason"),
                exit_code=int(code) if isinstance(code, int) else None,
                message=clean_text(capped(terminated.get("message"))),
                finished_at=terminated.get("finishedAt"),
            )
    return None


def pod_view(pod: Mapping[str, Any]) -> PodView:
    """Fold a Pod (dict as the API returns it) into a ``PodView``."""
    meta = pod.get("metadata") or {}
    status = pod.get("status") or {}
    attempt_text = (meta.get("annotations") or {}).get(ATTEMPT_ANNOTATION, "")
    conditions = status.get("conditions") or []
    ready = any(c.get("type") == "Ready" and c.get("status") == "True" for c in conditions)
    engine = _engine_status(status.get("containerStatuses") or [])
    termination = _termination(engine) if engine else None
    waiting = ((engine or {}).get("state") or {}).get("waiting") or {}
    return PodView(
        name=str(meta.get("name", "")),
        namespace=str(meta.get("namespace", "")),
        server=str((meta.get("labels") or {}).get(SERVER_LABEL, "")),
        attempt=int(attempt_text) if str(attempt_text).isdigit() else None,
        ready=ready,
        deleting=meta.get("deletionTimestamp") is not None,
        termination=termination,
        restart_count=int((engine or {}).get("restartCount") or 0),
        waiting_reason=waiting.get("reason"),
        created=meta.get("creationTimestamp"),
        node=(pod.get("spec") or {}).get("nodeName"),
        phase=status.get("phase"),
        facts=pod_facts(pod, CONTAINER_NAME),
        download=download_view(pod),
        reason=status.get("reason"),
        message=capped(status.get("message")),
        uid=str(meta.get("uid") or ""),
        routing_labels=tuple(sorted(pod_labels_of(meta.get("labels") or {}).items())),
    )


@dataclass(frozen=True)
class DeploymentView:
    """What matters of the existing Deployment (or LeaderWorkerSet): its pod-template hash annotation,
    ``replicas`` (``spec.replicas``: the count asked for, by the operator or the autoscaler's HPA),
    ``current_replicas`` (``status.replicas``: the count it has now; None: not reported yet); ``live``: the
    fields drift is checked on and its ReplicaFailure message (``controller/views/workloads.py``; None: not read);
    ``holder``: whose it is (``ownership``)."""

    template_hash: str | None
    replicas: int | None
    live: LiveDeployment | None = None
    current_replicas: int | None = None
    holder: Holder | None = None


TEMPLATE_HASH_MAX = 64
"""The operator's template hash is 16 hex digits; a longer annotation cannot be one it wrote and is kept as ""
(it matches no rendering, so the rendering is applied again)."""


def deployment_view(deployment: Mapping[str, Any] | None) -> DeploymentView | None:
    """Fold a Deployment (dict) into a ``DeploymentView``; None stays None.

    Bounded in bytes (one view is kept per indexed workload, and anyone who may create Deployments can label one as
    the operator's): a workload without an ownerReference to an InferenceServer is not the operator's, whatever
    its labels, and is never compared, so only who holds it is kept (``live`` None); the compared fields of one
    that names a server are kept up to ``workloads.MAX_LIVE_BYTES``; the hash annotation up to
    ``TEMPLATE_HASH_MAX`` characters."""
    if deployment is None:
        return None
    meta = deployment.get("metadata") or {}
    holder = holder_of(deployment)
    template_hash = (meta.get("annotations") or {}).get(TEMPLATE_HASH_ANNOTATION)
    if template_hash is not None and len(str(template_hash)) > TEMPLATE_HASH_MAX:
        template_hash = ""
    return DeploymentView(template_hash=template_hash,
                          replicas=(deployment.get("spec") or {}).get("replicas"),
                          live=live_deployment(deployment, CONTAINER_NAME) if holder and holder.owners else None,
                          current_replicas=_status_replicas(deployment.get("status") or {}),
                          holder=holder)


def _status_replicas(status: Mapping[str, Any]) -> int | None:
    """``status.replicas``; 0 when omitted (``omitempty``) by a controller that reported at all, else None."""
    if "replicas" in status:
        return int(status["replicas"])
    return 0 if status.get("observedGeneration") is not None else None


@dataclass(frozen=True)
class GPUNode:
    """A node's GPU facts from GFD labels and ``status.allocatable``.

    Attributes:
        name: node name.
        product: ``nvidia.com/gpu.product``.
        gpu_memory_mib: ``nvidia.com/gpu.memory`` (MiB per GPU), None when absent.
        gpus: allocatable ``nvidia.com/gpu``.
        compute: (major, minor) from ``nvidia.com/gpu.compute.*``.
        memory_bytes: allocatable host memory, bytes (caps the container memory limit).
        schedulable: not cordoned.
        cuda: (major, minor) CUDA the driver supports (GFD ``nvidia.com/cuda.runtime-version.*``), or None.
    """

    name: str
    product: str | None
    gpu_memory_mib: int | None
    gpus: int
    compute: tuple[int, int] | None
    memory_bytes: int | None
    schedulable: bool
    cuda: tuple[int, int] | None = None


def _int(text: object) -> int | None:
    try:
        return int(str(text))
    except ValueError:
        return None


def gpu_node(node: Mapping[str, Any]) -> GPUNode:
    """Read a Node (dict) into a ``GPUNode``; missing labels become None, missing GPUs 0."""
    meta = node.get("metadata") or {}
    labels = meta.get("labels") or {}
    allocatable = (node.get("status") or {}).get("allocatable") or {}
    major, minor = _int(labels.get(COMPUTE_MAJOR_LABEL)), _int(labels.get(COMPUTE_MINOR_LABEL))
    memory = allocatable.get("memory")
    try:
        memory_bytes = quantity_to_bytes(memory) if memory is not None else None
    except ValueError:
        memory_bytes = None
    return GPUNode(
        name=str(meta.get("name", "")),
        product=labels.get(GPU_PRODUCT_LABEL),
        gpu_memory_mib=_int(labels.get(GPU_MEMORY_LABEL)),
        gpus=_int(allocatable.get(GPU_RESOURCE)) or 0,
        compute=(major, minor) if major is not None and minor is not None else None,
        memory_bytes=memory_bytes,
        schedulable=not (node.get("spec") or {}).get("unschedulable", False),
        cuda=node_cuda(labels),
    )


def eligible_nodes(spec: InferenceServerSpec, nodes: Iterable[GPUNode],
                   operator_image: str | None = None) -> list[GPUNode]:
    """Nodes with the spec's product (any GPU product when unset) and >= ``gpu.count`` allocatable GPUs.

    Nodes whose driver supports an older CUDA than the engine image needs are left out (``nodes.required_cuda``;
    ``operator_image``: the operator's image for the engine). Sorted best first: largest GPU memory, then name.
    """
    wanted = spec.gpu.product
    need = required_cuda(spec, operator_image)
    fits = [n for n in nodes if n.schedulable and n.gpus >= spec.gpu.count and n.product
            and (wanted is None or n.product == wanted) and not driver_too_old(n.cuda, need)]
    return sorted(fits, key=lambda n: (-(n.gpu_memory_mib or 0), n.name))


def describe_nodes(spec: InferenceServerSpec, nodes: Iterable[GPUNode], operator_image: str | None = None) -> str:
    """Why no node is eligible, in one line (for the condition message and the Event)."""
    listed = list(nodes)
    wanted = spec.gpu.product or "any GPU product"
    same = [n for n in listed if spec.gpu.product is None or n.product == spec.gpu.product]
    if not same:
        products = sorted({n.product for n in listed if n.product})
        return (f"no node has {wanted} (nvidia.com/gpu.product); GPU products in the cluster: "
                f"{', '.join(products) or 'none'}")
    need = required_cuda(spec, operator_image)
    old = [n.name for n in same if driver_too_old(n.cuda, need)]
    if old and need is not None:
        return (f"the driver of {', '.join(sorted(old))} supports CUDA below {need[0]}.{need[1]}, which the "
                f"{spec.engine.kind.value} image needs (nvidia.com/cuda.runtime-version)")
    most = max(n.gpus for n in same)
    return f"no node with {wanted} has {spec.gpu.count} allocatable nvidia.com/gpu (the most is {most})"
