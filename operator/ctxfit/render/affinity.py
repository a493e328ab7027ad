"""Required node affinity of the engine pod (pure): no node whose driver is too old, no node a start failed on.

- CUDA: the node's driver must support at least the image's CUDA (major, minor), read from the GFD labels
  ``nvidia.com/cuda.runtime-version.major``/``.minor`` (https://github.com/NVIDIA/k8s-device-plugin,
  gpu-feature-discovery). Node affinity compares integers with ``Gt``
  (https://kubernetes.io/docs/concepts/scheduling-eviction/assign-pod-node/#operators), so "at least
  M.m" is three ORed terms: major > M; major = M and minor > m - 1; no such label (a node GFD does not
  describe is not excluded).
- Nodes named in ``avoid_nodes`` are excluded by ``kubernetes.io/hostname NotIn`` in every term.
"""

from __future__ import annotations

from typing import Any

CUDA_MAJOR_LABEL = "nvidia.com/cuda.runtime-version.major"
CUDA_MINOR_LABEL = "nvidia.com/cuda.runtime-version.minor"
HOSTNAME_LABEL = "kubernetes.io/hostname"


def node_affinity(min_cuda: tuple[int, int] | None, avoid_nodes: tuple[str, ...]) -> dict[str, Any] | None:
    """The pod's ``affinity`` (required node affinity), or None when nothing is constrained."""
    base: list[dict[str, Any]] = []
    if avoid_nodes:
        base.append({"key": HOSTNAME_LABEL, "operator": "NotIn", "values": sorted(set(avoid_nodes))})
    terms: list[list[dict[str, Any]]] = []
    if min_cuda is not None:
        major, minor = min_cuda
        same_major: list[dict[str, Any]] = [{"key": CUDA_MAJOR_LABEL, "operator": "In", "values": [str(major)]}]
        if minor > 0:
            same_major.append({"key": CUDA_MINOR_LABEL, "operator": "Gt", "values": [str(minor - 1)]})
        terms = [
            [{"key": CUDA_MAJOR_LABEL, "operator": "Gt", "values": [str(major)]}],
            same_major,
            [{"key": CUDA_MAJOR_LABEL, "operator": "DoesNotExist"}],
        ]
    elif base:
        terms = [[]]
    if not terms:
        return None
    return {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
        "nodeSelectorTerms": [{"matchExpressions": [*base, *term]} for term in terms]}}}
