"""One reconcile of one InferenceServer: read (``read``) -> ``converge`` (pure) -> write (``write``).

Runs in a worker thread (the API client is synchronous). A child write the API server refuses is booked
(``RejectionBook``) and a second pass at once says it in status; each pass writes status at most once. Errors never
escape: they are logged, counted in ``ctxfit_reconcile_errors_total{reason}`` and the key is retried later.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, replace
from typing import Any

from kubernetes.client.exceptions import ApiException

from ctxfit.api import EngineKind
from ctxfit.api.status import Reason
from ctxfit.render.deployment import CONTAINER_NAME

from .. import rejections
from ..converge import Outcome, converge
from ..converge.refusals import is_rejected
from ..converge.types import EventNote
from ..kube.pools import MembersOf
from ..kube.rest import Conflict
from ..telemetry.decision_log import decisions, log_decisions
from ..views.pods import DeploymentView, GPUNode, PodView, deployment_view
from ..views.workloads import ServiceView
from .context import Result, Runtime, Stopping, not_stopping
from .diagnose import diagnose
from .read import UNKNOWN, ClaimSeen, Unknown, snapshot
from .write import Deferred, write

logger = logging.getLogger(__name__)

CONFLICT_RETRY_SECONDS = 0.2
ERROR_RETRY_SECONDS = 5.0


@dataclass(frozen=True)
class Pass:
    """What one pass did: what the caller keeps, the child write the API server refused (None: none), and whether
    every write refused before is now applied while status still says refused (``settle``: the next pass says
    ``ObjectsAccepted``)."""

    result: Result
    refused: rejections.Rejected | None = None
    settle: bool = False


def _book(rt: Runtime, key: tuple[str, str], refused: rejections.Rejected | None) -> tuple[float, float | None]:
    """Book a refusal (``RejectionBook.failed``) and count it; returns the monotonic time it was booked at and its
    backoff (None: nothing refused)."""
    now = time.monotonic()
    if refused is None:
        return now, None
    rt.metrics.reconcile_errors.labels(f"rejected_{refused.code}").inc()
    return now, rt.rejections.failed(key, refused, now)


def _request_resolutions(rt: Runtime, key: tuple[str, str], out: Outcome, body: dict[str, Any]) -> None:
    """Start the resolver reads the pass asked for (the model, its draft, its adapters: ``kube/resolution.py``)."""
    if rt.resolutions is None:
        return
    requests = [r for r in (out.resolution_request, out.draft_resolution_request) if r is not None]
    requests += list(out.adapter_resolution_requests)
    for request in requests:
        not_stopping(rt)
        rt.resolutions.request(key, request, body)


def _pass(rt: Runtime, namespace: str, name: str, nodes: tuple[GPUNode, ...], pods: tuple[PodView, ...],
          body: dict[str, Any], deployment: DeploymentView | Unknown | None,
          service_port: ServiceView | int | Unknown | None, claim_seen: ClaimSeen | None,
          members_of: MembersOf | None, clock: float | None = None) -> Pass:
    """One pass: read the snapshot (the refusal book at ``clock``, else now), ``converge`` (pure), apply the
    children, write status at most once."""
    snap, problem = snapshot(rt, namespace, name, nodes, pods, body, deployment, service_port, claim_seen,
                             members_of, clock)
    engine_text = str((snap.spec.get("engine") or {}).get("kind", ""))
    # None (an invalid spec, which converge refuses before any diagnosis): classify knows every engine's text
    engine = EngineKind(engine_text) if engine_text in EngineKind.__members__.values() else None
    read_startup = None
    if rt.settings.startup_log_bytes:
        def read_startup(pod: PodView) -> str | None:
            return rt.kube.log_head(namespace, pod.name, CONTAINER_NAME, limit_bytes=rt.settings.startup_log_bytes)
    out = converge(snap, rt.settings, lambda pod, _restarts: diagnose(rt, namespace, pod, engine), read_startup)
    if problem is not None:
        out.events.insert(0, EventNote("Warning", Reason.INVALID_STATUS,
                                       f"stored status discarded ({problem}); planning again from the spec"))
    stored, refusal = write(rt, body, out, snap, force_status=problem is not None)
    if refusal is not None:
        return Pass(Result(0.0, stored=stored if isinstance(stored, dict) else None), refusal)
    _request_resolutions(rt, (namespace, name), out, body)
    if isinstance(stored, Deferred):
        assert out.deployment is not None
        return Pass(Result(0.0, applied=deployment_view(out.deployment)))
    rt.rejections.applied((namespace, name), out)
    log_decisions(body, decisions(snap.status, out))
    target = out.spec.context.target if out.spec else None
    rt.metrics.observe_status(namespace, name, engine_text, out.status, target)
    rt.metrics.observe_attempts(namespace, name, engine_text, out.finished, out.step_down_reasons)
    return Pass(Result(out.requeue_after, waiting_for_nodes=out.waiting_for_nodes, stored=stored),
                settle=is_rejected(out.status) and rt.rejections.accepted_all((namespace, name)))


def reconcile(rt: Runtime, namespace: str, name: str,
              nodes: tuple[GPUNode, ...], pods: tuple[PodView, ...], *,
              body: dict[str, Any] | None = None, deployment: DeploymentView | Unknown | None = UNKNOWN,
              service_port: ServiceView | int | Unknown | None = UNKNOWN,
              claim_seen: ClaimSeen | None = None, members_of: MembersOf | None = None) -> Result:
    """Reconcile ``namespace/name`` once; never raises (see the module docstring).

    ``body``, ``deployment``, ``service_port``, ``claim_seen``, ``members_of``: what the caller's watches already
    show (kopf indexes; ``members_of(pool)``: the namespace's servers that name ``pool``); omitted ones are read
    from the API (no members: a pool's other servers are not known). A stale ``body`` only costs a conflict and a
    retry with a fresh read. An object of a child's name that is not the server's (``ownership``) counts as
    absent: converge renders it, and the write ends in ``guarded.Foreign`` (a condition and an Event) instead of
    touching it. A refused child write is booked (``RejectionBook.failed``) and a second pass, at once, says it
    in status; each pass writes status at most once.
    """
    started = time.monotonic()
    try:
        not_stopping(rt)
        if body is None:
            body = rt.kube.get_server(namespace, name)
        if body is None or body["metadata"].get("deletionTimestamp"):
            rt.metrics.forget(namespace, name)
            if rt.resolutions is not None:
                rt.resolutions.forget((namespace, name))
            return Result(None)
        first = _pass(rt, namespace, name, nodes, pods, body, deployment, service_port, claim_seen, members_of)
        clock, backoff = _book(rt, (namespace, name), first.refused)
        if first.refused is None and not first.settle:
            return first.result
        # a write was refused (booked), or every refused write is now applied: the next pass says so in status
        again = _pass(rt, namespace, name, nodes, pods, first.result.stored or body, deployment, service_port,
                      claim_seen, members_of, clock)
        _book(rt, (namespace, name), again.refused)  # said by the next reconcile
        result = replace(again.result, stored=again.result.stored or first.result.stored)
        return result if backoff is None else replace(result, requeue_after=backoff)  # look again when it is due
    except Stopping:
        return Result(None)
    except Conflict:
        return Result(CONFLICT_RETRY_SECONDS, conflict=True)
    except ApiException as exc:
        rt.metrics.reconcile_errors.labels(f"api_{exc.status}").inc()
        logger.warning("reconcile %s/%s: API error %s %s: %s", namespace, name, exc.status, exc.reason,
                       rejections.api_message(exc, 500))
        return Result(ERROR_RETRY_SECONDS, conflict=True)
    except Exception as exc:  # an operator must not crash-loop on one bad object
        rt.metrics.reconcile_errors.labels(type(exc).__name__).inc()
        if rt.rejections.first_error((namespace, name), f"{type(exc).__name__}: {exc}"):
            logger.exception("reconcile %s/%s failed", namespace, name)
        else:  # the same error again: one line, not a traceback every pass
            logger.warning("reconcile %s/%s failed again: %s: %s", namespace, name, type(exc).__name__, exc)
        return Result(ERROR_RETRY_SECONDS * 2, conflict=True)
    finally:
        rt.metrics.reconcile_duration.observe(time.monotonic() - started)
