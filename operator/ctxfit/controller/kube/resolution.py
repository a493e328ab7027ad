"""Model resolution I/O: one shared resolution per key, done off the reconcile path.

``Resolutions`` runs each resolution once however many servers ask: public repos in a thread pool, gated repos
and preloaded claims in a resolver pod. Failures, retries and memory bounds: docs/design/model-resolution.md.
"""

from __future__ import annotations

import logging
import os
import tempfile
import threading
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from kubernetes.client.exceptions import ApiException
from pydantic import ValidationError

from ctxfit.api import InferenceServerSpec
from ctxfit.vocab.modelsource import ModelSource, unpack

from ..converge.resolution import adapter_needs, draft_need, need
from ..converge.types import Need, ResolutionRequest, ResolutionView
from ..settings import Settings
from .answers import conflict, server_error
from .guarded import Foreign, check
from .objects import delete_if_owned
from .protocol import KubeClient
from .resolver_pod import RESOLVER_CONTAINER, resolver_pod
from .rest import PODS, Conflict

logger = logging.getLogger(__name__)
Key = tuple[str, str]
POD_GRACE_SECONDS = 60.0
"""A resolver pod gets ``resolve_timeout_seconds`` (its activeDeadlineSeconds) plus this to report."""
Resolve = Callable[..., ModelSource]


@dataclass
class _Entry:
    source: ModelSource | None = None
    resolved_at: datetime | None = None
    error: str | None = None
    detail: str = ""
    retry_at: datetime | None = None
    failures: int = 0
    in_flight: bool = False
    started: datetime | None = None
    pod: tuple[str, str, str, str] | None = None  # namespace, name, owner (server) uid, the pod's own uid
    note: str = ""
    waiters: set[Key] = field(default_factory=set)


