"""Multi-node servers in reconciliation (pure): are there enough nodes for a group, is the group Ready.

A group is planned only when ``spec.nodes`` eligible nodes of one product exist. Details:
docs/design/group-restarts.md.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Callable, Sequence

from ctxfit.api import InferenceServerSpec
from ctxfit.api.status import parse_rfc3339
from ctxfit.vocab.kinds import Failure, FailureKind

from ..views.pods import GPUNode, PodView


def group_shortage(spec: InferenceServerSpec, eligible: Sequence[GPUNode]) -> str | None:
    """Why ``eligible`` (from ``views.pods.eligible_nodes``) cannot hold one group; None when it can.

    One group needs ``spec.nodes`` schedulable nodes of the same GPU product, each with at least
    ``gpu.count`` allocatable ``nvidia.com/gpu``. Single-node specs never fall short here.
    """
    if spec.nodes <= 1 or not eligible:
        return None
    by_product = Counter(n.product for n in eligible)
    product, found = max(by_product.items(), key=lambda item: (item[1], item[0] or ""))
    if found >= spec.nodes:
        return None
    names = ", ".join(sorted(n.name for n in eligible if n.product == product))
    return (f"a group needs {spec.nodes} nodes with {product} and {spec.gpu.count} allocatable nvidia.com/gpu "
            f"each; found {found} ({names})")


def best_group_node(spec: InferenceServerSpec, eligible: Sequence[GPUNode]) -> GPUNode:
    """The node to plan with: the best-first eligible node of the product that has enough nodes.

    Raises:
        ValueError: ``eligible`` is empty.
    """
    if not eligible:
        raise ValueError("no eligible node")
    if spec.nodes <= 1:
        return eligible[0]
    counts = Counter(n.product for n in eligible)
    return next((n for n in eligible if counts[n.product] >= spec.nodes), eligible[0])


def pods_for_ready(spec: InferenceServerSpec) -> int:
    """Ready pods that make the server Ready: ``replicas`` pods, or every pod of every group. With
    ``spec.autoscaling`` the count is the autoscaler's, not ``spec.replicas``: one replica (all pods of one
    group) Ready is enough."""
    if spec.autoscaling is not None:
        return spec.nodes
    return spec.replicas * spec.nodes


def group_is_ready(spec: InferenceServerSpec, pods: Sequence[PodView]) -> bool:
    """All pods of the wanted groups are Ready (the leader's probe covers the API; workers are Running)."""
    return sum(1 for p in pods if p.ready) >= pods_for_ready(spec)


def crash_evidence(pod: PodView) -> bool:
    """A group pod the LWS controller is deleting still shows why: its engine container restarted after a
    termination (``RecreateGroupOnPodRestart`` deletes the group right after a container restart,
    sigs.k8s.io/lws ``pkg/utils/pod/pod_utils.go`` ``ContainerRestarted``), so the termination it shows is the
    engine's own, not the deletion's."""
    return pod.facts.group_name is not None and pod.deleting and pod.restart_count > 0 \
        and pod.termination is not None


def most_telling_failure(failing: Sequence[PodView],
                         diagnose: Callable[[PodView, int], Failure]) -> tuple[PodView, Failure]:
    """Of several failed pods of one attempt (a multi-node group: a worker's OOM or KV error often takes the
    leader down with a collective-communication error), the one whose diagnosis says most: a known kind before
    ``Unknown``, then the earliest termination (the first to fail is the cause; a pod without a readable
    ``finishedAt`` last), then the name. Each pod is
    diagnosed once (its log and Events read: one read per failed pod of the attempt)."""
    diagnosed = [(pod, diagnose(pod, pod.restart_count)) for pod in failing]

    def rank(item: tuple[PodView, Failure]) -> tuple[bool, float, str]:
        pod, failure = item
        return failure.kind is FailureKind.UNKNOWN, _ended(pod), pod.name

    return min(diagnosed, key=rank)


def _ended(pod: PodView) -> float:
    """The engine container's ``finishedAt`` as a POSIX time (any RFC 3339 form); infinity when missing or
    unreadable (no zone)."""
    text = pod.termination.finished_at if pod.termination else None
    try:
        moment = parse_rfc3339(text) if text else None
    except ValueError:
        moment = None
    return moment.timestamp() if moment is not None and moment.tzinfo is not None else math.inf
