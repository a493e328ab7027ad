"""kopf wiring: thin handlers that feed the work queue; all decisions live in ``converge``.

- ``@kopf.on.startup``: settings, API client, metrics server, work queue, leader election -> ``memo``;
- indexes: engine pods by (namespace, server), GPU nodes, owned Deployments, Services and weights claims
  (kopf fills them before other handlers run);
- ``on.event`` InferenceServer / engine pods / nodes / owned Deployments and Services: enqueue the affected
  server(s) (owned objects only when what the operator compares changed, or on deletion);
- the queue's worker snapshots the indexes and runs ``reconcile`` in a thread.
No handler sleeps, patches or returns results into status: kopf stores nothing on our objects.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import socket
import time
from collections.abc import Callable, Hashable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any, cast

import kopf

from ctxfit.api import API_GROUP, API_VERSION, PLURAL
from ctxfit.render import SERVER_LABEL
from ctxfit.render.labels import MANAGED_BY

from ..kube.calibration import CalibrationStore
from ..kube.claims import ClaimsApi
from ..kube.client import Kube, load_api_client
from ..kube.leader import LeaderElector
from ..kube.service_lane import ServiceLane
from ..reconcile import Runtime, reconcile
from ..runtime.lanes import EventPoster
from ..runtime.threads import Stopped, WorkerThreads
from ..runtime.workqueue import WorkQueue
from ..settings import Settings
from ..telemetry.metrics import Metrics
from ..views.cache import ClaimView, claim_view
from ..views.pods import DeploymentView, GPUNode, PodView, deployment_view, gpu_node, pod_view
from ..views.workloads import owned_service_port
from . import kopf_settings, routing

logger = logging.getLogger("ctxfit.controller")
APPLIED_MEMORY_SECONDS = 10.0
DEFAULT_EXECUTOR_THREADS = 4
"""asyncio's default executor: start-up (API client), leader election, stopping; reconciles have their own."""
KOPF_EXIT_SECONDS = 1.0
"""After the cleanup, kopf gets this long to stop its own tasks before the process exits (``memo.exit_after_cleanup``,
set by ``__main__``): kopf 1.45 waits 5 s for a pause-waiter task of the pods watch that never ends."""
STOP_GRACE_SECONDS = 2.0
"""On stop, calls already sent to the API server get this long to answer (then they are abandoned)."""
LATER_PASS_SHARE = 4
"""Later passes (status, Events, Services, pod changes) hold at most one worker slot in this many; the rest is
kept for servers' first reconciles (``priority.PriorityGate``): during a burst of new servers, follow-up
status writes (CRD status updates are among the API server's costliest writes) would otherwise slow the
creates and first passes down (bench/README.md)."""
Key = tuple[str, str]


@dataclass
class State:
    """Everything shared between handlers, on ``memo.state`` (kopf copies ``memo`` per object, shallowly).

    Attributes:
        runtime: settings, API wrapper, metrics (used by reconciles in worker threads).
        queue: the per-server work queue.
        threads: the threads reconciles run in (``threads.WorkerThreads``).
        leader: Lease election (always leader when standalone).
        leader_task: the election loop.
        known: servers seen (re-enqueued on becoming leader).
        waiting_for_nodes: servers re-checked on any node change.
        pod_views: hash of the last ``PodView`` per pod uid (unchanged pods enqueue nothing; the index keeps
            the view itself).
        bodies: the newest InferenceServer seen per key, as compact JSON (``slim``; saves a GET; dropped after a
            conflict).
        written: resourceVersion of our own last status write per key (its watch echo is skipped).
        applied: the Deployment a deferred first pass just wrote (with when), for the next pass in case
            the index has not caught up.
        events_seen: watch events per key; a reconcile's stored body replaces the cached one only if no
            event arrived meanwhile (the event's body is at least as new).
        owned_views: hash of the last view per owned Deployment/Service uid (unchanged ones enqueue nothing).
        indexes: kopf's (pods_by_server, gpu_nodes, deployments_by_server, services_by_server,
            claims_by_name) indexes,
            captured from the first handler call.
        members, member_views: the gateway's ``servers_by_pool`` index (None without the gateway) and the last
            member view per server (``app/routing.py``).
    """

    runtime: Runtime
    queue: WorkQueue
    threads: WorkerThreads
    leader: LeaderElector
    leader_task: asyncio.Task[None]
    known: set[Key] = field(default_factory=set)
    waiting_for_nodes: set[Key] = field(default_factory=set)
    pod_views: dict[str, int] = field(default_factory=dict)
    bodies: dict[Key, bytes] = field(default_factory=dict)
    written: dict[Key, str] = field(default_factory=dict)
    events_seen: dict[Key, int] = field(default_factory=dict)
    applied: dict[Key, tuple[DeploymentView, float]] = field(default_factory=dict)
    indexes: tuple[Any, Any, Any, Any, Any] | None = None
    members: Any = None
    member_views: dict[Key, tuple[str, int]] = field(default_factory=dict)
    owned_views: dict[str, int] = field(default_factory=dict)