class Resolutions:
    """The shared resolutions of one operator process (thread-safe; docs/design/model-resolution.md).

    ``wake(key)`` requeues a server (called from a pool thread); ``resolve`` is ``ctxfit.hub.resolve_hub`` (a test
    passes its own); ``clock`` gives the current time. Set after construction: ``ready(key)``, called instead of
    ``wake`` for the servers of a key's first resolution that succeeded (their next pass plans: the operator gives
    it a first pass's priority; a re-check of a moving branch wakes them with ``wake``); ``finished(kind, outcome,
    seconds)``, told of every resolution that ends (the key's kind: hub, token, volume or adapter; outcome
    ``Resolved`` or the error kind; the operator's metrics).
    """

    def __init__(self, kube: KubeClient | None, settings: Settings, wake: Callable[[Key], None],
                 resolve: Resolve | None = None, clock: Callable[[], datetime] | None = None,
                 workers: int = 2) -> None:
        self.kube, self.settings, self.wake = kube, settings, wake
        if resolve is None:
            from ctxfit.hub import resolve_hub

            resolve = resolve_hub
        self._resolve = resolve
        from ctxfit.hub import resolve_adapter

        self._resolve_adapter: Resolve = resolve_adapter  # adapter_config.json of a Hub LoRA adapter
        self._clock = clock or (lambda: datetime.now(UTC))
        self._lock = threading.Lock()
        self._entries: dict[tuple[str, ...], _Entry] = {}
        self._pool = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="ctxfit-resolve")
        self._cache = tempfile.mkdtemp(prefix="ctxfit-hf-")  # config.json downloads (the image's HOME may be read-only)
        self.hub_requests = 0  # resolutions started against the Hub (bench and tests read it)
        self.ready: Callable[[Key], None] = wake
        self.finished: Callable[[str, str, float], None] | None = None

    def close(self) -> None:
        """Stop the pool (running resolutions finish in the background, their results are dropped)."""
        self._pool.shutdown(wait=False, cancel_futures=True)

    # -- what a pass sees ---------------------------------------------------------------------------------------
    def view(self, server: Key, spec: dict[str, Any]) -> ResolutionView | None:
        """What is known for the resolution the server's spec needs (None: it needs none, or the spec is invalid).
        Reads the resolver pod once when one is running for the key."""
        if _needs_nothing(spec):  # the common case, without validating the spec again
            return None
        try:
            wanted = need(InferenceServerSpec.model_validate(spec), server[0])
        except ValidationError:
            return None
        if not wanted.reads:
            return None
        return self._view(server, wanted)

    def draft_view(self, server: Key, spec: dict[str, Any]) -> ResolutionView | None:
        """What is known for the Hub draft the spec needs (``converge.resolution.draft_need``), None without one."""
        speculative = spec.get("speculative")
        if not isinstance(speculative, dict) or not speculative.get("draft"):
            return None
        try:
            wanted = draft_need(InferenceServerSpec.model_validate(spec), server[0])
        except ValidationError:
            return None
        return None if wanted is None else self._view(server, wanted)

    def adapter_views(self, server: Key, spec: dict[str, Any]) -> tuple[ResolutionView, ...]:
        """What is known for each Hub adapter's adapter_config.json the spec needs (``adapter_needs``)."""
        lora = spec.get("lora")
        if not isinstance(lora, dict) or not lora.get("adapters"):
            return ()
        try:
            needs = adapter_needs(InferenceServerSpec.model_validate(spec), server[0])
        except ValidationError:
            return ()
        return tuple(self._view(server, wanted) for _, wanted in needs)

    def _view(self, server: Key, wanted: Need) -> ResolutionView:
        with self._lock:
            entry = self._entries.get(wanted.key)
            if entry is None:
                return ResolutionView(wanted.key)
            entry.waiters.add(server)
            pod = entry.pod if entry.in_flight else None
        if pod is not None:
            self._follow_pod(wanted, pod)
        with self._lock:
            self._timed_out(wanted.key, entry)
            return ResolutionView(wanted.key, entry.source, entry.resolved_at, entry.error, entry.detail,
                                  entry.retry_at, entry.in_flight,
                                  f"pod {entry.pod[1]}: {entry.note}" if entry.pod and entry.in_flight else None)

    # -- who still waits ----------------------------------------------------------------------------------------
    def retain(self, server: Key, keys: Iterable[tuple[str, ...]]) -> None:
        """Keep ``server`` a waiter only of ``keys`` (the keys of the resolutions its spec needs now: its pass's
        views). An entry left with no waiter is dropped, even while it runs (its result is discarded; its resolver
        pod, which the server owns, is deleted). Never raises."""
        keep, pods = set(keys), []
        with self._lock:
            for key, entry in list(self._entries.items()):
                if key in keep or server not in entry.waiters:
                    continue
                entry.waiters.discard(server)
                if not entry.waiters:
                    del self._entries[key]
                    if entry.in_flight and entry.pod is not None:
                        pods.append(entry.pod)
        for pod in pods:
            threading.Thread(target=self._delete_pod, args=(pod,), daemon=True).start()

    def forget(self, server: Key) -> None:
        """A deleted (or deleting) server waits on nothing: ``retain(server, ())``."""
        self.retain(server, ())

    # -- what a pass asks for -----------------------------------------------------------------------------------
    def request(self, server: Key, req: ResolutionRequest, body: dict[str, Any]) -> None:
        """Start the resolution ``req`` asks for, unless one for its key runs, succeeded (and this is no re-check)
        or failed and is not due again. Never raises (a pod it cannot create is a failure of the key)."""
        wanted, now = req.need, self._clock()
        with self._lock:
            entry = self._entries.setdefault(wanted.key, _Entry())
            entry.waiters.add(server)
            if req.forget_error and entry.error is not None and not entry.in_flight:
                entry.error, entry.detail, entry.retry_at, entry.failures = None, "", None, 0
            if entry.in_flight:
                return
            if entry.source is not None and not req.recheck:
                return
            if entry.error is not None and (entry.retry_at is None or entry.retry_at > now):
                return
            entry.in_flight, entry.started, entry.note = True, now, "starting"
        if wanted.kind == "hub":
            self._pool.submit(self._resolve_inline, wanted)
            return
        if not self.settings.resolver_image:
            self._finish(wanted.key, None, "ResolverNotConfigured",
                         "a resolver pod is needed (a token Secret or a preloaded claim) and CTXFIT_RESOLVER_IMAGE is "
                         "not set")
            return
        try:
            self._create_pod(wanted, body)
        except Foreign as exc:  # a pod of that name that is not the server's: never written, never read for a result
            self._finish(wanted.key, None, "ForeignObject", exc.describe())
        except Exception as exc:  # noqa: BLE001 - the key fails, the server says why
            self._finish(wanted.key, None, "HubUnreachable" if isinstance(exc, ApiException) and
                         server_error(exc) else "InvalidCheckpoint", f"resolver pod: {exc}")

    # -- the operator's own resolution (public repositories) ----------------------------------------------------
    def _resolve_inline(self, wanted: Need) -> None:
        from ctxfit.hub import ResolveError

        self.hub_requests += 1
        try:
            resolve = self._resolve_adapter if wanted.key[0] == "adapter" else self._resolve
            source = resolve(wanted.repo, revision=None if wanted.revision == "main" else wanted.revision,
                                   endpoint=os.environ.get("HF_ENDPOINT") or None, cache_dir=self._cache)
        except ResolveError as exc:
            self._finish(wanted.key, None, exc.kind.value, exc.detail)
            return
        except Exception as exc:
            logger.exception("resolving %s failed", wanted.repo)
            self._finish(wanted.key, None, "InvalidCheckpoint", f"{type(exc).__name__}: {exc}")
            return
        self._finish(wanted.key, source, None, "")

    def _finish(self, key: tuple[str, ...], source: ModelSource | None, error: str | None, detail: str) -> None:
        now = self._clock()
        with self._lock:
            entry = self._entries.get(key)
            if entry is None:  # dropped while it ran: no server waits on it any more (``retain``); not counted
                return
            took, waiters, first = self._record(entry, key, now, source, error, detail)
        if self.finished is not None:
            self.finished(key[0], "Resolved" if source is not None else str(error), max(0.0, took))
        wake = self.ready if first else self.wake
        for server in waiters:
            wake(server)

    def _record(self, entry: _Entry, key: tuple[str, ...], now: datetime, source: ModelSource | None,
                error: str | None, detail: str) -> tuple[float, list[Key], bool]:
        """Called with the lock held: the end of ``entry``'s run into it; (seconds it took, its waiters, whether it
        is the key's first success)."""
        took = (now - entry.started).total_seconds() if entry.started is not None else 0.0
        first = source is not None and entry.source is None  # not a re-check of a moving branch
        entry.in_flight, entry.pod, entry.note = False, None, ""
        if source is not None:
            entry.source, entry.resolved_at, entry.error, entry.detail = source, now, None, ""
            entry.retry_at, entry.failures = None, 0
        else:
            entry.error, entry.detail = error, detail
            if error == "HubUnreachable" or error == "ForeignObject":
                entry.failures += 1
                entry.retry_at = now + timedelta(seconds=self._backoff(entry.failures))
            elif error == "ModelAccessDenied" and key[0] == "token":
                entry.retry_at = now + timedelta(seconds=self.settings.token_recheck_seconds)
            else:
                entry.retry_at = None
        return took, list(entry.waiters), first

    def _backoff(self, failures: int) -> float:
        return float(min(self.settings.resolve_backoff_seconds * 2.0 ** (failures - 1),
                         self.settings.resolve_backoff_max_seconds))

    def _timed_out(self, key: tuple[str, ...], entry: _Entry) -> None:
        """Called with the lock held: a run past its deadline is an unreachable Hub (retried with backoff)."""
        if not entry.in_flight or entry.started is None:
            return
        limit = self.settings.resolve_timeout_seconds + POD_GRACE_SECONDS
        if (self._clock() - entry.started).total_seconds() <= limit:
            return
        pod = entry.pod
        entry.in_flight = False
        entry.error, entry.detail = "HubUnreachable", f"the resolution did not finish in {limit:.0f} s ({entry.note})"
        entry.failures += 1
        entry.retry_at = self._clock() + timedelta(seconds=self._backoff(entry.failures))
        entry.pod = None
        if pod is not None:
            threading.Thread(target=self._delete_pod, args=(pod,), daemon=True).start()

    # -- resolver pods (gated repositories, preloaded claims) ---------------------------------------------------
    def _create_pod(self, wanted: Need, body: dict[str, Any]) -> None:
        assert self.kube is not None
        meta = body["metadata"]
        namespace, server, uid = meta["namespace"], meta["name"], meta["uid"]
        pod = resolver_pod(wanted, server, namespace, uid, self.settings)
        name = pod["metadata"]["name"]
        created: dict[str, Any] | None
        try:
            created = self.kube.rest.call_json("POST", PODS, namespace, body=pod)
        except ApiException as exc:
            if not conflict(exc):
                raise
            # the name is taken: the server's own pod of an earlier run (an operator restart) is followed, anything
            # else is foreign (guarded.check raises Foreign) and never touched
            created = self.kube.rest.read(PODS, namespace, name)
            if check("Pod", name, created, uid) is None:
                raise Conflict(f"pod {name} was deleted while it was created") from None
        assert created is not None
        pod_uid = str((created.get("metadata") or {}).get("uid") or "")
        with self._lock:
            entry = self._entries.get(wanted.key)
            if entry is not None:
                entry.pod, entry.note = (namespace, name, uid, pod_uid), "created"
        if entry is None:  # dropped while the pod was created (its server is gone or needs it no more)
            self._delete_pod((namespace, name, uid, pod_uid))

    def _follow_pod(self, wanted: Need, pod: tuple[str, str, str, str]) -> None:
        assert self.kube is not None
        namespace, name, uid, pod_uid = pod
        try:
            live = self.kube.rest.read(PODS, namespace, name)
        except ApiException as exc:
            self._note(wanted.key, f"unreadable ({exc.status})")
            return
        live_uid = str(((live or {}).get("metadata") or {}).get("uid") or "")
        if live is None or (pod_uid and live_uid != pod_uid):
            # gone, or replaced by another pod of that name: its termination message is not our resolver's
            try:
                check("Pod", name, live, uid)
            except Foreign as exc:
                self._finish(wanted.key, None, "ForeignObject", exc.describe())
                return
            self._finish(wanted.key, None, "HubUnreachable", f"resolver pod {name} disappeared before it reported")
            return
        status = live.get("status") or {}
        phase = status.get("phase")
        terminated = next((((c.get("state") or {}).get("terminated")) for c in status.get("containerStatuses") or []
                           if c.get("name") == RESOLVER_CONTAINER), None)
        if phase not in ("Succeeded", "Failed") or terminated is None:
            waiting = next((((c.get("state") or {}).get("waiting") or {}) for c in status.get("containerStatuses")
                            or []), {})
            cond = next((c for c in status.get("conditions") or [] if c.get("type") == "PodScheduled"
                         and c.get("status") == "False"), None)
            note = phase or "Pending"
            if waiting.get("reason"):
                note += f": {waiting['reason']}"
            elif cond is not None:
                note += f": {cond.get('reason')} {cond.get('message') or ''}".rstrip()
            self._note(wanted.key, note[:200])
            return
        message = str(terminated.get("message") or "")
        try:
            found = unpack(message)
        except ValueError as exc:
            self._finish(wanted.key, None, "InvalidCheckpoint",
                         f"resolver pod {name} ended {phase} (exit {terminated.get('exitCode')}) without a result "
                         f"({exc})")
        else:
            if isinstance(found, ModelSource):
                self._finish(wanted.key, found, None, "")
            else:
                kind, _, detail = found
                self._finish(wanted.key, None, kind, detail)
        self._delete_pod(pod)

    def _note(self, key: tuple[str, ...], note: str) -> None:
        with self._lock:
            entry = self._entries.get(key)
            if entry is not None:  # (dropped meanwhile: nobody reads it)
                entry.note = note

    def _delete_pod(self, pod: tuple[str, str, str, str]) -> None:
        """Delete the resolver pod the guarded way (``objects.delete_if_owned``: read, check it is the server's by
        uid, DELETE with the pod's uid as a precondition); a pod that is not the server's is left alone."""
        assert self.kube is not None
        namespace, name, uid, _ = pod
        try:
            delete_if_owned(self.kube.rest, PODS, namespace, name, uid)
        except (Foreign, Conflict) as exc:
            logger.warning("resolver pod %s/%s not deleted: %s", namespace, name, exc)
        except ApiException as exc:
            logger.warning("deleting resolver pod %s/%s: %s", namespace, name, exc.status)


def _needs_nothing(spec: dict[str, Any]) -> bool:
    """True when ``need`` would say ``spec`` or ``catalog`` (read from the raw spec; ``need`` stays the rule)."""
    model = spec.get("model") if isinstance(spec.get("model"), dict) else {}
    assert isinstance(model, dict)
    if model.get("architecture") is not None and model.get("weightsPerGPU") is not None:
        return True
    name = model.get("name")
    if not isinstance(name, str) or name.startswith("/") or (model.get("revision") or "main") != "main":
        return False
    from ctxfit.catalog import lookup_model

    return lookup_model(name) is not None
