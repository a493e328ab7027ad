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
from ctxfit.render import RenderInput
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


ReadStartup = Callable[[PodView], str | None]
"""``read_startup(pod) -> text``: the head of the engine container's log (bounded), None when it could not be read
(then ``verify.observe_startup`` reads it again on a later pass instead of recording "not observed")."""
DiagnoseDownload = Callable[[PodView], Failure]
"""Classify a failed ``model-download`` run (its termination message, log tail and the pod's Events)."""
RecordFailure = Callable[[PodView, Failure, Decision | None], None]
"""``record(pod, failure, decision)``: end the attempt through ``attempts.fail``."""


class Keda(StrEnum):
    """Whether the operator can use KEDA: its settings allow it and the API server serves ``scaledobjects``."""

    INSTALLED = "Installed"
    ABSENT = "Absent"
    DISABLED = "Disabled"


class Write(StrEnum):
    """A child write the book keeps apart; the value is how conditions and Events name it."""

    DEPLOYMENT = "Deployment"
    GROUP = "LeaderWorkerSet"
    DEPLOYMENT_SCALE = "Deployment/scale"
    GROUP_SCALE = "LeaderWorkerSet/scale"
    SERVICE = "Service"
    CLAIM = "PersistentVolumeClaim"
    CLAIM_EXPAND = "PersistentVolumeClaim/expand"
    CLAIM_DELETE = "PersistentVolumeClaim/delete"
    SCALED_OBJECT = "ScaledObject"
    SCALED_OBJECT_PAUSE = "ScaledObject/pause"
    SCALED_OBJECT_DELETE = "ScaledObject/delete"
    POOL = "InferencePool"

    @property
    def holds_ready(self) -> bool:
        """A refusal of this write stops the server from serving (Ready held, no endpoint)."""
        return self not in SERVING_UNAFFECTED

    @property
    def autoscaler(self) -> bool:
        """A write of the server's ScaledObject (any verb)."""
        return self in (Write.SCALED_OBJECT, Write.SCALED_OBJECT_PAUSE, Write.SCALED_OBJECT_DELETE)


SERVING_UNAFFECTED = frozenset({Write.SCALED_OBJECT, Write.SCALED_OBJECT_PAUSE, Write.SCALED_OBJECT_DELETE,
                                Write.CLAIM_EXPAND, Write.CLAIM_DELETE})
"""Refused writes that do not stop the server from serving: its ScaledObject (it serves at its current replica
count), the growth of a claim it already mounts, the delete of a claim it no longer mounts."""


@dataclass(frozen=True)
class Refusal:
    """One refused write as the refusal book holds it at the snapshot (``Snapshot.refusals``, oldest first).

    Attributes:
        write: what was refused.
        fingerprint: ``fingerprint`` of the refused object ("" for a verb without a body: scale, pause, delete).
        wait: seconds until that rendering may be tried again (0: due now; another rendering is always due).
        message: the condition's and the Event's text (the API server's message, or whose the object is).
        reason: ``ObjectRejected``, or ``ForeignObject`` for an object that is not the server's.
        announce: a Warning Event is due (the first of this cause in an hour: ``RejectionBook.should_post``).
    """

    write: Write
    fingerprint: str
    wait: float
    message: str
    reason: Reason = Reason.OBJECT_REJECTED
    announce: bool = False


@dataclass(frozen=True)
class ScalingSnapshot:
    """What reconcile read for autoscaling: KEDA's presence and the live ScaledObject (None: absent)."""

    keda: Keda
    live: ScaledObjectView | None = None


@dataclass(frozen=True)
class Snapshot:
    """One InferenceServer and what the operator knows around it, at ``now``.

    ``service_port``: the port of its Service (None: no Service yet).
    ``refusals``: the refusal book's entries of the server, oldest first (``rejections.RejectionBook.refusals``);
    ``writes_accepted``: the last pass applied every write it asked for (``RejectionBook.accepted_all``);
    ``service_writing``: the Service lane is writing its Service right now (``kube/service_lane.py``);
    ``service_lane``: Services are written by that lane, after the pass (else inline, in it).
    ``storage``, ``claim``, ``download_log``: the StorageClasses (None: not read, no cache rendered), the
    cache claim, and a reader of a pod's download log (``converge.cache``).
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
    draft_resolution: ResolutionView | None = None
    adapter_resolutions: tuple[ResolutionView, ...] = ()
    routing: RoutingSnapshot | None = None
    created: str = ""
    refusals: tuple[Refusal, ...] = ()
    writes_accepted: bool = False
    service_writing: bool = False
    service_lane: bool = False


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
    draft_resolution_request: ResolutionRequest | None = None
    adapter_resolution_requests: list[ResolutionRequest] = field(default_factory=list)
    replan_resolution: bool = False
    plan_result: Plan | None = None
    pool: dict[str, Any] | None = None
    pool_delete: tuple[str, str] | None = None
    pod_labels: dict[str, tuple[str, dict[str, str]]] = field(default_factory=dict)
    rendered: tuple[RenderInput, dict[str, Any]] | None = field(default=None, repr=False, compare=False)
    """The one-node Deployment this pass rendered and its input (``desired.desired_digest`` renders it first, to
    compare the pods with; ``desired`` reuses it when its input is equal). Not an action."""

    def requeue(self, seconds: float) -> None:
        """Look again after ``seconds`` at the latest (keeps the earliest request)."""
        seconds = max(0.05, seconds)
        self.requeue_after = seconds if self.requeue_after is None else min(self.requeue_after, seconds)


NeedKind = Literal["spec", "catalog", "hub", "token", "volume"]


@dataclass(frozen=True)
class Need:
    """What resolution the spec needs: ``kind`` and the key the I/O layer shares it under.

    Attributes:
        kind: where the resolution comes from (``NeedKind``; docs/design/model-resolution.md).
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
