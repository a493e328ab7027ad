"""What the reconciles of one process share (``Runtime``), what one reconcile returns (``Result``), the stop rule."""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from typing import Any

from ..kube.calibration import CalibrationStore
from ..kube.claims import ClaimsApi
from ..kube.groups import GroupsMemo
from ..kube.keda import KedaMemo
from ..kube.pools import PoolMemo
from ..kube.protocol import KubeClient
from ..kube.resolution import Resolutions
from ..kube.service_lane import ServiceLane
from ..rejections import RejectionBook
from ..runtime.lanes import EventPoster
from ..settings import Settings
from ..telemetry.metrics import Metrics
from ..views.pods import DeploymentView


@dataclass
class Runtime:
    """What reconciles share (kept on kopf's ``memo``): settings, API wrapper, the cache's claim calls
    (``claims``; None: servers are rendered without a cache), metrics, a bound on
    concurrent Service creations (so they cannot hold every worker while Deployments wait), and an
    optional poster of Normal Events off the reconcile path (``events.EventPoster``; None: inline; Warnings
    are always posted inline, right after the status write that records them).

    ``defer_status_after_create``: a fresh plan's pass only creates the Deployment and requeues; the
    status and Events follow on the next pass (behind other servers' first passes), so a burst of new
    servers gets its engines started first. Safe because a fresh plan re-derives identically.

    ``services``: the lane that writes Services off the reconcile path (``service_lane``; None: inline).

    ``resolutions``: the shared model resolutions (``kube/resolution.py``; None: models in no catalog are not
    resolved and plan from the spec alone).

    ``stopping``: set when the operator stops; a reconcile in a worker thread writes nothing more (each
    write is re-derived by the next pass, in this process or the next, so stopping between two is safe).
    """

    settings: Settings
    kube: KubeClient
    metrics: Metrics
    events: EventPoster | None = None
    defer_status_after_create: bool = False
    rejections: RejectionBook = field(default_factory=RejectionBook)
    calibration: CalibrationStore | None = None
    claims: ClaimsApi | None = None
    keda: KedaMemo = field(default_factory=KedaMemo)
    groups: GroupsMemo = field(default_factory=GroupsMemo)
    pools: PoolMemo = field(default_factory=PoolMemo)
    stopping: threading.Event = field(default_factory=threading.Event)
    services: ServiceLane | None = None
    resolutions: Resolutions | None = None


@dataclass(frozen=True)
class Result:
    """What the caller keeps from one reconcile.

    Attributes:
        requeue_after: seconds until another look is needed (None: only on changes).
        applied: the Deployment this pass applied when it deferred the rest (see ``defer_status_after_create``).
        waiting_for_nodes: the server waits for an eligible node (re-check on node changes).
        stored: the InferenceServer as stored after our status write (None: not written).
        conflict: the caller's view may be stale (conflict or error): read from the API next time.
    """

    requeue_after: float | None
    applied: DeploymentView | None = None
    waiting_for_nodes: bool = False
    stored: dict[str, Any] | None = None
    conflict: bool = False


class Stopping(Exception):
    """The operator is stopping: this reconcile writes nothing more."""


def not_stopping(rt: Runtime) -> None:
    """Raise ``Stopping`` once the operator stops (called before each write)."""
    if rt.stopping.is_set():
        raise Stopping


def multi_node(body: dict[str, Any]) -> bool:
    """The stored spec asks for a multi-node group (its workload is a LeaderWorkerSet)."""
    nodes = (body.get("spec") or {}).get("nodes")
    return isinstance(nodes, int) and nodes > 1

