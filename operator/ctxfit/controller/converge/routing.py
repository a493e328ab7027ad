"""The inference gateway as a pure pass: a server's InferencePool, its pods' context labels, its routing status.

Inputs are views (``RoutingSnapshot``: the namespace's pools, the other servers naming the same pool); outputs
are what to write (fields of ``Outcome``). docs/design/gateway.md has the rules; README "Inference gateway" the
behaviour users see.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from ctxfit.api import InferenceServerSpec
from ctxfit.api.routing import MAX_TARGET_PORTS, PoolMember, RoutingStatus
from ctxfit.api.status import ConditionStatus, ConditionType, InferenceServerStatus, Reason
from ctxfit.render.inferencepool import (
    POOL_LABEL,
    context_labels,
    context_range,
    pool_input,
    render_inference_pool,
    server_ports,
)
from ctxfit.render.labels import common_labels

from ..views.pods import PodView
from ..views.routing import MemberView, PoolPod, PoolView, RoutingSnapshot, promised
from .status import drop_condition, set_condition
from .types import EventNote, Outcome
from .verify import capacity_tokens

CRD_RECHECK_SECONDS = 60.0
"""With the InferencePool API absent, a server's routing is looked at again this often (like KEDA's absence)."""


def _reference(me: MemberView, others: tuple[MemberView, ...], pool: PoolView | None) -> MemberView | None:
    """The server whose model and served name the pool's other servers must match: the pool's owner when a
    server owns it, else the server that creates it, else the oldest (then the first by name)."""
    everyone = (me, *(o for o in others if not o.refused))
    if pool is not None and pool.by_server:
        owner = next((m for m in everyone if m.uid == pool.owner_uid), None)
        if owner is not None:
            return owner
    creators = [m for m in everyone if m.creates]
    candidates = creators or list(everyone)
    return min(candidates, key=lambda m: (m.created, m.name))


def pool_refusal(me: MemberView, others: tuple[MemberView, ...], pool: PoolView | None, pool_name: str) -> str | None:
    """Why this server may not serve in ``pool_name`` (one sentence naming the server it disagrees with), None
    when it may: another server defines the pool's model and served name, or the pool would need more target
    ports than an InferencePool holds."""
    ref = _reference(me, others, pool)
    if ref is not None and ref.uid != me.uid:
        if ref.model != me.model:
            return (f"routing.inferencePool: pool {pool_name} serves model {ref.model} (InferenceServer {ref.name}); "
                    f"this server's model is {me.model}")
        if ref.served_name != me.served_name:
            return (f"routing.servedModelName: pool {pool_name} serves {ref.model} as {ref.served_name!r} "
                    f"(InferenceServer {ref.name}); this server would serve it as {me.served_name!r}")
    accepted = [o for o in others if not o.refused]
    ports = {p for m in (me, *accepted) for p in m.ports}
    if len(ports) > MAX_TARGET_PORTS:
        return (f"routing.inferencePool: pool {pool_name} would need {len(ports)} target ports for its servers' "
                f"ranks; an InferencePool holds at most {MAX_TARGET_PORTS}")
    return None


def pod_context(status: InferenceServerStatus, attempt: int | None) -> int | None:
    """Tokens a pod of ``attempt`` holds: that attempt's effective context, lowered to the engine's report
    (``capacity_tokens``: served context, KV pool tokens, concurrency x context) when ``status.observed`` is
    of that attempt; None when the attempt is unknown."""
    if attempt is None or not 1 <= attempt <= len(status.attempts):
        return None
    tokens = status.attempts[attempt - 1].effective.context_length
    observed = status.observed
    if observed is not None and observed.attempt == attempt:
        capacity = capacity_tokens(observed)
        if capacity is not None and capacity > 0:
            tokens = min(tokens, capacity)
    return tokens


def _condition(out: Outcome, kind: ConditionType, status: ConditionStatus, reason: Reason, message: str,
               now: str, generation: int) -> None:
    """Set a routing condition (``status.set_condition``); an Event when it changed (Warning when False)."""
    set_condition(out, kind, status, reason, message, now, generation,
                  EventNote("Warning" if status == "False" else "Normal", reason, message))


def drop_conditions(out: Outcome) -> None:
    """A server without a pool carries no routing conditions."""
    drop_condition(out, ConditionType.INFERENCE_POOL)
    drop_condition(out, ConditionType.POOL_CONTEXT_COVERED)


def _members(me: MemberView, others: tuple[MemberView, ...]) -> list[PoolMember]:
    return [PoolMember(server=m.name, gpu_product=m.gpu_product, context_length=m.context_length,
                       target_context_length=m.target, ready_replicas=m.ready_replicas)
            for m in sorted((me, *(o for o in others if not o.refused)), key=lambda m: m.name)]


def _covered(out: Outcome, pool_name: str, me: MemberView, others: tuple[MemberView, ...], now: str,
             generation: int) -> None:
    st = out.status
    everyone = [me, *(o for o in others if not o.refused)]
    promises = [m for m in everyone if m.target]
    if not promises or st.routing is None:
        return
    longest = max(promises, key=lambda m: (m.target or 0, m.name))
    serving = [m for m in everyone if m.ready_replicas > 0 and m.context_length]
    best = max(serving, key=lambda m: (m.context_length or 0, m.name)) if serving else None
    st.routing.pool_target_context_length = longest.target
    st.routing.pool_max_context_length = best.context_length if best else None
    if best is not None and (best.context_length or 0) >= (longest.target or 0):
        _condition(out, ConditionType.POOL_CONTEXT_COVERED, "True", Reason.CONTEXT_COVERED,
                   f"a Ready replica of pool {pool_name} ({best.name}) holds its longest promised context "
                   f"{longest.target} tokens", now, generation)
        return
    held = (f"the longest a Ready replica holds is {best.context_length} tokens ({best.name})" if best
            else "no server of the pool has a Ready replica")
    who = ", ".join(sorted(m.name for m in promises if m.target == longest.target))
    _condition(out, ConditionType.POOL_CONTEXT_COVERED, "False", Reason.NO_REPLICA_HOLDS_LONGEST_CONTEXT,
               f"no Ready replica of pool {pool_name} can take its longest context, {longest.target} tokens "
               f"(promised by {who}): {held}", now, generation)


def _drifted(desired: Mapping[str, Any], live: PoolView) -> bool:
    meta = desired["metadata"]
    return (dict(live.spec) != desired["spec"] or any(live.labels.get(k) != v for k, v in meta["labels"].items())
            or any(live.annotations.get(k) != v for k, v in meta["annotations"].items()))


@dataclass(frozen=True)
class ServerFacts:
    """This server as the routing pass reads it: identity, validated spec, the status being computed, pods."""

    name: str
    namespace: str
    uid: str
    created: str
    spec: InferenceServerSpec
    pods: tuple[PoolPod, ...]


def self_view(server: ServerFacts, st: InferenceServerStatus, context: int | None, ready: int) -> MemberView:
    spec = server.spec
    return MemberView(name=server.name, uid=server.uid, created=server.created,
                      creates=bool(spec.routing.inference_pool and spec.routing.inference_pool.creates),
                      model=spec.model.name, served_name=spec.routing.served_name(spec.model.name),
                      ports=server_ports(spec), gpu_product=st.node_product, context_length=context,
                      target=promised(spec, st), ready_replicas=ready)


def converge_routing(server: ServerFacts, out: Outcome, snap: RoutingSnapshot, *, now: str,
                     generation: int) -> None:
    """Set ``status.routing`` and the InferencePool / PoolContextCovered conditions of ``out``, and what to write:
    ``out.pool`` (apply), ``out.pool_delete`` ((name, uid) of a pool this server owns and no longer creates),
    ``out.pod_labels`` (label patches of live pods), Events, when to look again."""
    st = out.status
    spec = server.spec
    routing = spec.routing.inference_pool
    before = st.routing
    if before is not None and before.role == "Created" and snap.enabled and snap.api_served:
        new_name = routing.pool_name(server.name) if routing is not None and routing.creates else None
        live = snap.pools.get(before.pool)
        if before.pool != new_name and live is not None and live.owner_uid == server.uid and not live.deleting:
            out.pool_delete = (before.pool, live.uid)
    if routing is None:
        st.routing = None
        drop_conditions(out)
        return
    pool_name = routing.pool_name(server.name)
    cur = st.current_attempt
    pooled = [p for p in server.pods if p.labels.get(POOL_LABEL) == pool_name and not p.deleting]
    ready = sum(1 for p in pooled if p.ready)
    held = [t for p in pooled if p.ready and (t := pod_context(st, p.attempt)) is not None]
    # what the Ready pods hold (the shortest, if attempts overlap), else what the current attempt's pods will
    context = min(held) if held else (pod_context(st, cur.number) if cur is not None else None)
    st.routing = RoutingStatus(
        pool=pool_name, role="Created" if routing.creates else "Joined",
        served_model_name=spec.routing.served_name(spec.model.name), context_length=context,
        context_range=context_range(context) if context else None, target_ports=list(server_ports(spec)),
        ready_replicas=ready)
    if not snap.enabled:
        _condition(out, ConditionType.INFERENCE_POOL, "False", Reason.GATEWAY_DISABLED,
                   f"pool {pool_name}: the operator does not manage InferencePools (chart value gateway.enabled is "
                   "off); the pods carry the pool and context labels, nothing else is written", now, generation)
        return
    for pod in pooled:
        tokens = pod_context(st, pod.attempt)
        if tokens is None or pod.owner is None:
            continue
        want = context_labels(tokens)
        if any(pod.labels.get(k) != v for k, v in want.items()):
            out.pod_labels[pod.name] = (pod.owner, want)
    if snap.api_served is not True:
        _condition(out, ConditionType.INFERENCE_POOL, "False", Reason.POOL_CRD_MISSING,
                   f"pool {pool_name}: the API server serves no inference.networking.k8s.io/v1 InferencePool (install "
                   "the Gateway API Inference Extension CRDs); the server runs without a pool", now, generation)
        out.requeue(CRD_RECHECK_SECONDS)
        return
    others = tuple(m for m in snap.members.get(pool_name, ()) if m.uid != server.uid)
    me = self_view(server, st, context, ready)
    live = snap.pools.get(pool_name)
    if routing.creates:
        _created(server, out, pool_name, live, others, now, generation)
        st.routing.members = _members(me, others)
    else:
        _joined(server, out, pool_name, live, others, now, generation)
    _covered(out, pool_name, me, others, now, generation)


def _created(server: ServerFacts, out: Outcome, pool_name: str, live: PoolView | None,
             others: tuple[MemberView, ...], now: str, generation: int) -> None:
    if live is not None and live.owner_uid != server.uid:
        owner = f"{live.owner_kind} {live.owner_name}" if live.owner_kind else "no ownerReference (made by hand?)"
        _condition(out, ConditionType.INFERENCE_POOL, "False", Reason.POOL_NOT_OWNED,
                   f"InferencePool {pool_name} exists and is not this server's (controller: {owner}); ctxfit "
                   "writes only pools their server owns: join it, or create one of another name", now, generation)
        return
    joined = tuple(m.ports for m in others if not m.creates and not m.refused)
    desired = render_inference_pool(pool_input(server.name, server.namespace, server.uid, server.spec, joined))
    if live is None or live.deleting or _drifted(desired, live):
        out.pool = desired
        if live is not None and not live.deleting:
            out.events.append(EventNote("Normal", Reason.DRIFT_REVERTED,
                                        f"InferencePool {pool_name} differed from its rendering; applied again"))
    ports = ", ".join(str(p["number"]) for p in desired["spec"]["targetPorts"])
    servers = 1 + sum(1 for m in others if not m.creates and not m.refused)
    _condition(out, ConditionType.INFERENCE_POOL, "True", Reason.POOL_CREATED,
               f"InferencePool {pool_name} selects the serving pods of {servers} server(s) on port(s) {ports}",
               now, generation)


def _joined(server: ServerFacts, out: Outcome, pool_name: str, live: PoolView | None,
            others: tuple[MemberView, ...], now: str, generation: int) -> None:
    if live is None or live.deleting:
        creator = next((m.name for m in others if m.creates), None)
        hint = f" (InferenceServer {creator} creates it)" if creator else " (no InferenceServer creates it)"
        _condition(out, ConditionType.INFERENCE_POOL, "False", Reason.POOL_NOT_FOUND,
                   f"InferencePool {pool_name} does not exist{hint}; the server's pods join it when it does",
                   now, generation)
        return
    if not live.by_server:
        labels = {**server.spec.pod.labels, **common_labels(server.name, server.spec.engine.kind),
                  POOL_LABEL: pool_name}
        if not live.selects(labels):
            selector = dict(live.spec.get("selector") or {})
            _condition(out, ConditionType.INFERENCE_POOL, "False", Reason.POOL_SELECTOR_MISMATCH,
                       f"InferencePool {pool_name} (not made by ctxfit) selects {selector}, which this server's "
                       "pods do not carry: add those labels to spec.pod.labels", now, generation)
            return
    missing = sorted(set(server_ports(server.spec)) - set(live.ports()))
    if missing:
        status: ConditionStatus = "Unknown" if live.by_server else "False"
        who = f"its creator {live.owner_name} adds them on its next pass" if live.by_server else \
            "add them to the pool's targetPorts"
        _condition(out, ConditionType.INFERENCE_POOL, status,
                   Reason.POOL_JOINED if live.by_server else Reason.POOL_SELECTOR_MISMATCH,
                   f"InferencePool {pool_name} lacks this server's port(s) {', '.join(map(str, missing))}: {who}",
                   now, generation)
        return
    _condition(out, ConditionType.INFERENCE_POOL, "True", Reason.POOL_JOINED,
               f"joined InferencePool {pool_name}" + (f" (created by {live.owner_name})" if live.by_server else ""),
               now, generation)


def pool_pods(server: str, pods: Iterable[PodView]) -> tuple[PoolPod, ...]:
    """The routing pass's view of a server's engine pods: attempt, readiness, routing labels, and the owner name
    when the pod's controller is the server's own ReplicaSet (``<server>-<pod-template-hash>``) or
    LeaderWorkerSet leader StatefulSet (``<server>``)."""
    out = []
    for pod in pods:
        facts = pod.facts
        owner = None
        if facts.owner_replicaset is not None and facts.owner_replicaset == f"{server}-{facts.template_label}":
            owner = facts.owner_replicaset
        elif facts.owner_statefulset == server:
            owner = facts.owner_statefulset
        out.append(PoolPod(name=pod.name, attempt=pod.attempt, ready=pod.ready, deleting=pod.deleting,
                           labels=dict(pod.routing_labels), owner=owner))
    return tuple(out)


def refusal(name: str, uid: str, created: str, spec: InferenceServerSpec, snap: RoutingSnapshot | None) -> str | None:
    """Why this server may not join its pool (``pool_refusal``), None when it may or nothing is known."""
    routing = spec.routing.inference_pool
    if snap is None or routing is None or not snap.enabled:
        return None
    pool_name = routing.pool_name(name)
    facts = ServerFacts(name=name, namespace="", uid=uid, created=created, spec=spec, pods=())
    me = self_view(facts, InferenceServerStatus(), None, 0)
    others = tuple(m for m in snap.members.get(pool_name, ()) if m.uid != uid)
    return pool_refusal(me, others, snap.pools.get(pool_name), pool_name)
