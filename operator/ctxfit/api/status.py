"""``status`` of an InferenceServer: what the operator chose, observed and did (never the user's spec).

Conventions (kubebuilder ``*_types.go``): ``observedGeneration``; ``conditions[]`` with
type/status/reason/message/lastTransitionTime, reasons as ``StrEnum``; domain facts in typed fields
(``plan`` in bytes, ``effective``, ``contextLength``, ``attempts[]``). Timestamps are RFC 3339 UTC
strings (``2026-01-01T00:00:00Z``). Sizes inside ``plan`` are integers (bytes); sizes inside
``effective`` are Kubernetes quantities, as ``EffectiveConfig.to_wire`` writes them.
"""

from __future__ import annotations

from datetime import UTC, datetime
from enum import StrEnum
from typing import Annotated, Any, Literal

from pydantic import Field, model_validator

from .autoscaling import AutoscalingStatus
from .base import WireModel
from .model_cache import ModelStatus
from .observed import ObservedStatus
from .plan_status import BudgetBytes as BudgetBytes
from .plan_status import BudgetExtra as BudgetExtra
from .plan_status import EffectiveStatus as EffectiveStatus
from .plan_status import PlanStatus as PlanStatus
from .resolution import ResolvedAdapter, ResolvedModel
from .routing import RoutingStatus

ModelStatus.model_rebuild(_types_namespace={"ResolvedModel": ResolvedModel, "ResolvedAdapter": ResolvedAdapter})


class Phase(StrEnum):
    """Where an InferenceServer is in its life."""

    PLANNING = "Planning"
    DOWNLOADING = "Downloading"
    STARTING = "Starting"
    READY = "Ready"
    STEPPING_DOWN = "SteppingDown"
    RETRYING = "Retrying"
    FAILED = "Failed"


class ConditionType(StrEnum):
    """The condition types ctxfit maintains."""

    READY = "Ready"
    BUDGET_FITS = "BudgetFits"
    DEGRADED = "Degraded"
    OBJECTS_ACCEPTED = "ObjectsAccepted"
    ADMITTED = "Admitted"
    WEIGHTS_CACHED = "WeightsCached"
    AUTOSCALING = "Autoscaling"
    MODEL_RESOLVED = "ModelResolved"
    INFERENCE_POOL = "InferencePool"
    POOL_CONTEXT_COVERED = "PoolContextCovered"
    ENGINE_VERSION_MODELLED = "EngineVersionModelled"



_CONDITION_ORDER = {kind: i for i, kind in enumerate(ConditionType)}
"""Conditions are kept in ``ConditionType``'s order (a stable status for diffs and ``kubectl describe``)."""


