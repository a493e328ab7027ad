"""Kubernetes I/O for multi-node servers: the LeaderWorkerSet (``leaderworkerset.x-k8s.io/v1``).

Same write rules as the Deployment (``objects.py``); only multi-node servers reach it.
Details and RBAC: docs/design/group-restarts.md.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from kubernetes.client.exceptions import ApiException

from .answers import resource_missing
from .objects import create_or_replace, get_or_none, scale_to_zero
from .protocol import KubeClient
from .rest import LEADER_WORKER_SETS

LWS_GROUP = LEADER_WORKER_SETS.group
LWS_VERSION = LEADER_WORKER_SETS.version


class GroupsNotInstalled(Exception):
    """The API server does not serve ``leaderworkersets.leaderworkerset.x-k8s.io`` (the LWS CRD not installed)."""


ABSENT_MEMO_SECONDS = 60.0
"""LeaderWorkerSets found not served: no server asks again before this many seconds (one 404 per minute, not
one per pass of every multi-node server)."""


@dataclass
class GroupsMemo:
    """Shared by all reconciles (on ``Runtime``): when LeaderWorkerSets were found not served, until when."""

    absent_until: float = 0.0

    def absent(self, now: float) -> bool:
        """Found not served less than ``ABSENT_MEMO_SECONDS`` ago."""
        return now < self.absent_until

    def found_absent(self, now: float) -> None:
        """Remember that the API server does not serve LeaderWorkerSets."""
        self.absent_until = now + ABSENT_MEMO_SECONDS


def get_group(kube: KubeClient, namespace: str, name: str) -> dict[str, Any] | None:
    """The LeaderWorkerSet as a plain dict, None when absent.

    Raises:
        GroupsNotInstalled: the resource type itself is not served.
    """
    try:
        return get_or_none(kube.rest, LEADER_WORKER_SETS, namespace, name)
    except ApiException as exc:
        if resource_missing(exc):
            raise GroupsNotInstalled(str(exc.reason)) from exc
        raise


def apply_group(kube: KubeClient, obj: dict[str, Any], *, exists: bool) -> None:
    """Create the LeaderWorkerSet, or replace its spec/labels/annotations (``objects.create_or_replace``; a stale
    ``exists`` is corrected).

    Raises:
        GroupsNotInstalled: the resource type is not served (the LWS CRD not installed).
        ownership.Foreign: a LeaderWorkerSet of that name is not the server's (nothing written).
        ApiException: any other refusal.
    """
    try:
        create_or_replace(kube.rest, LEADER_WORKER_SETS, obj, exists=exists)
    except ApiException as exc:
        if resource_missing(exc):
            raise GroupsNotInstalled(str(exc.reason)) from exc
        raise


def scale_group_to_zero(kube: KubeClient, namespace: str, name: str, owner: str) -> None:
    """Set the server's LeaderWorkerSet's replicas to 0 (every group's GPUs released): a guarded JSON patch
    (``objects.scale_to_zero``). Absent is fine. Raises ``ownership.Foreign`` when it is not the server's (uid
    ``owner``)."""
    scale_to_zero(kube.rest, LEADER_WORKER_SETS, namespace, name, owner)