async def startup(settings: kopf.OperatorSettings, memo: kopf.Memo, **_: Any) -> None:
    """Build everything the handlers share and keep it on ``memo`` (no module-level state)."""
    cfg = Settings()
    kopf_settings.configure(settings)
    asyncio.get_running_loop().set_default_executor(  # start-up, leader election, stopping
        ThreadPoolExecutor(max_workers=DEFAULT_EXECUTOR_THREADS, thread_name_prefix="ctxfit"))
    threads = WorkerThreads(cfg.workers)
    api_client = await asyncio.to_thread(load_api_client, cfg.workers * 2 + 4)
    identity = f"{os.environ.get('POD_NAME') or socket.gethostname()}-{os.getpid()}"
    metrics = Metrics()
    kube = Kube(api_client, instance=identity, observe=metrics.observe_api_request)
    metrics.serve(cfg.metrics_port)
    runtime = Runtime(settings=cfg, kube=kube, metrics=metrics, claims=ClaimsApi(kube),
                      events=EventPoster(kube.post_event),
                      defer_status_after_create=True,
                      calibration=CalibrationStore(kube, cfg.calibration_namespace, cfg.calibration_configmap)
                      if cfg.calibration_configmap else None)
    state: State
    loop = asyncio.get_running_loop()

    def service_failed(key: Key) -> None:  # from a lane thread: the server's next pass handles the error
        try:
            loop.call_soon_threadsafe(state.queue.add, key)
        except RuntimeError:  # the loop is closed: stopping
            pass

    runtime.services = ServiceLane(kube.apply, runtime.rejections, service_failed)

    async def work(key: Hashable) -> float | None:
        namespace, name = cast(Key, key)
        if not state.leader.is_leader or state.indexes is None:
            return None
        seen = state.events_seen.get((namespace, name), 0)
        pods_index, nodes_index, deployments_index, services_index, claims_index = state.indexes

        def claim_seen(claim: str) -> ClaimView | None:
            return next(iter(claims_index.get((namespace, claim), ())), None)

        pods: tuple[PodView, ...] = tuple(pods_index.get(key, ()))
        nodes: tuple[GPUNode, ...] = tuple(nodes_index.get(None, ()))
        deployments: list[DeploymentView | None] = list(deployments_index.get(key, ()))
        deployment = deployments[0] if deployments else None
        recent = state.applied.pop((namespace, name), None)
        if deployment is None and recent is not None and time.monotonic() - recent[1] < APPLIED_MEMORY_SECONDS:
            deployment = recent[0]  # our own write, not yet in the index
        try:
            result = await threads.run(
                reconcile, runtime, namespace, name, nodes, pods, body=unslim(state.bodies.get((namespace, name))),
                deployment=deployment, service_port=next(iter(services_index.get(key, ())), None),
                claim_seen=claim_seen, members_of=routing.members_of(state.members, namespace))
        except Stopped:
            return None
        if result.applied is not None:
            state.applied[(namespace, name)] = (result.applied, time.monotonic())
        if result.stored is not None:
            state.written[(namespace, name)] = str(result.stored["metadata"].get("resourceVersion"))
            if state.events_seen.get((namespace, name), 0) == seen:  # else the event's body is newer
                state.bodies[(namespace, name)] = slim(result.stored)
        if result.conflict:
            state.bodies.pop((namespace, name), None)
        if result.waiting_for_nodes:
            state.waiting_for_nodes.add((namespace, name))
        else:
            state.waiting_for_nodes.discard((namespace, name))
        return result.requeue_after

    queue = WorkQueue(work, cfg.workers, reserved=cfg.workers - max(1, cfg.workers // LATER_PASS_SHARE),
                      observe_wait=metrics.observe_queue_wait)

    def elected() -> None:
        for key in list(state.known):
            queue.add(key)

    leader = LeaderElector(kube, cfg.peering, cfg.peering_namespace, identity, cfg.lease_seconds, elected)
    state = State(runtime=runtime, queue=queue, threads=threads, leader=leader,
                  leader_task=asyncio.create_task(leader.run()))
    memo.state = state
    logger.info("ctxfit operator started: namespaces=%s peering=%s metrics=:%s", cfg.watch_namespaces or "all",
                cfg.peering or "standalone", cfg.metrics_port)


async def cleanup(memo: kopf.Memo, **_: Any) -> None:
    """Stop the queue (reconciles running in threads stop at their next write), release the Lease, stop the
    metrics server and the lanes (queued Normal Events and Service writes are dropped); with
    ``memo.exit_after_cleanup`` (the process, ``__main__``), exit ``KOPF_EXIT_SECONDS`` later."""
    state: State | None = getattr(memo, "state", None)
    if state is None:
        return
    state.runtime.stopping.set()
    await state.queue.close()
    lanes = [lane for lane in (state.runtime.events, state.runtime.services) if lane is not None]
    closed = await asyncio.gather(  # at most STOP_GRACE_SECONDS in all, not per stage
        asyncio.to_thread(state.threads.close, STOP_GRACE_SECONDS),
        *(asyncio.to_thread(lane.close, STOP_GRACE_SECONDS) for lane in lanes))
    running = closed[0]
    if running:
        logger.info("stopping: %d reconciles still waiting for the API server are abandoned", running)
    await state.leader.stop()
    state.leader_task.cancel()
    state.runtime.metrics.close()
    exit_after: Callable[[int], None] | None = getattr(memo, "exit_after_cleanup", None)
    if exit_after is not None:  # kopf then waits up to 5 s for a task of its own that never ends (pods' pause-waiter)
        asyncio.get_running_loop().call_later(KOPF_EXIT_SECONDS, exit_after, 0)


async def index_pods(namespace: str, labels: kopf.Labels, body: kopf.Body, **_: Any) -> dict[Key, PodView]:
    """Index: (namespace, server) -> the pod's ``PodView``."""
    return {(namespace, labels[SERVER_LABEL]): pod_view(body)}


async def index_nodes(body: kopf.Body, **_: Any) -> dict[None, GPUNode]:
    """Index: None -> every node's ``GPUNode``."""
    return {None: gpu_node(body)}


async def index_deployments(namespace: str, name: str, body: kopf.Body, **_: Any) -> dict[Key, DeploymentView | None]:
    """Index: (namespace, name) -> the engine Deployment's ``DeploymentView`` (named like its server)."""
    return {(namespace, name): deployment_view(body)}


async def index_services(namespace: str, name: str, body: kopf.Body, **_: Any) -> dict[Key, int | None]:
    """Index: (namespace, name) -> the engine Service's port (the Service is named like its server); None when
    the Service was edited away from the rendering (``drift.owned_service_port``), so it is applied again."""
    return {(namespace, name): owned_service_port(dict(body), name)}


async def index_claims(namespace: str, name: str, body: kopf.Body, **_: Any) -> dict[Key, ClaimView | None]:
    """Index: (namespace, claim name) -> the operator's weights claim as a ``ClaimView`` (read by reconciles
    instead of a GET per pass; a user's own claim is not labelled and is still read)."""
    return {(namespace, name): claim_view(body)}


def slim(body: Mapping[str, Any]) -> bytes:
    """``body`` without ``metadata.managedFields``, as compact JSON: kept per server, the decoded body cost ~13 KiB
    of the operator's memory against ~3 KiB of text (bench/README.md, 1,000 servers); a status PUT without
    managedFields leaves the stored ones unchanged."""
    meta = body.get("metadata") or {}
    lean = {**body, "metadata": {k: v for k, v in meta.items() if k != "managedFields"}}
    return json.dumps(lean, separators=(",", ":")).encode()


def unslim(text: bytes | None) -> dict[str, Any] | None:
    """The body ``slim`` kept (a fresh dict per call), None stays None."""
    return cast(dict[str, Any], json.loads(text)) if text is not None else None


def _remember(memo: kopf.Memo, indexes: dict[str, Any]) -> State:
    state: State = memo.state
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
        if state.runtime.services is not None:
            state.runtime.services.forget(key)
        return
    state.known.add(key)
    if state.written.get(key) == body.metadata.get("resourceVersion"):
        return
    state.bodies[key] = slim(event["object"])
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
    resync."""
    state = _remember(memo, indexes)
    uid = str(body.metadata.uid)
    view = hash(deployment_view(dict(body)) if resource.plural == "deployments"
                else owned_service_port(dict(body), name))  # a hash: the index keeps the view itself
    if resource.plural == "services" and state.runtime.services is not None:
        state.runtime.services.seen((namespace, name))  # the index shows this Service as it is now
    if event.get("type") == "DELETED":
        state.owned_views.pop(uid, None)
    elif uid in state.owned_views and state.owned_views[uid] == view:
        return
    else:
        state.owned_views[uid] = view
    state.queue.add((namespace, name))


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

    ``gateway``: also the inference gateway's index and watch (``app/routing.py``); None: ``CTXFIT_GATEWAY_ENABLED``.
    """
    registry = kopf.OperatorRegistry()
    if gateway is None:
        gateway = Settings().gateway_enabled
    if gateway:
        routing.register(registry, _handler)
    kopf.on.login(registry=registry)(_handler(login))
    kopf.on.startup(registry=registry)(_handler(startup))
    kopf.on.cleanup(registry=registry)(_handler(cleanup))
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
