"""The pass' input and output and the small types its steps share: ``Snapshot`` (what reconcile read for one
server), ``Outcome`` (what to write), ``EventNote``, and the injected I/O (``Diagnose``, ``ReadStartup``...)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from enum import StrEnum
from typing import Any, Literal

from ctxfit.api import InferenceServerSpec
from ctxfit.api.status import Attempt, InferenceServerStatus, Reason
from ctxfit.budget.calibrate import CalibrationKey, CalibrationTable, Sample
from ctxfit.budget.planner import Plan
from ctxfit.recovery import Decision
from ctxfit.vocab.kinds import Failure
from ctxfit.vocab.modelsource import ModelSource

from ..views.cache import ClaimView, StorageView
from ..views.pods import DeploymentView, GPUNode, PodView
from ..views.routing import RoutingSnapshot
from ..views.workloads import ScaledObjectView


@dataclass(frozen=True)
class EventNote:
    """A Kubernetes Event to post on the InferenceServer (type Normal/Warning, CamelCase reason)."""

    type: Literal["Normal", "Warning"]
    reason: Reason
    message: str


Diagnose = Callable[[PodView, int], Failure]
"""``diagnose(pod, restarts_seen) -> Failure``: read the pod's termination, log tail and Events, classify."""


ReadStartup = Callable[[PodView], str]
"""``read_startup(pod) -> text``: the head of the engine container's log (bounded), "" when unreadable."""
DiagnoseDownload = Callable[[PodView], Failure]
"""Classify a failed ``model-download`` run (its termination message, log tail and the pod's Events)."""
RecordFailure = Callable[[PodView, Failure, Decision | None], None]
"""``record(pod, failure, decision)``: end the attempt through ``stepping.record_failure``."""


class Keda(StrEnum):
    """Whether the operator can use KEDA: its settings allow it and the API server serves ``scaledobjects``."""

    INSTALLED = "Installed"
    ABSENT = "Absent"
    DISABLED = "Disabled"


@dataclass(frozen=True)
class ScalingSnapshot:
    """What reconcile read for autoscaling: KEDA's presence and the live ScaledObject (None: absent)."""

    keda: Keda
    live: ScaledObjectView | None = None


@dataclass(frozen=True)
class Snapshot:
    """One InferenceServer and what the operator knows around it, at ``now``.

    ``service_port``: the port of its Service (None: no Service yet).
    ``storage``, ``claim``, ``download_log``: the StorageClasses (None: not read, no cache rendered), the
    cache claim, and a reader of a pod's download log (``controller.cache``).
    """

    name: str
    namespace: str
    uid: str
    generation: int
    spec: dict[str, Any]
    status: InferenceServerStatus
    nodes: tuple[GPUNode, ...]
    pods: tuple[PodView, ...]
    deployment: DeploymentView | None
    service_port: int | None
    now: datetime
    calibration: CalibrationTable | None = None
    storage: StorageView | None = None
    claim: ClaimView | None = None
    download_log: Callable[[PodView], str] | None = None
    scaling: ScalingSnapshot | None = None
    groups_served: bool = True
    resolution: ResolutionView | None = None
    routing: RoutingSnapshot | None = None
    created: str = ""


@dataclass
class Outcome:
    """What to do: write ``status`` (when changed), apply ``deployment``/``service``/``scaled_object`` (when not
    None); ``scaled_object_delete``/``scaled_object_pause``: delete or pause the live ScaledObject."""

    status: InferenceServerStatus
    deployment: dict[str, Any] | None = None
    scale_to_zero: bool = False
    service: dict[str, Any] | None = None
    events: list[EventNote] = field(default_factory=list)
    requeue_after: float | None = None
    waiting_for_nodes: bool = False
    finished: list[Attempt] = field(default_factory=list)
    step_down_reasons: list[str] = field(default_factory=list)
    spec: InferenceServerSpec | None = None
    samples: list[tuple[CalibrationKey, Sample]] = field(default_factory=list)
    claim: dict[str, Any] | None = None
    claim_exists: bool = False
    claim_delete: str | None = None
    scaled_object: dict[str, Any] | None = None
    scaled_object_delete: bool = False
    scaled_object_pause: bool = False
    resolution_request: ResolutionRequest | None = None
    replan_resolution: bool = False
    plan_result: Plan | None = None
    pool: dict[str, Any] | None = None
    pool_delete: tuple[str, str] | None = None
    pod_labels: dict[str, tuple[str, dict[str, str]]] = field(default_factory=dict)

    def requeue(self, seconds: float) -> None:
        """Look again after ``seconds`` at the latest (keeps the earliest request)."""
        seconds = max(0.05, seconds)
        self.requeue_after = seconds if self.requeue_after is None else min(self.requeue_after, seconds)


NeedKind = Literal["spec", "catalog", "hub", "token", "volume"]


@dataclass(frozen=True)
class Need:
    """What resolution the spec needs: ``kind`` and the key the I/O layer shares it under.

    Attributes:
        kind: see the module docstring.
        key: sharing key (kind first).
        repo: repository id, or the path inside the volume.
        revision: ``spec.model.revision`` (``main`` when unset).
        secret: ``(name, key)`` of the token Secret (``token``).
        claim: ``(claimName, subPath)`` of the preloaded claim (``volume``).
    """

    kind: NeedKind
    key: tuple[str, ...]
    repo: str
    revision: str = "main"
    secret: tuple[str, str] | None = None
    claim: tuple[str, str] | None = None

    @property
    def reads(self) -> bool:
        """True when something must be read (hub, token, volume)."""
        return self.kind in ("hub", "token", "volume")


@dataclass(frozen=True)
class ResolutionView:
    """What the I/O layer knows for a key (``kube.resolution``).

    Attributes:
        key: the ``Need.key`` asked about.
        source: the resolved model, when resolved.
        resolved_at: when it was resolved.
        error: the typed failure (``ResolveKind`` value), when the last try failed.
        detail: what the source said (one line).
        retry_at: when the I/O layer tries again (waiting errors, and a token's denial).
        in_flight: a resolution for this key is running (the operator's own, or a resolver pod).
        pod: the resolver pod's name and what it is doing (``Pending: Unschedulable ...``), when one runs.
    """

    key: tuple[str, ...]
    source: ModelSource | None = None
    resolved_at: datetime | None = None
    error: str | None = None
    detail: str = ""
    retry_at: datetime | None = None
    in_flight: bool = False
    pod: str | None = None


@dataclass(frozen=True)
class ResolutionRequest:
    """Ask the I/O layer to resolve ``need`` (it dedupes per key). ``forget_error``: drop the key's cached error
    first (the spec changed); ``recheck``: refresh a resolved moving branch in the background."""

    need: Need
    forget_error: bool = False
    recheck: bool = False