class Reason(StrEnum):
    """Machine-readable ``reason`` of conditions and Events (CamelCase, as Kubernetes expects)."""

    # BudgetFits
    FITS = "Fits"
    FITS_BELOW_TARGET = "FitsBelowTarget"
    DOES_NOT_FIT = "DoesNotFit"
    INVALID_SPEC = "InvalidSpec"
    NO_ELIGIBLE_NODE = "NoEligibleNode"
    # Ready
    ENGINE_READY = "EngineReady"
    ENGINE_STARTING = "EngineStarting"
    STEPPING_DOWN = "SteppingDown"
    RETRYING = "Retrying"
    PERMANENT_FAILURE = "PermanentFailure"
    ATTEMPTS_EXHAUSTED = "AttemptsExhausted"
    NOT_STARTED = "NotStarted"
    WAITING_FOR_GPUS = "WaitingForGPUs"
    WAITING_FOR_POD = "WaitingForPod"
    IMAGE_PULL_FAILED = "ImagePullFailed"
    POD_CREATION_FAILED = "PodCreationFailed"
    GROUP_RESTARTS_EXHAUSTED = "GroupRestartsExhausted"
    # Degraded
    AS_PLANNED = "AsPlanned"
    BELOW_TARGET = "BelowTarget"
    STEPPED_DOWN = "SteppedDown"
    CONTEXT_CLAMPED = "ContextClamped"
    # WeightsCached (and the Downloading phase)
    DOWNLOADING = "Downloading"
    DOWNLOAD_RETRYING = "DownloadRetrying"
    CACHED = "Cached"
    PRELOADED = "Preloaded"
    NOT_CACHED = "NotCached"
    CLAIM_GROWN = "ClaimGrown"
    # ModelResolved (resolution of spec.model before the first plan; docs/design/model-resolution.md)
    RESOLVED = "Resolved"
    RESOLVING = "Resolving"
    HUB_UNREACHABLE = "HubUnreachable"
    MODEL_ACCESS_DENIED = "ModelAccessDenied"
    MODEL_NOT_FOUND = "ModelNotFound"
    REVISION_NOT_FOUND = "RevisionNotFound"
    UNSUPPORTED_ARCHITECTURE = "UnsupportedArchitecture"
    INVALID_CHECKPOINT = "InvalidCheckpoint"
    RESOLVER_NOT_CONFIGURED = "ResolverNotConfigured"
    REVISION_MOVED = "RevisionMoved"
    # Events only
    OBSERVED = "Observed"
    PLANNED = "Planned"
    ATTEMPT_FAILED = "AttemptFailed"
    SPEC_CHANGED = "SpecChanged"
    # ObjectsAccepted (the API server refused a rendered object) and Admitted (operator policy)
    OBJECT_REJECTED = "ObjectRejected"
    FOREIGN_OBJECT = "ForeignObject"
    LWS_NOT_INSTALLED = "LeaderWorkerSetNotInstalled"
    OBJECTS_ACCEPTED = "Accepted"
    REFUSED_BY_POLICY = "RefusedByPolicy"
    ALLOWED_BY_POLICY = "AllowedByPolicy"
    # Events only: the stored status failed validation and was discarded
    INVALID_STATUS = "InvalidStatus"
    DRIFT_REVERTED = "DriftReverted"
    REOPENED = "Reopened"
    # Autoscaling (spec.autoscaling: the KEDA ScaledObject)
    SCALED_OBJECT_READY = "ScaledObjectReady"
    SCALED_OBJECT_PENDING = "ScaledObjectPending"
    SCALED_OBJECT_NOT_READY = "ScaledObjectNotReady"
    AUTOSCALING_PAUSED = "AutoscalingPaused"
    KEDA_NOT_INSTALLED = "KEDANotInstalled"
    KEDA_DISABLED = "KEDADisabled"
    SCALED_OBJECT_DELETED = "ScaledObjectDeleted"
    # Events only (autoscaling)
    SCALED_OBJECT_CREATED = "ScaledObjectCreated"
    AUTOSCALING_RESUMED = "AutoscalingResumed"
    GROUP_RECREATED = "GroupRecreated"
    # InferencePool (spec.routing.inferencePool) and Admitted False when a pool's servers disagree
    POOL_CREATED = "PoolCreated"
    POOL_JOINED = "PoolJoined"
    POOL_NOT_FOUND = "PoolNotFound"
    POOL_SELECTOR_MISMATCH = "PoolSelectorMismatch"
    POOL_NOT_OWNED = "PoolNotOwned"
    POOL_CRD_MISSING = "InferencePoolCRDMissing"
    GATEWAY_DISABLED = "GatewayDisabled"
    POOL_MODEL_MISMATCH = "PoolModelMismatch"
    # PoolContextCovered
    CONTEXT_COVERED = "ContextCovered"
    NO_REPLICA_HOLDS_LONGEST_CONTEXT = "NoReplicaHoldsLongestContext"
    # Events only (routing)
    POOL_RELABELED = "PoolRelabeled"
    # Events only (a GPU product the engine cannot run the model on is avoided by the next attempts)
    GPU_PRODUCT_EXCLUDED = "GPUProductExcluded"
    # EngineVersionModelled (ctxfit.engines.versions.VersionCoverage: the same values)
    VERSION_MODELLED = "VersionModelled"
    OLDER_THAN_MODELLED = "OlderThanModelled"
    NEWER_THAN_MODELLED = "NewerThanModelled"
    VERSION_NOT_SET = "VersionNotSet"
    VERSION_UNKNOWN = "VersionUnknown"


ConditionStatus = Literal["True", "False", "Unknown"]


class AttemptOutcome(StrEnum):
    """How one start of the engine ended (``Running`` while it is still in progress)."""

    RUNNING = "Running"
    SUCCEEDED = "Succeeded"
    FAILED = "Failed"
    SUPERSEDED = "Superseded"


