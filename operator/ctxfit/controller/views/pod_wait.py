"""What a pod's facts mean: whose it is, why it waits, whether it was lost (pure, over ``pods.PodView``). See
docs/design/waiting.md."""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass
from enum import StrEnum

from .pod_facts import IMAGE_ERROR_REASONS, VOLUME_WAIT_MARKER
from .pods import PodView


def owned_by(pod: PodView, deployment: str, digest: str | None) -> bool:
    """The pod belongs to Deployment ``deployment`` (via its ReplicaSet) and runs the desired engine container.

    ``digest``: ``engine_digest`` of the desired engine container (None: do not check the template). A pod
    whose digest is unknown (no container: the API server never stores such a pod) is not checked.
    """
    facts = pod.facts
    if facts.group_name is not None:
        # a LeaderWorkerSet group's pod (multi-node): owned by one of its StatefulSets, the leaders' `<name>` or
        # a group's workers' `<name>-<group index>` (sigs.k8s.io/lws pkg/controllers); leader and workers run
        # different commands, so the engine digest is not compared (the attempt annotation still is)
        sts = facts.owner_statefulset
        return facts.group_name == deployment and sts is not None and (
            sts == deployment or sts.startswith(f"{deployment}-"))
    if not facts.template_label or facts.owner_replicaset != f"{deployment}-{facts.template_label}":
        return False
    return digest is None or facts.engine_digest is None or facts.engine_digest == digest


class WaitKind(StrEnum):
    """Why a pod has not started its engine (none of these is an engine failure)."""

    UNSCHEDULABLE = "Unschedulable"
    SCHEDULING = "Scheduling"
    NODE_LOST = "NodeLost"
    IMAGE_ERROR = "ImageError"
    INITIALIZING = "Initializing"
    CREATING = "Creating"


@dataclass(frozen=True)
class PodWait:
    """A pod waiting (``kind``) with a human message quoting Kubernetes where it has one."""

    kind: WaitKind
    pod: str
    message: str
    image: str | None = None


def lost(pod: PodView, node_names: Collection[str]) -> bool:
    """The pod's node is gone (not among ``node_names``) or the pod was disrupted: not an engine failure."""
    if pod.facts.disrupted:
        return True
    return pod.node is not None and pod.node not in node_names


def waiting(pod: PodView, node_names: Collection[str]) -> PodWait | None:
    """Why ``pod`` (not Ready, not failed) has not started its engine; None once the engine container runs.

    Image errors come first (a pod on a node can be both unready and unable to pull); an unscheduled
    pod quotes the scheduler's ``PodScheduled`` message.
    """
    facts = pod.facts
    if lost(pod, node_names):
        where = f"node {pod.node} is gone" if pod.node and pod.node not in node_names else "it was disrupted"
        return PodWait(WaitKind.NODE_LOST, pod.name, f"pod {pod.name} was lost ({where}); waiting for its replacement")
    if pod.waiting_reason in IMAGE_ERROR_REASONS or facts.init_waiting_reason in IMAGE_ERROR_REASONS:
        # the engine image, or the init container's (model-download runs the engine's image)
        reason = pod.waiting_reason if pod.waiting_reason in IMAGE_ERROR_REASONS else facts.init_waiting_reason
        detail = f": {facts.waiting_message}" if facts.waiting_message else ""
        return PodWait(WaitKind.IMAGE_ERROR, pod.name,
                       f"cannot pull image {facts.image!r} ({reason}){detail}", image=facts.image)
    if pod.node is None:
        if facts.scheduled == "False" and VOLUME_WAIT_MARKER in facts.unschedulable_message.lower():
            # the weights claim is not there or not bound yet (created with the Deployment): not a GPU shortage
            return PodWait(WaitKind.SCHEDULING, pod.name,
                           f"pod {pod.name} waits for its volume: {facts.unschedulable_message}")
        if facts.scheduled == "False":
            return PodWait(WaitKind.UNSCHEDULABLE, pod.name,
                           f"waiting for GPUs: pod {pod.name} cannot be scheduled: "
                           f"{facts.unschedulable_message or 'no message from the scheduler'}")
        return PodWait(WaitKind.SCHEDULING, pod.name, f"pod {pod.name} is waiting to be scheduled")
    if facts.engine_started_at is not None or pod.ready or pod.termination is not None:
        return None
    if facts.init_waiting is not None:
        return PodWait(WaitKind.INITIALIZING, pod.name, f"pod {pod.name} on {pod.node}: {facts.init_waiting}")
    if pod.waiting_reason in (None, "ContainerCreating"):
        return PodWait(WaitKind.CREATING, pod.name,
                       f"pod {pod.name} on {pod.node} is {pod.waiting_reason or 'Pending'} (pulling the image or "
                       "creating the container)")
    detail = f": {facts.waiting_message}" if facts.waiting_message else ""  # e.g. CreateContainerConfigError
    return PodWait(WaitKind.CREATING, pod.name, f"pod {pod.name} on {pod.node} is {pod.waiting_reason}{detail}")
