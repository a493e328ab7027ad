"""What a change of an owned object does: kopf's Deployment and Service events (``handlers.on_owned``) and the
add-on watches' LeaderWorkerSet, ScaledObject and InferencePool events (``kube/owned_watch.py``, started here)
enqueue the object's server when what the operator compares changed.

Why the add-on kinds are not kopf's: docs/design/architecture.md ("Add-on watches").
"""

from __future__ import annotations

import dataclasses
import json
import threading
from collections.abc import Callable, Mapping
from typing import Any

from ctxfit.render import SERVER_LABEL
from ctxfit.render.labels import MANAGED_BY

from ..kube.owned_watch import Deliver, start_owned_watch
from ..kube.rest import INFERENCE_POOLS, LEADER_WORKER_SETS, SCALED_OBJECTS, Rest
from ..settings import Settings
from ..views.pods import deployment_view
from ..views.workloads import scaled_object_view, service_view

OWNED_SELECTOR = f"app.kubernetes.io/managed-by={MANAGED_BY},{SERVER_LABEL}"
"""The label selector of every object the operator renders (``kopf.on.event(labels=owned)`` says the same)."""

Key = tuple[str, str]
Enqueue = Callable[[str | None, dict[str, Any], str], None]
"""``enqueue(type, object, plural)``: an add-on watch's event, handed to the operator's loop."""


def view_hash(plural: str, body: Mapping[str, Any], name: str) -> int:
    """A hash of what the operator compares of an owned object (its view; the index keeps the view itself)."""
    if plural == "services":
        return hash(service_view(dict(body), name))
    if plural == SCALED_OBJECTS.plural:
        return hash(json.dumps(dataclasses.asdict(scaled_object_view(dict(body))), sort_keys=True, default=str))
    return hash(deployment_view(dict(body)))


def owned_changed(views: dict[str, int], kind: str | None, body: Mapping[str, Any], plural: str) -> Key | None:
    """The server to reconcile when an owned object changed in what the operator compares or was deleted (its
    view hash kept in ``views`` by uid), else None. An InferencePool names its server in its label; the others
    are named like it."""
    meta = body.get("metadata") or {}
    namespace, name, uid = str(meta.get("namespace") or ""), str(meta.get("name") or ""), str(meta.get("uid"))
    if plural == INFERENCE_POOLS.plural:  # any change of a pool: its server compares the whole object
        server = (meta.get("labels") or {}).get(SERVER_LABEL)
        return (namespace, str(server)) if server else None
    if kind == "DELETED":
        views.pop(uid, None)
        return namespace, name
    view = view_hash(plural, body, name)
    if views.get(uid) == view:
        return None
    views[uid] = view
    return namespace, name


def start_addon_watches(rest: Rest, settings: Settings, enqueue: Enqueue, stopping: threading.Event) -> int:
    """Watch the operator's LeaderWorkerSets (always: a hand edit of a group is drift), ScaledObjects (with
    ``keda_enabled``: the chart grants list/watch on them only then) and InferencePools (with ``gateway_enabled``),
    in every watched namespace (all when none is set); returns how many watches started."""
    started = 0
    for namespace in settings.watch_namespaces or (None,):
        start_owned_watch(rest, LEADER_WORKER_SETS, namespace, OWNED_SELECTOR,
                          _to(enqueue, LEADER_WORKER_SETS.plural), stopping)
        started += 1
        if settings.keda_enabled:
            start_owned_watch(rest, SCALED_OBJECTS, namespace, OWNED_SELECTOR, _to(enqueue, SCALED_OBJECTS.plural),
                              stopping)
            started += 1
        if settings.gateway_enabled:
            start_owned_watch(rest, INFERENCE_POOLS, namespace, OWNED_SELECTOR,
                              _to(enqueue, INFERENCE_POOLS.plural), stopping)
            started += 1
    return started


def _to(enqueue: Enqueue, plural: str) -> Deliver:
    return lambda kind, obj: enqueue(kind, obj, plural)
