"""Pure facts about engine pods read once at index time (``PodFacts``); what they mean for a ``PodView``
(whose it is, why it waits, whether it was lost) is ``pod_wait.py``. See docs/design/waiting.md."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from ctxfit.vocab.text import capped

IMAGE_ERROR_REASONS = frozenset({"ErrImagePull", "ImagePullBackOff", "InvalidImageName", "ErrImageNeverPull"})
"""``state.waiting.reason`` values that mean the image cannot be had (kubelet ``images/types.go``)."""
DISRUPTION_CONDITION = "DisruptionTarget"
NODE_LOSS_REASONS = frozenset({"Evicted", "NodeLost", "Shutdown", "Terminated", "NodeShutdown",
                               "UnexpectedAdmissionError", "NodeAffinity", "OutOfnvidia.com/gpu"})
"""``status.reason`` of a pod that was stopped by its node, not by its engine (kubelet eviction/shutdown/admission)."""
POD_TEMPLATE_HASH_LABEL = "pod-template-hash"
VOLUME_WAIT_MARKER = "persistentvolumeclaim"
"""In the scheduler's ``PodScheduled`` message when a claim is missing or unbound (kube-scheduler
VolumeBinding plugin: 'persistentvolumeclaim "x" not found', 'pod has unbound immediate PersistentVolumeClaims'
is matched case-insensitively below)."""
LWS_NAME_LABEL = "leaderworkerset.sigs.k8s.io/name"
"""Label the LeaderWorkerSet controller puts on every pod of a group (sigs.k8s.io/lws api/leaderworkerset/v1)."""
LWS_GROUP_INDEX_LABEL = "leaderworkerset.sigs.k8s.io/group-index"
LWS_WORKER_INDEX_LABEL = "leaderworkerset.sigs.k8s.io/worker-index"
LWS_REVISION_LABEL = "leaderworkerset.sigs.k8s.io/template-revision-hash"
"""Labels of LWS group pods (``leaderworkerset_types.go`` ``GroupIndexLabelKey``, ``WorkerIndexLabelKey``,
``RevisionKey``): which group, which pod of it (0 = the leader), which template revision."""
ENGINE_DIGEST_FIELDS = ("image", "command", "args")
"""Engine container fields a pod must share with the desired template to count as current (none is defaulted
by the API server, so the rendered and the stored values compare as they are)."""


@dataclass(frozen=True)
class PodFacts:
    """What a pod shows beyond readiness (the sources: docs/design/waiting.md).

    Attributes:
        owner_replicaset: name of the controlling ReplicaSet (None: not owned by a ReplicaSet).
        owner_statefulset: name of the controlling StatefulSet (LeaderWorkerSet groups; None otherwise).
        group_name: the pod's ``leaderworkerset.sigs.k8s.io/name`` label (None: not an LWS pod).
        group_index, worker_index, revision: its LWS group index, index in the group (0: leader) and template
            revision labels (None: absent or not a number).
        template_label: the ``pod-template-hash`` label.
        engine_digest: digest of the engine container's image/command/args (``engine_digest``).
        image: the engine container's image as in the pod spec.
        scheduled: the ``PodScheduled`` condition's status ("True"/"False"/None when absent).
        unschedulable_message: the scheduler's message when ``PodScheduled`` is False.
        engine_started_at: when the engine container first started (RFC 3339), None while it never ran.
        waiting_message: the engine container's ``state.waiting.message``.
        init_waiting: reason an init container is still running or waiting (None: all done or none).
        init_waiting_reason: that init container's ``state.waiting.reason`` (e.g. ``ErrImagePull``).
        disrupted: the pod was stopped by its node or the control plane (DisruptionTarget, eviction).
    """

    owner_replicaset: str | None = None
    owner_statefulset: str | None = None
    group_name: str | None = None
    group_index: int | None = None
    worker_index: int | None = None
    revision: str | None = None
    template_label: str | None = None
    engine_digest: str | None = None
    image: str | None = None
    scheduled: str | None = None
    unschedulable_message: str = ""
    engine_started_at: str | None = None
    waiting_message: str = ""
    init_waiting: str | None = None
    init_waiting_reason: str | None = None
    disrupted: bool = False


NAME_MAX = 253
"""An object name is at most 253 characters (a DNS subdomain): a longer owner name in a pod's metadata names no
ReplicaSet and is not kept (a view is held per indexed pod; anyone who may create pods can label one as an engine
pod: its size is bounded in bytes)."""
IMAGE_MAX = 1024
"""A pod's engine image is kept up to this many bytes (the spec allows 512: a longer one is never the rendering)."""


