"""kopf wiring: thin handlers that feed the work queue; all decisions live in ``converge``.

The startup handler, the indexes and the ``on.event`` handlers that enqueue servers; no handler writes status.
What each handler does: docs/design/architecture.md.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import kopf

from ctxfit.api import API_GROUP, API_VERSION, PLURAL
from ctxfit.render import SERVER_LABEL
from ctxfit.render.labels import MANAGED_BY

from ..settings import Settings
from ..views.cache import ClaimView, claim_view
from ..views.pods import DeploymentView, GPUNode, PodView, deployment_view, gpu_node, pod_view
from ..views.workloads import ServiceView, service_view
from . import lifecycle, routing
from .owned import owned_changed

Key = tuple[str, str]


async def index_pods(namespace: str, labels: kopf.Labels, body: kopf.Body, **_: Any) -> dict[Key, PodView]:
    """Index: (namespace, server) -> the pod's ``PodView``."""
    return {(namespace, labels[SERVER_LABEL]): pod_view(body)}


async def index_nodes(body: kopf.Body, **_: Any) -> dict[None, GPUNode]:
    """Index: None -> every node's ``GPUNode``."""
    return {None: gpu_node(body)}


async def index_deployments(namespace: str, name: str, body: kopf.Body, **_: Any) -> dict[Key, DeploymentView | None]:
    """Index: (namespace, name) -> the engine Deployment's ``DeploymentView`` (named like its server)."""
    return {(namespace, name): deployment_view(body)}


async def index_services(namespace: str, name: str, body: kopf.Body, **_: Any) -> dict[Key, ServiceView]:
    """Index: (namespace, name) -> the engine Service's ``ServiceView`` (the Service is named like its server): its
    port, None when it was edited away from the rendering (``views.workloads.service_view``: either the one-node or
    the multi-node rendering, which ``reconcile`` compares with the spec), so it is applied again,
    and whose it is (a Service that is not the server's counts as absent: ``reconcile``)."""
    return {(namespace, name): service_view(dict(body), name)}


async def index_claims(namespace: str, name: str, body: kopf.Body, **_: Any) -> dict[Key, ClaimView | None]:
    """Index: (namespace, claim name) -> the operator's weights claim as a ``ClaimView`` (read by reconciles
    instead of a GET per pass; a user's own claim is not labelled and is still read)."""
    return {(namespace, name): claim_view(body)}


def _remember(memo: kopf.Memo, indexes: dict[str, Any]) -> lifecycle.State:
    state: lifecycle.State = memo.state
    if state.indexes is None:
        state.indexes = (indexes["pods_by_server"], indexes["gpu_nodes"], indexes["deployments_by_server"],
                         indexes["services_by_server"], indexes["claims_by_name"])
        state.members = indexes.get(routing.MEMBERS_INDEX)
    return state


async def on_server(event: kopf.RawEvent, body: kopf.Body, name: str, namespace: str, memo: kopf.Memo,
                    **indexes: Any) -> None:
    """Any change of an InferenceServer (incl. the initial listing) -> reconcile it, except our own echo."""
    state = _remember(memo, indexes)
    key = (namespace, name)
    routing.notify_members(state, event, body, namespace, name, indexes)
    if event.get("type") == "DELETED":
        state.known.discard(key)
        state.waiting_for_nodes.discard(key)
        state.bodies.pop(key, None)
        state.written.pop(key, None)
        state.events_seen.pop(key, None)
        state.queue.forget(key)
        state.runtime.metrics.forget(namespace, name)
        state.runtime.rejections.forget(key)
        if state.runtime.resolutions is not None:
            state.runtime.resolutions.forget(key)
        if state.runtime.services is not None:
            state.runtime.services.forget(key)
        return
    state.known.add(key)
    if state.written.get(key) == body.metadata.get("resourceVersion"):
        return
    lifecycle.keep_body(state.bodies, key, lifecycle.slim(event["object"]))
    state.events_seen[key] = state.events_seen.get(key, 0) + 1
    state.queue.add(key)


