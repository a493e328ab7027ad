"""The operator's life: ``startup`` builds what the handlers share (``State`` on ``memo``), ``Worker`` runs one
reconcile per queued key, ``cleanup`` stops it all; ``slim``/``unslim`` keep the newest body per server."""

from __future__ import annotations

import asyncio
import contextlib
import functools
import json
import logging
import os
import threading
import time
from collections.abc import Callable, Collection, Hashable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any, cast

import kopf

from ctxfit import catalog

from ..kube.calibration import CalibrationStore
from ..kube.claims import ClaimsApi
from ..kube.client import Kube, load_api_client
from ..kube.leader import LeaderElector
from ..kube.resolution import Resolutions, Resolve
from ..kube.service_lane import ServiceLane
from ..reconcile import Runtime, reconcile
from ..runtime.lanes import EventPoster
from ..runtime.memory import Trimmer, glibc_trim
from ..runtime.threads import Stopped, WorkerThreads
from ..runtime.workqueue import WorkQueue
from ..settings import Settings
from ..telemetry.metrics import Metrics
from ..views.cache import ClaimView
from ..views.pods import DeploymentView, GPUNode, PodView
from ..views.routing import members_of
from . import kopf_settings
from .owned import owned_changed, start_addon_watches

logger = logging.getLogger(__name__)
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
        members, member_views: the gateway's ``servers_by_pool`` index (None without the gateway) and the last
            member view per server (``app/routing.py``).
        indexes: kopf's (pods_by_server, gpu_nodes, deployments_by_server, services_by_server,
            claims_by_name) indexes,
            captured from the first handler call.
        kopf_tasks: the tasks running when the startup handler ran (kopf's root tasks): ``exit_code`` reads them.
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
    kopf_tasks: frozenset[asyncio.Task[Any]] = frozenset()


class Worker:
    """The work queue's callback for one key: snapshot the indexes, run ``reconcile`` in a worker thread, and keep
    what the next pass needs (the stored body, our own write's resourceVersion, a deferred Deployment).
    Returns the requeue delay (None: only on changes). ``state`` is set once the ``State`` exists."""

    def __init__(self, runtime: Runtime, threads: WorkerThreads) -> None:
        self.runtime = runtime
        self.threads = threads
        self.state: State | None = None

    async def __call__(self, key: Hashable) -> float | None:
        state = self.state
        namespace, name = cast(Key, key)
        if state is None or not state.leader.is_leader or state.indexes is None:
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
            result = await self.threads.run(
                reconcile, self.runtime, namespace, name, nodes, pods,
                body=unslim(state.bodies.get((namespace, name))), deployment=deployment,
                service_port=next(iter(services_index.get(key, ())), None), claim_seen=claim_seen,
                members_of=members_of(state.members, namespace))
        except Stopped:
            return None
        if result.applied is not None:
            state.applied[(namespace, name)] = (result.applied, time.monotonic())
        if result.stored is not None:
            state.written[(namespace, name)] = str(result.stored["metadata"].get("resourceVersion"))
            if state.events_seen.get((namespace, name), 0) == seen:  # else the event's body is newer
                keep_body(state.bodies, (namespace, name), slim(result.stored))
        if result.conflict:
            state.bodies.pop((namespace, name), None)
        if result.waiting_for_nodes:
            state.waiting_for_nodes.add((namespace, name))
        else:
            state.waiting_for_nodes.discard((namespace, name))
        return result.requeue_after


def environment_problems() -> list[str]:
    """One line per process environment variable the operator cannot use as set (``HF_ENDPOINT`` that is not an
    http(s) URL, a Hub timeout that is not a number: ``hub.bounded``), logged at start-up; a server's own problems go
    to its status (an endpoint the Hub resolution refuses: ``HubEndpointInvalid``)."""
    from ctxfit.hub.bounded import endpoint_problem, timeout_problem  # ctxfit.hub is imported at start-up anyway

    return [problem for problem in (endpoint_problem(), timeout_problem()) if problem]


async def startup(settings: kopf.OperatorSettings, memo: kopf.Memo, **_: Any) -> None:
    """Build everything the handlers share and keep it on ``memo`` (no module-level state)."""
    cfg = Settings()
    kopf_settings.configure(settings)
    catalog.preload()
    for problem in environment_problems():
        logger.warning("environment: %s", problem)
    asyncio.get_running_loop().set_default_executor(  # start-up, leader election, stopping
        ThreadPoolExecutor(max_workers=DEFAULT_EXECUTOR_THREADS, thread_name_prefix="ctxfit"))
    threads = WorkerThreads(cfg.workers)
    api_client = await asyncio.to_thread(load_api_client, cfg.workers * 2 + 4)
    identity = f"{cfg.pod_name}-{os.getpid()}"
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
        with contextlib.suppress(RuntimeError):  # the loop is closed: stopping
            loop.call_soon_threadsafe(state.queue.add, key)

    runtime.services = ServiceLane(kube.apply, runtime.rejections, service_failed)

    work = Worker(runtime, threads)
    queue = WorkQueue(work, cfg.workers, reserved=cfg.workers - max(1, cfg.workers // LATER_PASS_SHARE),
                      observe_wait=metrics.observe_queue_wait)
    runtime.resolutions = shared_resolutions(kube, cfg, loop, queue, metrics)

    def elected() -> None:
        for key in list(state.known):
            queue.add(key)

    leader = LeaderElector(kube, cfg.peering, cfg.peering_namespace, identity, cfg.lease_seconds, elected)
    state = State(runtime=runtime, queue=queue, threads=threads, leader=leader,
                  leader_task=asyncio.create_task(leader.run()), kopf_tasks=frozenset(asyncio.all_tasks()))
    work.state = state
    memo.state = state

    def addon_event(kind: str | None, body: dict[str, Any], plural: str) -> None:  # from a watch thread
        with contextlib.suppress(RuntimeError):  # the loop is closed: stopping
            loop.call_soon_threadsafe(_owned_event, state, kind, body, plural)

    start_addon_watches(kube.rest, cfg, addon_event, runtime.stopping)
    trimmer = Trimmer(glibc_trim())  # freed C heap back to the system after hostile-sized reads (runtime/memory.py)
    threading.Thread(target=trimmer.run, args=(runtime.stopping,), name="ctxfit-trim", daemon=True).start()
    logger.info("ctxfit operator started: namespaces=%s peering=%s metrics=:%s", cfg.watch_namespaces or "all",
                cfg.peering or "standalone", cfg.metrics_port)


def _owned_event(state: State, kind: str | None, body: dict[str, Any], plural: str) -> None:
    """An add-on watch's event, on the loop: enqueue the server when ``owned.owned_changed`` says so."""
    key = owned_changed(state.owned_views, kind, body, plural)
    if key is not None:
        state.queue.add(key)


def shared_resolutions(kube: Kube | None, cfg: Settings, loop: asyncio.AbstractEventLoop, queue: WorkQueue,
                       metrics: Metrics, resolve: Resolve | None = None) -> Resolutions:
    """The operator's shared model resolutions (``kube/resolution.py``; ``resolve``: its Hub reader, a test's own),
    wired to ``queue`` on ``loop`` (their ends come from other threads): a failed one requeues its servers; one that
    succeeded gives their next pass a first reconcile's priority (``WorkQueue.add(key, first=True)``): that pass plans
    the server and creates its workload, a new server's work, so during a burst of new servers it does not wait
    behind every later pass. Each end is observed in ``metrics`` (``Metrics.observe_resolution``)."""

    def on_loop(key: Key, first: bool) -> None:
        with contextlib.suppress(RuntimeError):  # the loop is closed: stopping
            loop.call_soon_threadsafe(functools.partial(queue.add, key, first=first))

    resolutions = Resolutions(kube, cfg, functools.partial(on_loop, first=False), resolve=resolve)
    resolutions.ready = functools.partial(on_loop, first=True)
    resolutions.finished = metrics.observe_resolution
    return resolutions


async def cleanup(memo: kopf.Memo, **_: Any) -> None:
    """Stop the queue (reconciles running in threads stop at their next write), release the Lease, stop the
    metrics server and the lanes (queued Normal Events and Service writes are dropped); with
    ``memo.exit_after_cleanup`` (the process, ``__main__``), exit ``KOPF_EXIT_SECONDS`` later, with ``exit_code``."""
    state: State | None = getattr(memo, "state", None)
    if state is None:
        return
    state.runtime.stopping.set()
    if state.runtime.resolutions is not None:
        state.runtime.resolutions.close()
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
        asyncio.get_running_loop().call_later(KOPF_EXIT_SECONDS, exit_after, exit_code(state.kopf_tasks))


def exit_code(tasks: Collection[asyncio.Task[Any]]) -> int:
    """The process's exit code once kopf has stopped: 1 if one of ``tasks`` (kopf's root tasks, all ended by the
    time cleanup runs: kopf 1.45 ``_core/reactor/running.py`` ``startup_cleanup_activities``) ended with an
    exception (kopf's ``aiotasks.guard`` logs it and re-raises), else 0 (a signal, the stop flag). The cleanup's
    exit comes before kopf would re-raise that exception from ``kopf.run``, so it decides the code."""
    failed = sorted(task.get_name() for task in tasks
                    if task.done() and not task.cancelled() and task.exception() is not None)
    if failed:
        logger.error("kopf stopped on an error in %s: exiting with 1", ", ".join(failed))
    return 1 if failed else 0


MAX_CACHED_BODY_BYTES = 256 * 1024
"""A server's body larger than this (as compact JSON) is not kept between passes: the next pass reads it (memory
is bounded in bytes per server, whatever a spec or a status holds)."""


def keep_body(bodies: dict[Key, bytes], key: Key, text: bytes) -> None:
    """Keep ``text`` (``slim``) as ``key``'s newest body, unless it is over ``MAX_CACHED_BODY_BYTES``."""
    if len(text) <= MAX_CACHED_BODY_BYTES:
        bodies[key] = text
    else:
        bodies.pop(key, None)


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
