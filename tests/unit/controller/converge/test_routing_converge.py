"""The routing pass, pure: pools created, kept and deleted; joins; the one-model rule; the pods'
context labels through a clamp and a step-down; whether a pool can take its longest promised context."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml
from ctxfit.api import InferenceServer, InferenceServerSpec
from ctxfit.api.observed import ObservedStatus
from ctxfit.api.status import Attempt, AttemptOutcome, ConditionType, EffectiveStatus, InferenceServerStatus, Reason
from ctxfit.budget.multinode import plan_group
from ctxfit.controller.converge.plan import plan_status
from ctxfit.controller.converge.routing import (
    CRD_RECHECK_SECONDS,
    ServerFacts,
    converge_routing,
    pod_context,
    pool_refusal,
    self_view,
)
from ctxfit.controller.converge.types import Outcome
from ctxfit.controller.views.routing import MemberView, PoolPod, PoolView, RoutingSnapshot, member_view, pool_view
from ctxfit.render.inferencepool import (
    CONTEXT_LABEL,
    CONTEXT_RANGE_LABEL,
    POOL_LABEL,
    pool_input,
    render_inference_pool,
)

GOLDEN = Path(__file__).resolve().parents[3] / "golden" / "gateway"
NOW = "2026-09-01T00:00:00Z"
UID = "uid-h200"


def _server(case: str) -> InferenceServer:
    return InferenceServer.model_validate(yaml.safe_load((GOLDEN / case / "inferenceserver.yaml").read_text()))


def _status(spec: InferenceServerSpec, contexts: tuple[int, ...] = (),
            product: str | None = None) -> InferenceServerStatus:
    result, _ = plan_group(spec)
    st = InferenceServerStatus(plan=plan_status(result, spec, None, 0.25), node_product=product or spec.gpu.product)
    for n, tokens in enumerate(contexts or (result.context_length,), start=1):
        eff = EffectiveStatus.of(result.effective.model_copy(update={"context_length": tokens}))
        st.attempts.append(Attempt(number=n, effective=eff, started_at=NOW, outcome=AttemptOutcome.SUCCEEDED))
    st.effective = st.attempts[-1].effective
    st.context_length = st.effective.context_length
    return st


def _pod(name: str, pool: str, attempt: int, tokens: int, ready: bool = True, owned: bool = True) -> PoolPod:
    return PoolPod(name=name, attempt=attempt, ready=ready, deleting=False, owner=f"{name}-rs" if owned else None,
                   labels={POOL_LABEL: pool, CONTEXT_RANGE_LABEL: f"0-{tokens}", CONTEXT_LABEL: str(tokens)})


def _facts(case: str, pods: tuple[PoolPod, ...] = (), uid: str = UID, spec: InferenceServerSpec | None = None
           ) -> ServerFacts:
    srv = _server(case)
    return ServerFacts(name=srv.metadata.name, namespace="team", uid=uid, created="2026-01-01T00:00:00Z",
                       spec=spec or srv.spec, pods=pods)


def _member(case: str, uid: str, created: str = "2026-02-01T00:00:00Z", context: int | None = None,
            ready: int = 1, **update: Any) -> MemberView:
    srv = _server(case)
    st = _status(srv.spec)
    facts = ServerFacts(name=srv.metadata.name, namespace="team", uid=uid, created=created, spec=srv.spec, pods=())
    view = self_view(facts, st, context or st.context_length, ready)
    return MemberView(**{**view.__dict__, **update})


def _live(doc: dict[str, Any]) -> PoolView:
    return pool_view(doc)


def _snap(pools: dict[str, PoolView] | None = None, members: tuple[MemberView, ...] = (), enabled: bool = True,
          api: bool | None = True, pool: str = "llama31-8b") -> RoutingSnapshot:
    return RoutingSnapshot(enabled=enabled, api_served=api, pools=pools or {}, members={pool: members})


def _run(facts: ServerFacts, st: InferenceServerStatus, snap: RoutingSnapshot, generation: int) -> Outcome:
    out = Outcome(status=st)
    converge_routing(facts, out, snap, now=NOW, generation=generation)
    return out


def _cond(st: InferenceServerStatus, kind: ConditionType) -> tuple[str, Reason, str]:
    c = st.condition(kind)
    assert c is not None, kind
    return c.status, c.reason, c.message


def test_create_renders_the_pool_and_keeps_it_free_of_drift() -> None:
    facts = _facts("vllm-single", (_pod("p1", "llama31-8b", 1, 131072),))
    st = _status(facts.spec)
    out = _run(facts, st, _snap(), 1)
    assert out.pool is not None and out.pool["metadata"]["ownerReferences"][0]["uid"] == UID
    assert _cond(st, ConditionType.INFERENCE_POOL)[:2] == ("True", Reason.POOL_CREATED)
    assert st.routing is not None and (st.routing.role, st.routing.context_length) == ("Created", 131072)
    assert [m.server for m in st.routing.members] == ["llama31-8b-h200"]
    same = _run(facts, _status(facts.spec), _snap({"llama31-8b": _live(out.pool)}), 1)
    assert same.pool is None  # nothing differs: no write
    edited = dict(out.pool, spec={**out.pool["spec"], "targetPorts": [{"number": 9999}]})
    again = _run(facts, _status(facts.spec), _snap({"llama31-8b": _live(edited)}), 1)
    assert again.pool == out.pool and [e.reason for e in again.events].count(Reason.DRIFT_REVERTED) == 1


def test_a_pool_owned_by_another_is_never_written() -> None:
    facts = _facts("vllm-single")
    foreign = render_inference_pool(pool_input("other", "team", "uid-other", facts.spec))
    foreign["metadata"]["name"] = "llama31-8b"
    st = _status(facts.spec)
    out = _run(facts, st, _snap({"llama31-8b": _live(foreign)}), 1)
    assert out.pool is None and out.pool_delete is None
    status, reason, message = _cond(st, ConditionType.INFERENCE_POOL)
    assert (status, reason) == ("False", Reason.POOL_NOT_OWNED) and "InferenceServer other" in message


def test_the_creator_lists_the_ports_of_the_servers_that_joined() -> None:
    facts = _facts("vllm-single")
    dp = _member("vllm-dp2", "uid-dp", creates=False)
    out = _run(facts, _status(facts.spec), _snap(members=(dp,)), 1)
    assert out.pool is not None and [p["number"] for p in out.pool["spec"]["targetPorts"]] == [8000, 8001]


def test_join_waits_for_the_pool_and_its_ports() -> None:
    facts = _facts("vllm-join-l4", uid="uid-l4")
    st = _status(facts.spec)
    creator = _member("vllm-single", UID, created="2026-03-01T00:00:00Z")
    _run(facts, st, _snap(members=(creator,)), 1)
    status, reason, message = _cond(st, ConditionType.INFERENCE_POOL)
    assert (status, reason) == ("False", Reason.POOL_NOT_FOUND) and "llama31-8b-h200 creates it" in message
    pool = _live(render_inference_pool(pool_input("llama31-8b-h200", "team", UID, _server("vllm-single").spec)))
    st = _status(facts.spec)
    out = _run(facts, st, _snap({"llama31-8b": pool}, (creator,)), 1)
    assert out.pool is None and _cond(st, ConditionType.INFERENCE_POOL)[:2] == ("True", Reason.POOL_JOINED)
    dp_facts = _facts("vllm-dp2", uid="uid-dp", spec=_server("vllm-dp2").spec.model_copy(update={
        "routing": facts.spec.routing}, deep=True))
    st = _status(dp_facts.spec)
    _run(dp_facts, st, _snap({"llama31-8b": pool}, (creator,)), 1)
    status, _, message = _cond(st, ConditionType.INFERENCE_POOL)
    assert status == "Unknown" and "lacks this server's port(s) 8001" in message


def test_a_hand_made_pool_must_select_the_pods() -> None:
    facts = _facts("vllm-join-l4", uid="uid-l4")
    hand = PoolView(name="llama31-8b", owner_kind=None, owner_name=None, owner_uid=None,
                    spec={"selector": {"matchLabels": {"app": "llama"}}, "targetPorts": [{"number": 8000}]},
                    labels={}, annotations={})
    st = _status(facts.spec)
    _run(facts, st, _snap({"llama31-8b": hand}), 1)
    assert _cond(st, ConditionType.INFERENCE_POOL)[:2] == ("False", Reason.POOL_SELECTOR_MISMATCH)
    labelled = facts.spec.model_copy(deep=True)
    labelled.pod.labels["app"] = "llama"
    st = _status(labelled)
    _run(_facts("vllm-join-l4", uid="uid-l4", spec=labelled), st, _snap({"llama31-8b": hand}), 1)
    assert _cond(st, ConditionType.INFERENCE_POOL)[:2] == ("True", Reason.POOL_JOINED)


def test_one_model_per_pool_names_the_other_server() -> None:
    l4 = _member("vllm-join-l4", "uid-l4", created="2026-01-01T00:00:00Z")
    creator = _member("vllm-single", UID, created="2026-05-01T00:00:00Z")
    assert pool_refusal(l4, (creator,), None, "llama31-8b") is None
    other_model = MemberView(**{**l4.__dict__, "model": "Qwen/Qwen3-32B"})
    why = pool_refusal(other_model, (creator,), None, "llama31-8b")
    assert why is not None and "InferenceServer llama31-8b-h200" in why and "Qwen/Qwen3-32B" in why
    renamed = MemberView(**{**l4.__dict__, "served_name": "llama"})
    why = pool_refusal(renamed, (creator,), None, "llama31-8b")
    assert why is not None and why.startswith("routing.servedModelName") and "'llama-3.1-8b'" in why
    # the creator is the reference even when younger; its own spec is never refused for a joiner
    assert pool_refusal(creator, (other_model,), None, "llama31-8b") is None
    # without a creator, the oldest member defines the pool; a refused member counts for nothing
    young = MemberView(**{**l4.__dict__, "uid": "uid-young", "name": "young", "created": "2026-09-01T00:00:00Z",
                          "model": "Qwen/Qwen3-32B"})
    assert pool_refusal(young, (l4,), None, "llama31-8b") is not None
    assert pool_refusal(l4, (young,), None, "llama31-8b") is None
    assert pool_refusal(young, (MemberView(**{**l4.__dict__, "refused": True}),), None, "llama31-8b") is None


def test_too_many_ports_for_one_pool_are_refused() -> None:
    me = _member("vllm-dp2", "uid-dp", ports=tuple(range(8000, 8005)))
    other = _member("vllm-single", UID, ports=tuple(range(8005, 8009)))
    why = pool_refusal(me, (other,), None, "llama31-8b")
    assert why is not None and "9 target ports" in why


def test_disabled_or_no_crd_writes_nothing_but_labels_stay_true() -> None:
    facts = _facts("vllm-single", (_pod("p1", "llama31-8b", 1, 131072),))
    st = _status(facts.spec)
    out = _run(facts, st, _snap(enabled=False), 1)
    assert (out.pool, out.pod_labels) == (None, {})
    assert _cond(st, ConditionType.INFERENCE_POOL)[:2] == ("False", Reason.GATEWAY_DISABLED)
    st = _status(facts.spec)
    out = _run(facts, st, _snap(api=False), 1)
    assert out.pool is None and out.requeue_after == CRD_RECHECK_SECONDS
    assert _cond(st, ConditionType.INFERENCE_POOL)[:2] == ("False", Reason.POOL_CRD_MISSING)
    assert st.routing is not None and st.routing.context_length == 131072


def test_a_clamp_relabels_the_running_pods_and_a_step_down_starts_new_ones_right() -> None:
    spec = _server("vllm-single").spec
    st = _status(spec, (131072,))
    st.observed = ObservedStatus(attempt=1, served_context_length=131072, kv_cache_tokens=70000)
    pods = (_pod("p1", "llama31-8b", 1, 131072), _pod("p2", "llama31-8b", 1, 131072, owned=False))
    out = _run(_facts("vllm-single", pods), st, _snap(), 1)
    assert out.pod_labels == {"p1": ("p1-rs", {CONTEXT_RANGE_LABEL: "0-70000", CONTEXT_LABEL: "70000"})}  # not p2
    assert st.routing is not None and (st.routing.context_length, st.routing.context_range) == (70000, "0-70000")
    stepped = _status(spec, (131072, 65536))
    stepped.observed = ObservedStatus(attempt=1, served_context_length=131072, kv_cache_tokens=70000)
    pods = (_pod("old", "llama31-8b", 1, 131072, ready=False), _pod("new", "llama31-8b", 2, 65536))
    out = _run(_facts("vllm-single", pods), stepped, _snap(), 1)
    assert out.pod_labels == {"old": ("old-rs", {CONTEXT_RANGE_LABEL: "0-70000", CONTEXT_LABEL: "70000"})}
    assert stepped.routing is not None and stepped.routing.context_length == 65536
    assert pod_context(stepped, 7) is None


def test_pool_context_covered_follows_the_longest_promise() -> None:
    facts = _facts("vllm-single", (_pod("p1", "llama31-8b", 1, 131072),))
    l4 = _member("vllm-join-l4", "uid-l4", context=24576, ready=2)
    st = _status(facts.spec)
    _run(facts, st, _snap(members=(l4,)), 1)
    assert _cond(st, ConditionType.POOL_CONTEXT_COVERED)[:2] == ("True", Reason.CONTEXT_COVERED)
    assert st.routing is not None and st.routing.pool_max_context_length == 131072
    stepped = _status(facts.spec, (131072, 65536))
    pods = (_pod("p2", "llama31-8b", 2, 65536),)
    _run(_facts("vllm-single", pods), stepped, _snap(members=(l4,)), 1)
    status, reason, message = _cond(stepped, ConditionType.POOL_CONTEXT_COVERED)
    assert (status, reason) == ("False", Reason.NO_REPLICA_HOLDS_LONGEST_CONTEXT)
    assert "131072 tokens (promised by llama31-8b-h200, llama31-8b-l4)" in message
    assert "65536 tokens (llama31-8b-h200)" in message
    down = _status(facts.spec)
    _run(_facts("vllm-single"), down, _snap(members=(_member("vllm-join-l4", "uid-l4", ready=0),)), 1)
    assert "no server of the pool has a Ready replica" in _cond(down, ConditionType.POOL_CONTEXT_COVERED)[2]


def test_leaving_a_created_pool_deletes_it_and_no_pool_means_no_routing_status() -> None:
    facts = _facts("vllm-single")
    st = _status(facts.spec)
    out = _run(facts, st, _snap(), 1)
    assert out.pool is not None
    live = {"llama31-8b": _live(out.pool)}
    joined = facts.spec.model_copy(update={"routing": _server("vllm-join-l4").spec.routing}, deep=True)
    out = _run(_facts("vllm-single", spec=joined), st, _snap(live), 2)
    assert out.pool_delete is not None and out.pool_delete[0] == "llama31-8b"
    assert st.routing is not None and st.routing.role == "Joined"
    gone = facts.spec.model_copy(update={"routing": _server("vllm-single").spec.routing.model_copy(
        update={"inference_pool": None})}, deep=True)
    st2 = _status(facts.spec)
    _run(facts, st2, _snap(), 1)
    out = _run(_facts("vllm-single", spec=gone), st2, _snap(live), 2)
    assert out.pool_delete is not None and out.pool_delete[0] == "llama31-8b" and st2.routing is None
    assert st2.condition(ConditionType.INFERENCE_POOL) is None
    assert st2.condition(ConditionType.POOL_CONTEXT_COVERED) is None


def test_member_view_reads_a_stored_server() -> None:
    srv = _server("vllm-join-l4")
    st = _status(srv.spec)
    st.routing = None
    body = {"metadata": {"name": srv.metadata.name, "uid": "u", "creationTimestamp": NOW},
            "spec": srv.to_wire()["spec"], "status": st.to_wire()}
    found = member_view(body)
    assert found is not None
    pool, view = found
    assert pool == "llama31-8b" and not view.creates and view.served_name == "llama-3.1-8b"
    assert view.target == 131072 and view.ports == (8000,)
    assert member_view({"metadata": {"name": "x"}, "spec": {"model": {}}}) is None
    plain = yaml.safe_load((GOLDEN / "vllm-single" / "inferenceserver.yaml").read_text())
    plain["spec"].pop("routing")
    assert member_view({"metadata": {"name": "x"}, "spec": plain["spec"]}) is None


@pytest.mark.parametrize("case", ["vllm-single", "sglang-lws-2x8"])
def test_pool_view_reads_owner_and_selector(case: str) -> None:
    srv = _server(case)
    doc = render_inference_pool(pool_input(srv.metadata.name, "team", UID, srv.spec))
    view = pool_view(doc)
    assert (view.owner_kind, view.owner_uid, view.by_server) == ("InferenceServer", UID, True)
    assert view.selects({POOL_LABEL: view.name}) and not view.selects({"x": "y"})