def now_rfc3339(clock: datetime | None = None) -> str:
    """``clock`` (default: now) as RFC 3339 UTC with seconds precision, e.g. ``2026-01-01T00:00:00Z``."""
    moment = (clock or datetime.now(UTC)).astimezone(UTC)
    return moment.replace(microsecond=0).strftime("%Y-%m-%dT%H:%M:%SZ")


def parse_rfc3339(text: str) -> datetime:
    """Inverse of ``now_rfc3339`` (accepts a trailing ``Z`` or an offset). Raises ``ValueError``."""
    return datetime.fromisoformat(text.replace("Z", "+00:00"))


class Condition(WireModel):
    """One Kubernetes-style condition. ``lastTransitionTime`` changes only when ``status`` changes."""

    type: ConditionType
    """Ready, BudgetFits, Degraded, ObjectsAccepted, Admitted, WeightsCached, Autoscaling, ModelResolved,
    InferencePool, PoolContextCovered or EngineVersionModelled."""
    status: ConditionStatus
    """True, False or Unknown."""
    reason: Reason
    """CamelCase reason, machine-readable (e.g. Fits, DoesNotFit, EngineReady, SteppingDown); always agrees with
    message.
    """
    message: str = ""
    """One sentence for humans, at most 1024 characters."""
    last_transition_time: str
    """When status last changed (RFC 3339 UTC)."""
    observed_generation: int | None = None
    """metadata.generation the condition was computed for."""


class GroupLeader(WireModel):
    """The leader pod of one LeaderWorkerSet group as last seen (multi-node servers): a new uid with the same
    template revision is the group recreated by the LWS controller, not a rollout."""

    group: int = Field(ge=0, le=10000)
    """The group's index (pod label ``leaderworkerset.sigs.k8s.io/group-index``)."""
    uid: str = Field(max_length=64)
    """The leader pod's ``metadata.uid``."""
    revision: str | None = Field(default=None, max_length=63)
    """The pod's ``leaderworkerset.sigs.k8s.io/template-revision-hash`` label (the LWS template revision)."""
    complete: bool | None = None
    """Every pod of this incarnation has been seen (the leader and its workers, none being deleted). The
    recreation of an incomplete incarnation is not counted while the old pods may still be terminating (the
    LWS controller recreating a group again while its new incarnation is still coming up is the same
    disruption); later it is (``controller/converge/group_restarts.py`` ``CASCADE_SECONDS``).
    Absent (written before this field existed): counted as complete."""
    since: str | None = Field(default=None, max_length=40)
    """Creation time (RFC 3339) of the leader that opened the group's current disruption: its first leader, or
    the last one whose recreation was counted. A recreation within ``RECREATION_WINDOW_SECONDS`` of it (the
    LWS controller reacting to the same deletions again) is not counted again."""
    restarts: int | None = Field(default=None, ge=0, le=10000)
    """Recreations of this group counted since its pods were last all Ready (the restart budget is
    per group: several groups recreated once each by one maintenance are not one group recreated again and
    again). Absent (written before this field existed): the attempt's ``groupRestarts``."""


