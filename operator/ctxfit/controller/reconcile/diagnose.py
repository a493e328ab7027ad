"""A failed pod read into a ``Failure``: its termination, log tail and Events through ``recovery.classify``."""

from __future__ import annotations

from ctxfit.api import EngineKind
from ctxfit.recovery import Failure, Observation, classify
from ctxfit.recovery.download import as_download_failure
from ctxfit.render.cache import DOWNLOAD_CONTAINER
from ctxfit.render.deployment import CONTAINER_NAME
from ctxfit.vocab.text import clean_lines, clean_text

from ..views.pods import PodView
from .context import Runtime

MESSAGE_CUT_BYTES = 2000
"""A termination message this long was probably cut by the kubelet (2048-byte/80-line tail)."""

def diagnose(rt: Runtime, namespace: str, pod: PodView, engine: EngineKind | None) -> Failure:
    """Classify a failed pod of ``namespace`` (``recovery.classify`` for ``engine``; None: every engine's wording).

    Reads the termination reason, exit code and message; when the message is empty or at least
    ``MESSAGE_CUT_BYTES`` long (the kubelet keeps a 2048-byte/80-line tail), the container's log tail too
    (``settings.log_tail_lines`` lines, at most ``kube.client.LOG_TAIL_BYTES``); and the pod's Events, with its own
    ``status.reason``/``message`` (eviction) counted as one. A pod whose ``model-download`` init container failed is
    classified from that container (``recovery.download.as_download_failure``). The engine container's text is
    sanitized (``vocab.text.clean_text``) before matching. Returns a ``Failure``; never raises for an unreadable
    log or Event list (both reads are best effort and give "" / []).
    """
    download = pod.download
    if download is not None and download.state == "failed":
        tail = ""
        if (not download.message or len(download.message.encode()) >= MESSAGE_CUT_BYTES) and rt.settings.log_tail_lines:
            tail = rt.kube.log_tail(namespace, pod.name, DOWNLOAD_CONTAINER, previous=True,
                                    lines=rt.settings.log_tail_lines)
        found = classify(Observation(reason=download.reason, exit_code=download.exit_code, message=download.message,
                                     log_tail=tail, events=tuple(rt.kube.pod_events(namespace, pod.name))), engine)
        return as_download_failure(found, f"{tail}\n{download.message}")
    term = pod.termination
    message = term.message if term else ""
    log_tail = ""
    if (not message or len(message.encode()) >= MESSAGE_CUT_BYTES) and rt.settings.log_tail_lines:
        log_tail = rt.kube.log_tail(namespace, pod.name, CONTAINER_NAME, previous=pod.restart_count > 0,
                                    lines=rt.settings.log_tail_lines)
    events = tuple(rt.kube.pod_events(namespace, pod.name))
    if pod.reason:
        events = (*events, f"{pod.reason}: {pod.message}")
    observation = Observation(reason=term.reason if term else None, exit_code=term.exit_code if term else None,
                              message=clean_text(message), log_tail=clean_text(log_tail), events=clean_lines(events),
                              node=pod.node)
    return classify(observation, engine)