def engine_digest(container: Mapping[str, Any]) -> str:
    """Digest (16 hex) of a container's ``ENGINE_DIGEST_FIELDS`` (rendered or as stored in a pod)."""
    parts = {key: container.get(key) for key in ENGINE_DIGEST_FIELDS}
    return hashlib.sha256(json.dumps(parts, sort_keys=True).encode()).hexdigest()[:16]


def _controller_replicaset(meta: Mapping[str, Any], kind: str = "ReplicaSet") -> str | None:
    """Name of the pod's controlling ``apps/v1`` ``kind`` (ReplicaSet, or StatefulSet for LWS groups)."""
    for ref in meta.get("ownerReferences") or []:
        if ref.get("controller") and ref.get("kind") == kind and ref.get("apiVersion") == "apps/v1":
            name = str(ref.get("name") or "")
            return name if 0 < len(name) <= NAME_MAX else None
    return None


def _started_at(status: Mapping[str, Any] | None) -> str | None:
    if not status:
        return None
    for key in ("state", "lastState"):
        state = status.get(key) or {}
        for phase in ("running", "terminated"):
            started = (state.get(phase) or {}).get("startedAt")
            if started:
                return str(started)
    return None


def _init_waiting_reason(status: Mapping[str, Any]) -> str | None:
    """``state.waiting.reason`` of the first init container that waits (None: none waits)."""
    for init in status.get("initContainerStatuses") or []:
        waiting = ((init.get("state") or {}).get("waiting") or {}).get("reason")
        if waiting:
            return str(waiting)
    return None


def _init_waiting(status: Mapping[str, Any]) -> str | None:
    for init in status.get("initContainerStatuses") or []:
        state = init.get("state") or {}
        if init.get("started") and state.get("running"):  # a sidecar (restartPolicy Always) that runs is done
            continue
        terminated = state.get("terminated")
        if terminated and terminated.get("exitCode") == 0:
            continue
        waiting = (state.get("waiting") or {}).get("reason")
        return f"init container {init.get('name')} {'is ' + str(waiting) if waiting else 'has not finished'}"
    return None


def _index(text: object) -> int | None:
    return int(text) if isinstance(text, str) and text.isdigit() else None


def pod_facts(pod: Mapping[str, Any], container_name: str) -> PodFacts:
    """Fold a Pod (dict) into ``PodFacts``; ``container_name`` names the engine container."""
    meta = pod.get("metadata") or {}
    status = pod.get("status") or {}
    spec = pod.get("spec") or {}
    containers = spec.get("containers") or []
    engine = next((c for c in containers if c.get("name") == container_name), containers[0] if containers else {})
    statuses = status.get("containerStatuses") or []
    engine_status = next((s for s in statuses if s.get("name") == container_name), statuses[0] if statuses else None)
    conditions = {str(c.get("type")): c for c in status.get("conditions") or []}
    scheduled = conditions.get("PodScheduled")
    disruption = conditions.get(DISRUPTION_CONDITION)
    waiting = ((engine_status or {}).get("state") or {}).get("waiting") or {}
    labels = meta.get("labels") or {}
    return PodFacts(
        owner_replicaset=_controller_replicaset(meta),
        owner_statefulset=_controller_replicaset(meta, "StatefulSet"),
        group_name=labels.get(LWS_NAME_LABEL),
        group_index=_index(labels.get(LWS_GROUP_INDEX_LABEL)),
        worker_index=_index(labels.get(LWS_WORKER_INDEX_LABEL)),
        revision=labels.get(LWS_REVISION_LABEL),
        template_label=(meta.get("labels") or {}).get(POD_TEMPLATE_HASH_LABEL),
        engine_digest=engine_digest(engine) if engine else None,
        image=capped(engine["image"], IMAGE_MAX) if engine.get("image") is not None else None,
        scheduled=scheduled.get("status") if scheduled else None,
        unschedulable_message=capped(scheduled.get("message")) if scheduled and scheduled.get("status") == "False"
        else "",
        engine_started_at=_started_at(engine_status),
        waiting_message=capped(waiting.get("message")),
        init_waiting=_init_waiting(status),
        init_waiting_reason=_init_waiting_reason(status),
        disrupted=(disruption is not None and disruption.get("status") == "True")
        or status.get("reason") in NODE_LOSS_REASONS,
    )
