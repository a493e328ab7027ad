"""One reconcile of one InferenceServer: read (Kube + indexes) -> ``converge`` (pure) -> write.

Runs in a worker thread (the API client is synchronous). Order of writes: status first (compare-and-
swap; a conflict means someone else moved first, so nothing else is written and the key is requeued),
then its Events, then the Deployment/Service, then metrics. Errors never escape: they are logged, counted
in ``ctxfit_reconcile_errors_total{reason}`` and the key is retried later.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from kubernetes.client.exceptions import ApiException

from ctxfit.api import EngineKind
from ctxfit.api.status import InferenceServerStatus
from ctxfit.recovery import Failure, Observation, classify
from ctxfit.render import TEMPLATE_HASH_ANNOTATION
from ctxfit.render.deployment import CONTAINER_NAME

from .converge import DeploymentView, Outcome, Snapshot, converge
from .kube import Conflict, Kube
from .metrics import Metrics
from .observe import GPUNode, PodView
from .settings import Settings

logger = logging.getLogger(__name__)

MESSAGE_CUT_BYTES = 2000
"""A termination message this long was probably cut by the kubelet (2048-byte/80-line tail)."""
CONFLICT_RETRY_SECONDS = 0.2
ERROR_RETRY_SECONDS = 5.0


@dataclass
class Runtime:
    """What reconciles share (kept on kopf's ``memo``): settings, API wrapper, metrics."""

    settings: Settings
    kube: Kube
    metrics: Metrics


@dataclass(frozen=True)
class Result:
    """``requeue_after`` seconds (None: no need), and whether the server waits for an eligible node."""

    requeue_after: float | None
    waiting_for_nodes: bool = False


def diagnose(rt: Runtime, namespace: str, pod: PodView, engine: EngineKind) -> Failure:
    """Classify a failed pod: termination reason/exit code/message, + log tail when cut, + pod Events."""
    term = pod.termination
    message = term.message if term else ""
    log_tail = ""
    if (not message or len(message.encode()) >= MESSAGE_CUT_BYTES) and rt.settings.log_tail_lines:
        log_tail = rt.kube.log_tail(namespace, pod.name, CONTAINER_NAME, previous=pod.restart_count > 0,
                                    lines=rt.settings.log_tail_lines)
    events = tuple(rt.kube.pod_events(namespace, pod.name))
    observation = Observation(reason=term.reason if term else None, exit_code=term.exit_code if term else None,
                              message=message, log_tail=log_tail, events=events)
    return classify(observation, engine)


def _deployment_view(deployment: dict[str, Any] | None) -> DeploymentView | None:
    if deployment is None:
        return None
    meta = deployment.get("metadata") or {}
    return DeploymentView(template_hash=(meta.get("annotations") or {}).get(TEMPLATE_HASH_ANNOTATION),
                          replicas=(deployment.get("spec") or {}).get("replicas"))


def _write(rt: Runtime, body: dict[str, Any], old: InferenceServerStatus, out: Outcome) -> None:
    kube = rt.kube
    new_wire = out.status.to_wire()
    if new_wire != old.to_wire():
        kube.replace_status(body, new_wire)
    for note in out.events:
        kube.post_event(body, note.type, note.reason.value, note.message)
    if out.deployment is not None:
        kube.apply(out.deployment)
    if out.scale_to_zero:
        meta = body["metadata"]
        kube.scale_to_zero(meta["namespace"], meta["name"])
    if out.service is not None:
        kube.apply(out.service)


def reconcile(rt: Runtime, namespace: str, name: str, nodes: tuple[GPUNode, ...],
              pods: tuple[PodView, ...]) -> Result:
    """Reconcile ``namespace/name`` once; never raises (see the module docstring)."""
    started = time.monotonic()
    try:
        body = rt.kube.get_server(namespace, name)
        if body is None or body["metadata"].get("deletionTimestamp"):
            rt.metrics.forget(namespace, name)
            return Result(None)
        meta = body["metadata"]
        old = InferenceServerStatus.from_body(body.get("status"))
        snap = Snapshot(
            name=name, namespace=namespace, uid=meta["uid"], generation=int(meta.get("generation") or 0),
            spec=body.get("spec") or {}, status=old, nodes=nodes, pods=pods,
            deployment=_deployment_view(rt.kube.get_deployment(namespace, name)),
            service_exists=rt.kube.service_exists(namespace, name), now=datetime.now(UTC),
        )
        engine_text = str((snap.spec.get("engine") or {}).get("kind", ""))
        engine = EngineKind(engine_text) if engine_text in EngineKind.__members__.values() else EngineKind.VLLM
        out = converge(snap, rt.settings, lambda pod, _restarts: diagnose(rt, namespace, pod, engine))
        _write(rt, body, old, out)
        target = out.spec.context.target if out.spec else None
        rt.metrics.observe_status(namespace, name, engine_text, out.status, target)
        rt.metrics.observe_attempts(namespace, name, engine_text, out.finished, out.step_down_reasons)
        return Result(out.requeue_after, out.waiting_for_nodes)
    except Conflict:
        return Result(CONFLICT_RETRY_SECONDS)
    except ApiException as exc:
        rt.metrics.reconcile_errors.labels(f"api_{exc.status}").inc()
        logger.warning("reconcile %s/%s: API error %s %s", namespace, name, exc.status, exc.reason)
        return Result(ERROR_RETRY_SECONDS)
    except Exception as exc:  # noqa: BLE001 - an operator must not crash-loop on one bad object
        rt.metrics.reconcile_errors.labels(type(exc).__name__).inc()
        logger.exception("reconcile %s/%s failed", namespace, name)
        return Result(ERROR_RETRY_SECONDS * 2)
    finally:
        rt.metrics.reconcile_duration.observe(time.monotonic() - started)