class Attempt(WireModel):
    """One start of the engine with one effective configuration.

    Attributes:
        number: 1-based; the pod template carries it as ``ctxfit.io/attempt``.
        effective: the configuration of this start.
        started_at: when the operator decided on it (RFC 3339).
        not_before: earliest time the operator applies it (backoff after a failed start).
        finished_at: when it succeeded or failed.
        outcome: Running, Succeeded, Failed, Superseded (spec changed).
        failure_kind: the classifier's kind (``FailureKind`` value) when it failed.
        evidence: the line or Kubernetes signal the diagnosis rests on.
        explanation: the policy's sentence (what was seen, what changes next).
        pod: the pod the outcome was read from.
        node: the node that pod ran on (a ``CUDADriverTooOld`` failure excludes it from later attempts).
        group_restarts: multi-node only: the most times the LeaderWorkerSet controller recreated one of this
            attempt's groups since its pods were last all Ready (``RecreateGroupOnPodRestart``; per group:
            ``group_leaders[].restarts``); past the operator's budget (``CTXFIT_GROUP_RESTART_BUDGET``) the
            server ends Failed with ``GroupRestartsExhausted``.
        group_leaders: multi-node only: the leader pod of each group as last seen (how a recreation is told
            from a rollout; kept in status so an operator restart neither loses nor repeats a count).
        silent: a failed attempt: whether it failed without a word from the engine or Kubernetes (kind Unknown,
            no termination reason, exit code, message or log line: e.g. the pod was lost with its node).
        reopened: superseded without counting because it was ``silent``; a history is reopened at most once,
            so an engine that hangs without a word still ends Failed.
        clamped: it became Ready, but the engine served less than the effective context (its start-up
            report); recorded as a ``KVCacheTooSmall`` failure and stepped down.
    """

    number: int = Field(ge=1)
    effective: EffectiveStatus
    started_at: str
    not_before: str | None = None
    finished_at: str | None = None
    outcome: AttemptOutcome = AttemptOutcome.RUNNING
    failure_kind: str | None = None
    evidence: str | None = None
    explanation: str | None = None
    pod: str | None = None
    node: str | None = None
    group_restarts: int | None = Field(default=None, ge=0, le=10000)
    group_leaders: list[GroupLeader] | None = Field(default=None, max_length=10000)
    silent: bool | None = None
    reopened: bool | None = None
    clamped: bool | None = None

    @model_validator(mode="after")
    def _legacy_flags(self) -> Attempt:
        """Attempts stored before ``silent``/``reopened``/``clamped`` existed carried them in their text: read
        it once here, so every decision reads the typed fields."""
        if self.silent is None and self.outcome is AttemptOutcome.FAILED and self.failure_kind == "Unknown" \
                and (self.evidence or "") in LEGACY_SILENT_EVIDENCE:
            self.silent = True
        if self.reopened is None and (self.explanation or "").startswith(LEGACY_REOPEN_NOTE):
            self.reopened = True
        if self.clamped is None and (self.evidence or "").startswith(LEGACY_CLAMP_MARK):
            self.clamped = True
        return self


LEGACY_SILENT_EVIDENCE = frozenset({"", "terminated"})
"""Evidence of a silent failure as operators before ``Attempt.silent`` stored it (the classifier's fallback)."""
LEGACY_REOPEN_NOTE = "not an engine failure: the pod showed no termination, exit code or message"
"""Start of a reopened attempt's explanation as operators before ``Attempt.reopened`` wrote it."""
LEGACY_CLAMP_MARK = "ContextClamped:"
"""Start of a clamped attempt's evidence as operators before ``Attempt.clamped`` wrote it."""


class ExcludedProduct(WireModel):
    """A GPU product later attempts avoid: an attempt on it failed in a way bound to the product or its compute
    capability (``UnsupportedGPU``), and the spec pins no product. Cleared when the spec changes
    (``spec_key``)."""

    product: Annotated[str, Field(max_length=63)]
    """GFD ``nvidia.com/gpu.product`` of the excluded nodes."""
    compute_capability: Annotated[str, Field(max_length=8)] | None = None
    """Its compute capability (major.minor, from the failure's message, the node's GFD labels or the catalog)."""
    failure_kind: Annotated[str, Field(max_length=64)]
    """The failure that excluded it (``FailureKind`` value)."""
    attempt: int = Field(ge=1)
    """The attempt whose failure excluded it (it failed on this product, or on one whose failure rules this one out:
    the same compute capability, or below the minimum the message states)."""
    reason: Annotated[str, Field(max_length=512)] = ""
    """Why, in one line: the product the attempt failed on and the capability the message requires."""