async def on_pod(event: kopf.RawEvent, body: kopf.Body, namespace: str, labels: kopf.Labels, memo: kopf.Memo,
                 **indexes: Any) -> None:
    """An engine pod changed in a way that matters (readiness, termination, restarts) -> reconcile its server."""
    state = _remember(memo, indexes)
    uid = str(body.metadata.uid)
    view = hash(pod_view(body))
    if event.get("type") == "DELETED":
        state.pod_views.pop(uid, None)
    elif state.pod_views.get(uid) == view:
        return
    else:
        state.pod_views[uid] = view
    state.queue.add((namespace, labels[SERVER_LABEL]))


async def on_owned(event: kopf.RawEvent, body: kopf.Body, namespace: str, name: str, resource: kopf.Resource,
                   memo: kopf.Memo, **indexes: Any) -> None:
    """An owned Deployment or Service (named like its server) changed in what the operator compares (template,
    replicas asked for and present, ReplicaFailure, port) or was deleted -> reconcile its server now, not at the
    resync (``owned.owned_changed``; the add-on kinds come from ``owned.start_addon_watches``)."""
    state = _remember(memo, indexes)
    if resource.plural == "services" and state.runtime.services is not None:
        state.runtime.services.seen((namespace, name))  # the index shows this Service as it is now
    key = owned_changed(state.owned_views, event.get("type"), body, resource.plural)
    if key is not None:
        state.queue.add(key)


async def on_node(memo: kopf.Memo, **indexes: Any) -> None:
    """A node changed: servers waiting for an eligible node look again."""
    state = _remember(memo, indexes)
    for key in list(state.waiting_for_nodes):
        state.queue.add(key)


def login(**kwargs: Any) -> kopf.ConnectionInfo | None:
    """kopf's own API connection: the same credentials as the ``kubernetes`` client (in-cluster/kubeconfig)."""
    info: kopf.ConnectionInfo | None = kopf.login_via_client(**kwargs)
    return info


def _handler(fn: Callable[..., Any]) -> Any:
    """kopf's handler Protocols list every kwarg; ours take the few they need plus ``**_``."""
    return fn


def build_registry(gateway: bool | None = None) -> kopf.OperatorRegistry:
    """A fresh kopf registry with ctxfit's handlers (``kopf.run(registry=...)``; tests build their own).

    Only kinds the cluster always serves are kopf's (and ctxfit's own CRD): kopf stops the operator when a watched
    resource stops being served, so the add-on kinds (LeaderWorkerSets, ScaledObjects, InferencePools) are watched
    by ``owned.start_addon_watches``. ``gateway``: also the inference gateway's servers-by-pool index
    (``app/routing.py``); None: ``CTXFIT_GATEWAY_ENABLED``."""
    registry = kopf.OperatorRegistry()
    if gateway is None:
        gateway = Settings().gateway_enabled
    if gateway:
        routing.register(registry, _handler)
    kopf.on.login(registry=registry)(_handler(login))
    kopf.on.startup(registry=registry)(_handler(lifecycle.startup))
    kopf.on.cleanup(registry=registry)(_handler(lifecycle.cleanup))
    engine_pods: dict[str, Any] = {SERVER_LABEL: kopf.PRESENT}
    kopf.index("pods", labels=engine_pods, registry=registry, id="pods_by_server")(_handler(index_pods))
    kopf.index("nodes", registry=registry, id="gpu_nodes")(_handler(index_nodes))
    owned: dict[str, Any] = {"app.kubernetes.io/managed-by": MANAGED_BY, SERVER_LABEL: kopf.PRESENT}
    kopf.index("deployments", labels=owned, registry=registry, id="deployments_by_server")(
        _handler(index_deployments))
    kopf.index("services", labels=owned, registry=registry, id="services_by_server")(_handler(index_services))
    kopf.index("persistentvolumeclaims", labels=owned, registry=registry, id="claims_by_name")(
        _handler(index_claims))
    kopf.on.event(API_GROUP, API_VERSION, PLURAL, registry=registry)(_handler(on_server))
    kopf.on.event("pods", labels=engine_pods, registry=registry)(_handler(on_pod))
    kopf.on.event("nodes", registry=registry)(_handler(on_node))
    kopf.on.event("deployments", labels=owned, registry=registry, id="owned_deployments")(_handler(on_owned))
    kopf.on.event("services", labels=owned, registry=registry, id="owned_services")(_handler(on_owned))
    return registry
