"""kopf wiring of the inference gateway (only with ``CTXFIT_GATEWAY_ENABLED``): the servers of each pool as an
index, and a pool's other servers enqueued when one of them changes (the owned InferencePools are watched by
``owned.start_addon_watches``).

The index, the watch and ``notify_members`` in detail: docs/design/gateway.md.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import kopf

from ..views.routing import MemberView, member_view
from .lifecycle import State

Key = tuple[str, str]
MEMBERS_INDEX = "servers_by_pool"


async def index_members(namespace: str, body: kopf.Body, **_: Any) -> dict[Key, MemberView]:
    """Index: (namespace, pool) -> the server's ``MemberView`` (nothing for a server that names no pool)."""
    if not ((body.get("spec") or {}).get("routing") or {}).get("inferencePool"):
        return {}
    found = member_view(dict(body))
    return {} if found is None else {(namespace, found[0]): found[1]}


def notify_members(state: State, event: kopf.RawEvent, body: kopf.Body, namespace: str, name: str,
                   indexes: Mapping[str, Any]) -> None:
    """Enqueue the other servers of the pool(s) this server was and is in when its member view changed."""
    index = indexes.get(MEMBERS_INDEX)
    if index is None:
        return
    key = (namespace, name)
    deleted = event.get("type") == "DELETED"
    found = None if deleted or not ((body.get("spec") or {}).get("routing") or {}).get("inferencePool") \
        else member_view(dict(body))
    new = (found[0], hash(found[1])) if found is not None else None
    old = state.member_views.get(key)
    if new == old:
        return
    if new is None:
        state.member_views.pop(key, None)
    else:
        state.member_views[key] = new
    for pool in {p for p in (old[0] if old else None, new[0] if new else None) if p}:
        for member in index.get((namespace, pool), ()):
            if member.name != name:
                state.queue.add((namespace, member.name))


def register(registry: kopf.OperatorRegistry, handler: Callable[[Callable[..., Any]], Any]) -> None:
    """Add the gateway's servers-by-pool index to ``registry``."""
    from ctxfit.api import API_GROUP, API_VERSION, PLURAL

    kopf.index(API_GROUP, API_VERSION, PLURAL, registry=registry, id=MEMBERS_INDEX)(handler(index_members))