class InferenceServerStatus(WireModel):
    """``status`` of an InferenceServer. Written only by the operator, through the status subresource.

    Attributes:
        observed_generation: ``metadata.generation`` this status describes.
        phase: Planning (no plan or no eligible node yet), Starting (an attempt is loading), Ready (serving),
            SteppingDown (a start failed; the next attempt uses a safer configuration), Retrying (a start
            failed; the same configuration is tried again), Failed (nothing fits or recovery gave up).
        conditions: Ready, BudgetFits, Degraded.
        plan: the planner's budget for the spec on the chosen GPU.
        effective: the configuration in force (the last attempt's).
        context_length: ``effective.contextLength`` while a replica of it may run (printer column CONTEXT);
            absent while Failed (scaled to 0: nothing runs), when ``effective`` still says what was tried last.
        kv_cache_tokens: tokens of the KV pool the engine of the attempt in force reported at start-up
            (``observed.kvCacheTokens`` while ``observed`` is the newest attempt's and ``contextLength`` is set;
            printer column KV TOKENS); absent while Failed or before the newest attempt reported.
        attempts: every start under the current spec, oldest first.
        endpoint: the Service URL (``http://NAME.NAMESPACE.svc:PORT``).
        node_product: GFD product of the GPUs the plan is for.
        excluded_products: GPU products later attempts avoid (an unpinned spec whose attempt failed with a kind
            bound to the product or its compute capability); cleared when the spec changes. Absent: none.
        spec_key: digest of the spec fields that history depends on (history is kept while it matches).
        message: one line for humans (the latest explanation).
        observed: the engine's own start-up accounting for the newest Ready attempt, and the error.
        model: the weights cache in force and the last download (``ctxfit.api.model_cache``).
        replicas: engine replicas the workload has now (its ``status.replicas``; printer column REPLICAS), for
            every server, autoscaled or not.
        autoscaling: the autoscaling thresholds in force, the ScaledObject and the replica counts
            (``ctxfit.api.autoscaling``); absent without ``spec.autoscaling``.
        routing: the InferencePool in force and the context this server's pods say they hold
            (``ctxfit.api.routing``); absent without ``spec.routing.inferencePool``.
    """

    observed_generation: int | None = None
    phase: Phase | None = None
    conditions: list[Condition] = Field(default_factory=list)
    plan: PlanStatus | None = None
    effective: EffectiveStatus | None = None
    context_length: int | None = None
    kv_cache_tokens: int | None = None
    attempts: list[Attempt] = Field(default_factory=list)
    endpoint: str | None = None
    node_product: str | None = None
    excluded_products: Annotated[list[ExcludedProduct], Field(max_length=32)] | None = None
    spec_key: str | None = None
    message: str | None = None
    observed: ObservedStatus | None = None
    model: ModelStatus | None = None
    replicas: int | None = None
    autoscaling: AutoscalingStatus | None = None
    routing: RoutingStatus | None = None

    @classmethod
    def from_body(cls, status: dict[str, Any] | None) -> InferenceServerStatus:
        """Parse the stored status, ignoring keys other writers put there (e.g. kopf's)."""
        data = {k: v for k, v in (status or {}).items() if k in _WIRE_FIELDS}
        return cls.model_validate(data)

    def excluded_names(self) -> frozenset[str]:
        """The GPU products ``excluded_products`` names (later attempts avoid them)."""
        return frozenset(e.product for e in self.excluded_products or ())

    def condition(self, kind: ConditionType) -> Condition | None:
        """The condition of ``kind``, if set."""
        return next((c for c in self.conditions if c.type is kind), None)

    def set_condition(
        self,
        kind: ConditionType,
        status: ConditionStatus,
        reason: Reason,
        message: str,
        *,
        now: str,
        generation: int | None = None,
    ) -> bool:
        """Add or update a condition; ``lastTransitionTime`` moves only when ``status`` changes. Returns whether
        its status, reason or message changed (or it is new): what an Event on the change keys on."""
        old = self.condition(kind)
        since = old.last_transition_time if old is not None and old.status == status else now
        new = Condition(
            type=kind,
            status=status,
            reason=reason,
            message=message[:1024],
            last_transition_time=since,
            observed_generation=generation,
        )
        others = [c for c in self.conditions if c.type is not kind]
        self.conditions = sorted([*others, new], key=lambda c: _CONDITION_ORDER[c.type])
        return old is None or (old.status, old.reason, old.message) != (status, reason, new.message)

    @property
    def current_attempt(self) -> Attempt | None:
        """The newest attempt, if any."""
        return self.attempts[-1] if self.attempts else None

    def to_wire(self) -> dict[str, object]:
        """camelCase dict for the status write (a replace): fields that do not apply are omitted, never null."""
        return self.model_dump(by_alias=True, exclude_none=True, mode="json")


_WIRE_FIELDS = frozenset((f.alias or name) for name, f in InferenceServerStatus.model_fields.items())
