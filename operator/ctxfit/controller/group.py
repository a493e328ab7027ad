"""Multi-node servers in reconciliation (pure): are there enough nodes for a group, is the group Ready.

A replica of a spec with ``nodes > 1`` is one LeaderWorkerSet group of ``spec.nodes`` pods, each on its
own node with ``gpu.count`` GPUs of one product (the rendered node selector and pod anti-affinity, see
``ctxfit.render.leaderworkerset``). The group is planned only when that many eligible nodes of one
product exist; otherwise the server stays Planning with ``NoEligibleNode`` saying needed and found.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence

from ctxfit.api import InferenceServerSpec

from .observe import GPUNode, PodView


def group_shortage(spec: InferenceServerSpec, eligible: Sequence[GPUNode]) -> str | None:
    """Why ``eligible`` (from ``observe.eligible_nodes``) cannot hold one group; None when it can.

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
