"""Watches of the owned objects whose kinds come from add-ons (LeaderWorkerSets, KEDA ScaledObjects, Gateway API
InferencePools), each in a thread rather than in kopf, which stops the whole operator when a watched kind stops
being served (an add-on's CRD deleted while it runs). Here a 404 waits and looks again; 410 lists again.
Why and the states: docs/design/architecture.md ("Add-on watches").
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from typing import Any

from kubernetes.client.exceptions import ApiException

from .answers import expired, resource_missing
from .rest import Resource, Rest

logger = logging.getLogger(__name__)

Deliver = Callable[[str | None, dict[str, Any]], None]
"""``deliver(type, object)``: ``None`` for an object of a listing, else the watch event's ``ADDED``, ``MODIFIED`` or
``DELETED``; called in the watch's thread."""

WATCH_SECONDS = 300
"""The API server ends each watch after this (``timeoutSeconds``); it is opened again from the last version."""
READ_SLACK_SECONDS = 30.0
"""A watch that sends no byte (not even its end) for ``WATCH_SECONDS`` + this is taken as lost."""
ABSENT_RETRY_SECONDS = (5.0, 120.0)
"""(first, most) seconds before looking again at a resource that is not served (404); doubling."""
ERROR_RETRY_SECONDS = (1.0, 30.0)
"""(first, most) seconds before trying again after any other failure (refused, unreachable); doubling."""
LIST_PAGE = 500
"""Objects per page of the listing (``limit``)."""


def start_owned_watch(rest: Rest, resource: Resource, namespace: str | None, selector: str, deliver: Deliver,
                      stopping: threading.Event) -> threading.Thread:
    """Start ``run_owned_watch`` in a daemon thread (``namespace`` None: cluster-wide); returns the thread."""
    where = namespace or "all"
    thread = threading.Thread(
        target=lambda: run_owned_watch(rest, resource, namespace, selector, deliver, stopping),
        name=f"ctxfit-watch-{resource.plural}-{where}", daemon=True)
    thread.start()
    return thread


def run_owned_watch(rest: Rest, resource: Resource, namespace: str | None, selector: str, deliver: Deliver,
                    stopping: threading.Event) -> None:
    """List and watch ``resource`` (objects matching ``selector``) until ``stopping`` is set. Never raises: a 404
    waits ``ABSENT_RETRY_SECONDS``, any other failure ``ERROR_RETRY_SECONDS`` (both doubling), then lists again; an
    exception of ``deliver`` is logged and the watch goes on."""
    what = f"{resource.plural} ({namespace or 'all namespaces'})"
    absent = failures = 0
    version: str | None = None
    while not stopping.is_set():
        try:
            if version is None:
                version = _list_owned(rest, resource, namespace, selector, deliver)
                if absent:
                    logger.info("%s served again: watching", what)
                absent = failures = 0
            for event in rest.watch(resource, namespace, timeout=WATCH_SECONDS + READ_SLACK_SECONDS, query={
                    "labelSelector": selector, "resourceVersion": version, "allowWatchBookmarks": "true",
                    "timeoutSeconds": WATCH_SECONDS}):
                version = _handle(event, deliver) or version
                if stopping.is_set():
                    return
            failures = 0
        except ApiException as exc:
            version = None
            if expired(exc):  # the version is too old (an ERROR event, or the answer itself): list again
                continue
            if resource_missing(exc):
                if not absent:
                    logger.info("%s not served (its CRD absent?): looking again from time to time", what)
                absent += 1
                stopping.wait(_backoff(ABSENT_RETRY_SECONDS, absent))
            else:
                failures += 1
                logger.warning("watching %s: HTTP %s %s", what, exc.status, exc.reason)
                stopping.wait(_backoff(ERROR_RETRY_SECONDS, failures))
        except Exception as exc:  # noqa: BLE001 - a lost connection, a read timeout: the watch never ends on it
            failures += 1
            logger.info("watching %s: %s: %s; again shortly", what, type(exc).__name__, str(exc)[:200])
            stopping.wait(_backoff(ERROR_RETRY_SECONDS, failures))


def _list_owned(rest: Rest, resource: Resource, namespace: str | None, selector: str, deliver: Deliver) -> str:
    """Hand every object of the listing to ``deliver`` (type None), page by page; returns the list's version."""
    token: str | None = None
    while True:
        page = rest.list(resource, namespace, query={"labelSelector": selector, "limit": LIST_PAGE, "continue": token})
        for item in page.get("items") or []:
            _deliver(deliver, None, item)
        meta = page.get("metadata") or {}
        token = meta.get("continue") or None
        if token is None:
            return str(meta.get("resourceVersion") or "")


def _handle(event: dict[str, Any], deliver: Deliver) -> str | None:
    """One watch event: delivered (ADDED, MODIFIED, DELETED), a bookmark, or an error; returns the version it
    carries (None: none). Raises ``ApiException`` for an error event, with its ``Status`` code (410: expired)."""
    kind, obj = event.get("type"), event.get("object") or {}
    if kind == "ERROR":
        code = obj.get("code")
        raise ApiException(status=code if isinstance(code, int) else 0,
                           reason=str(obj.get("message") or obj.get("reason") or "watch error"))
    if kind in ("ADDED", "MODIFIED", "DELETED"):
        _deliver(deliver, kind, obj)
    version = (obj.get("metadata") or {}).get("resourceVersion")
    return str(version) if version else None


def _deliver(deliver: Deliver, kind: str | None, obj: dict[str, Any]) -> None:
    try:
        deliver(kind, obj)
    except Exception:  # a bug of the receiver must not end the watch
        logger.exception("delivering a watch event of %s", (obj.get("metadata") or {}).get("name"))


def _backoff(bounds: tuple[float, float], count: int) -> float:
    """``first`` doubled ``count - 1`` times, at most ``most`` (any count: the exponent is capped)."""
    first, most = bounds
    return min(most, first * 2.0 ** min(max(0, count - 1), 32))
