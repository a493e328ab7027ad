"""Views of what the inference gateway shows (pure): live InferencePools, the servers naming a pool, pooled pods.

``pool_view`` and ``member_view`` fold API objects (dicts) into frozen dataclasses for the routing pass
(``converge/routing.py``).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from ctxfit.api import InferenceServerSpec
from ctxfit.api.status import ConditionType, InferenceServerStatus, Reason
from ctxfit.render.inferencepool import CONTEXT_LABEL, CONTEXT_RANGE_LABEL, POOL_LABEL, server_ports

SERVER_KIND = "InferenceServer"


@dataclass(frozen=True)
class PoolView:
    """A live InferencePool: its controller owner and what the operator compares.

    Attributes:
        name: the pool.
        owner_kind, owner_name, owner_uid: its controller ownerReference (None: none).
        spec: ``spec`` as stored (compared with the rendering).
        labels, annotations: as stored.
        deleting: the pool is being deleted (deletionTimestamp set).
        uid: its ``metadata.uid`` (a delete is conditional on it).
    """

    name: str
    owner_kind: str | None
    owner_name: str | None
    owner_uid: str | None
    spec: Mapping[str, Any]
    labels: Mapping[str, str]
    annotations: Mapping[str, str]
    deleting: bool = False
    uid: str = ""

    @property
    def by_server(self) -> bool:
        return self.owner_kind == SERVER_KIND

    def selects(self, labels: Mapping[str, str]) -> bool:
        wanted = (self.spec.get("selector") or {}).get("matchLabels") or {}
        return bool(wanted) and all(labels.get(k) == v for k, v in wanted.items())

    def ports(self) -> tuple[int, ...]:
        return tuple(int(p.get("number", 0)) for p in self.spec.get("targetPorts") or [])


def pool_view(body: Mapping[str, Any]) -> PoolView:
    """Fold an InferencePool (dict as the API returns it) into a ``PoolView``."""
    meta = body.get("metadata") or {}
    owner = next((o for o in meta.get("ownerReferences") or [] if o.get("controller")), None) or {}
    return PoolView(name=str(meta.get("name", "")), owner_kind=owner.get("kind"), owner_name=owner.get("name"),
                    owner_uid=owner.get("uid"), spec=dict(body.get("spec") or {}),
                    labels=dict(meta.get("labels") or {}), annotations=dict(meta.get("annotations") or {}),
                    deleting=meta.get("deletionTimestamp") is not None, uid=str(meta.get("uid") or ""))


@dataclass(frozen=True)
class MemberView:
    """Another server naming the same pool, as its stored object shows it.

    Attributes:
        name, uid, created: identity and creationTimestamp (RFC 3339; the oldest member defines the pool's model
            when no server creates it).
        creates: it creates the pool (``routing.inferencePool.create``).
        model, served_name: ``spec.model.name`` and the served model name in force.
        ports: its pods' API ports in the pool.
        gpu_product: the GPU product it runs on (``status.nodeProduct``).
        context_length: tokens its pods' labels say (``status.routing.contextLength``).
        target: tokens it promised (``spec.context.target``, else its planned context).
        ready_replicas: its Ready engine replicas in the pool.
        refused: it was refused for disagreeing with the pool (``Admitted`` False, PoolModelMismatch).
    """

    name: str
    uid: str
    created: str
    creates: bool
    model: str
    served_name: str
    ports: tuple[int, ...]
    gpu_product: str | None = None
    context_length: int | None = None
    target: int | None = None
    ready_replicas: int = 0
    refused: bool = False


def member_view(body: Mapping[str, Any]) -> tuple[str, MemberView] | None:
    """``(pool, view)`` of a stored InferenceServer that names a pool; None when it names none or its spec
    does not validate."""
    from pydantic import ValidationError

    meta = body.get("metadata") or {}
    try:
        spec = InferenceServerSpec.model_validate(body.get("spec") or {})
    except ValidationError:
        return None
    pool = spec.routing.inference_pool
    if pool is None:
        return None
    status = InferenceServerStatus.from_body(body.get("status")) if body.get("status") else InferenceServerStatus()
    name = str(meta.get("name", ""))
    routing = status.routing
    admitted = status.condition(ConditionType.ADMITTED)
    return pool.pool_name(name), MemberView(
        name=name, uid=str(meta.get("uid", "")), created=str(meta.get("creationTimestamp", "")),
        creates=pool.creates, model=spec.model.name, served_name=spec.routing.served_name(spec.model.name),
        ports=server_ports(spec), gpu_product=status.node_product,
        context_length=routing.context_length if routing else None,
        target=promised(spec, status),
        ready_replicas=routing.ready_replicas or 0 if routing else 0,
        refused=admitted is not None and admitted.status == "False" and admitted.reason is Reason.POOL_MODEL_MISMATCH)


def members_of(index: Mapping[tuple[str, str], Any] | None, namespace: str) -> Callable[[str], tuple[MemberView, ...]]:
    """``members_of(pool)`` over the operator's (namespace, pool) -> ``MemberView`` index (no index: nobody)."""
    def lookup(pool: str) -> tuple[MemberView, ...]:
        return tuple(index.get((namespace, pool), ())) if index is not None else ()
    return lookup


def promised(spec: InferenceServerSpec, status: InferenceServerStatus) -> int | None:
    """Tokens a server promised: ``spec.context.target``, else the context its plan chose."""
    if spec.context.target is not None:
        return spec.context.target
    return status.plan.context_length if status.plan is not None and status.plan.fits else None


@dataclass(frozen=True)
class PoolPod:
    """An engine pod of this server as the routing pass needs it.

    Attributes:
        name: the pod.
        attempt: its ``ctxfit.io/attempt`` (None: unknown).
        ready, deleting: readiness and deletion.
        labels: its pool and context labels as they are (only those keys).
        owner: the name of its controller owner when that is this server's own workload (ReplicaSet
            ``<server>-<pod-template-hash>`` of the server's Deployment, or the LeaderWorkerSet's leader
            StatefulSet ``<server>``), else None: only pods with an owner here get their labels patched.
    """

    name: str
    attempt: int | None
    ready: bool
    deleting: bool
    labels: Mapping[str, str]
    owner: str | None

    @property
    def owned(self) -> bool:
        return self.owner is not None


def pod_labels_of(labels: Mapping[str, str]) -> dict[str, str]:
    """The routing labels of a pod (only the keys the pass reads)."""
    return {k: v for k, v in labels.items() if k in (POOL_LABEL, CONTEXT_RANGE_LABEL, CONTEXT_LABEL)}


@dataclass(frozen=True)
class RoutingSnapshot:
    """What the routing pass reads besides the server itself.

    Attributes:
        enabled: the operator manages pools (chart ``gateway.enabled``, ``CTXFIT_GATEWAY_ENABLED``).
        api_served: the API server serves ``inference.networking.k8s.io/v1`` InferencePools (None: not known).
        pools: the namespace's InferencePools by name.
        members: the other servers of the namespace naming a pool, by pool name.
    """

    enabled: bool
    api_served: bool | None
    pools: Mapping[str, PoolView] = field(default_factory=dict)
    members: Mapping[str, tuple[MemberView, ...]] = field(default_factory=dict)
