"""Edge cases of the multi-node restart budget (``controller/converge/group_restarts.py``) an SRE running several groups
meets: several groups disrupted by one maintenance, a group scaled away and back, timestamps of other formats."""

from __future__ import annotations

from dataclasses import replace

from ctxfit.api.status import Reason
from ctxfit.api.status_check import read_status
from ctxfit.controller.converge.flow import converge
from ctxfit.controller.views.pods import PodView

from tests.unit.controller.converge.test_converge_group import group_spec, member
from tests.unit.controller.converge.test_flow import applied, snapshot
from tests.unit.controller.converge.test_group_restarts import BUDGET_2, NODES, events, step


def of_group(index: int, attempt: int, leader_uid: str, *, ready: bool = False) -> tuple[PodView, ...]:
    """Leader ``kimi-<index>`` (uid ``leader_uid``) and worker ``kimi-<index>-1`` of LWS group ``index``."""
    pods = (member(attempt, f"kimi-{index}", ready=ready, uid=leader_uid),
            member(attempt, f"kimi-{index}-1", ready=ready, uid=f"{leader_uid}-worker"))
    return tuple(replace(p, facts=replace(p.facts, group_index=index)) for p in pods)


def test_one_recreation_of_each_of_several_groups_is_within_a_per_group_budget() -> None:
    """replicas 3, budget 2: a rolling node maintenance recreates each group once while the others are still
    coming up. No group was recreated more than the budget: the server must not end Failed (and scale to 0)."""
    body = group_spec(replicas=3)
    start = converge(snapshot(body, nodes=NODES), BUDGET_2, never_called)
    first = {g: f"g{g}-a" for g in range(3)}
    out = step(body, start, sum((of_group(g, 1, first[g]) for g in range(3)), ()), 10)
    for seconds, recreated in ((30, 0), (50, 1), (70, 2)):
        first[recreated] = f"g{recreated}-b"
        out = step(body, out, sum((of_group(g, 1, first[g]) for g in range(3)), ()), seconds,
                   deployment=applied(start))
        assert len(events(out, Reason.GROUP_RECREATED)) == 1
    assert out.status.phase is not None and out.status.phase.value == "Starting"
    assert out.status.attempts[0].group_restarts == 1, "the most any one group was recreated"


def test_a_group_recreated_past_the_budget_among_healthy_groups_still_ends_failed() -> None:
    body = group_spec(replicas=2)
    start = converge(snapshot(body, nodes=NODES), BUDGET_2, never_called)
    out = step(body, start, of_group(0, 1, "a0") + of_group(1, 1, "u0"), 10)
    for i in range(1, 4):
        out = step(body, out, of_group(0, 1, "a0", ready=True) + of_group(1, 1, f"u{i}"), 10 + 20 * i,
                   deployment=applied(start))
    assert out.status.phase is not None and out.status.phase.value == "Failed"
    assert out.status.attempts[0].group_restarts == 3


def never_called(pod: PodView, restarts: int) -> object:
    raise AssertionError(f"diagnose must not be called for {pod.name}")


def test_leaders_stored_without_a_per_group_count_keep_the_attempts_count() -> None:
    """Status written by an operator before ``groupLeaders[].restarts`` existed: nothing counted is lost."""
    body = group_spec()
    start = converge(snapshot(body, nodes=NODES), BUDGET_2, never_called)
    out = step(body, start, of_group(0, 1, "a"), 10)
    out = step(body, out, of_group(0, 1, "b"), 30, deployment=applied(start))
    out = step(body, out, of_group(0, 1, "c"), 50, deployment=applied(start))
    wire = out.status.to_wire()
    assert wire["attempts"][0]["groupRestarts"] == 2  # type: ignore[index]
    del wire["attempts"][0]["groupLeaders"][0]["restarts"]  # type: ignore[index]
    legacy, problem = read_status(wire)
    assert problem is None
    out.status = legacy
    out = step(body, out, of_group(0, 1, "d"), 70, deployment=applied(start))
    assert out.status.attempts[0].group_restarts == 3
    assert out.status.phase is not None and out.status.phase.value == "Failed"


def test_the_event_names_the_count_of_the_group_recreated() -> None:
    body = group_spec(replicas=2)
    start = converge(snapshot(body, nodes=NODES), BUDGET_2, never_called)
    out = step(body, start, of_group(0, 1, "a0") + of_group(1, 1, "b0"), 10)
    out = step(body, out, of_group(0, 1, "a1") + of_group(1, 1, "b0"), 30, deployment=applied(start))
    out = step(body, out, of_group(0, 1, "a2") + of_group(1, 1, "b0"), 50, deployment=applied(start))
    out = step(body, out, of_group(0, 1, "a2") + of_group(1, 1, "b1"), 70, deployment=applied(start))
    (message,) = events(out, Reason.GROUP_RECREATED)
    assert message.startswith("the LeaderWorkerSet recreated group 1 of attempt 1 (new leader pod kimi-1 on h100-0): "
                              "1 recreation(s) without every pod Ready"), message
    assert out.status.attempts[0].group_restarts == 2


def test_a_group_scaled_away_and_back_is_a_new_group_not_a_recreation() -> None:
    """replicas 2 -> 1 -> 2 while the groups are still starting: group 1 of the scale-up is a new group (its old
    leader was removed by the scale-down), not one the LWS controller recreated."""
    body = group_spec(replicas=2)
    start = converge(snapshot(body, nodes=NODES), BUDGET_2, never_called)
    out = step(body, start, of_group(0, 1, "a") + of_group(1, 1, "b"), 10)
    one = dict(body, replicas=1)
    out = step(one, out, of_group(0, 1, "a"), 30, deployment=replace(applied(start), replicas=1))
    assert [g.group for g in out.status.attempts[0].group_leaders or []] == [0], "group 1 is gone"
    out = step(body, out, of_group(0, 1, "a") + of_group(1, 1, "c"), 50, deployment=applied(start))
    assert not events(out, Reason.GROUP_RECREATED) and not out.status.attempts[0].group_restarts


def test_creation_times_of_other_rfc3339_forms_compare_as_times() -> None:
    """A worker created after its leader is part of the incarnation whatever the RFC 3339 form (fractional
    seconds, an offset instead of ``Z``); a stored ``since`` without a zone is unreadable, not a crash."""
    body = group_spec()
    start = converge(snapshot(body, nodes=NODES), BUDGET_2, never_called)
    out = step(body, start, of_group(0, 1, "a"), 10)
    for leader_at, worker_at in (("2026-01-01T12:00:30Z", "2026-01-01T12:00:30.5Z"),
                                 ("2026-01-01T13:00:30+01:00", "2026-01-01T12:00:31Z")):
        leader, worker = of_group(0, 1, "b")
        pods = (replace(leader, created=leader_at), replace(worker, created=worker_at))
        seen = step(body, out, pods, 40, deployment=applied(start))
        assert [(g.uid, g.complete) for g in seen.status.attempts[0].group_leaders or []] == [("b", True)], leader_at
    naive = out.status.model_copy(deep=True)
    (naive.attempts[0].group_leaders or [])[0].since = "2026-01-01T12:00:10"
    out.status = naive
    later = step(body, out, of_group(0, 1, "c"), 40, deployment=applied(start))
    assert later.status.attempts[0].group_restarts == 1


def test_a_group_recreated_forever_before_its_worker_ever_runs_still_ends_failed() -> None:
    """The worker is evicted at once every time (e.g. a NoExecute taint only the leader tolerates): the operator
    never sees a complete incarnation, only new leaders beside a terminating worker. Past what one disruption's
    cascade can take (the old pods' termination grace), that is a recreation loop and must still end Failed."""
    body = group_spec()
    start = converge(snapshot(body, nodes=NODES), BUDGET_2, never_called)
    out = step(body, start, of_group(0, 1, "a"), 10)
    seconds = 10
    while out.status.phase is None or out.status.phase.value != "Failed":
        seconds += 5
        assert seconds < 600, "an endless recreate loop of incomplete groups never ended Failed"
        leader, worker = of_group(0, 1, f"x{seconds}")
        out = step(body, out, (leader, replace(worker, uid=f"w{seconds}", deleting=True)), seconds,
                   deployment=applied(start))
    assert out.status.attempts[0].group_restarts == 3


def test_an_autoscaled_group_recreated_forever_beside_a_ready_one_still_ends_failed() -> None:
    """With ``spec.autoscaling`` one Ready group makes the server Ready; that must not start the count of
    another group over: group 1 recreated every 20 s while group 0 serves is still a loop and ends Failed."""
    body = group_spec(autoscaling={"minReplicas": 1, "maxReplicas": 4})
    start = converge(snapshot(body, nodes=NODES), BUDGET_2, never_called)
    two = replace(applied(start), replicas=2)  # the autoscaler's HPA scaled the LeaderWorkerSet to 2 groups
    out = step(body, start, of_group(0, 1, "a", ready=True) + of_group(1, 1, "u0"), 10, deployment=two)
    seconds = 10
    while out.status.attempts[0].outcome.value != "Failed":
        seconds += 20
        assert seconds < 400, "group 1 was recreated forever without ending Failed"
        out = step(body, out, of_group(0, 1, "a", ready=True) + of_group(1, 1, f"u{seconds}"), seconds,
                   deployment=two)
    assert (out.status.attempts[0].group_leaders or [])[1].restarts == 3


def test_legacy_leaders_inherit_the_attempts_count_once_not_every_later_count() -> None:
    """Two groups stored by an older operator (no per-group count, ``groupRestarts`` 1): group 0 recreated twice
    more ends at 3 while group 1 stays at the 1 it inherited."""
    body = group_spec(replicas=2)
    start = converge(snapshot(body, nodes=NODES), BUDGET_2, never_called)
    out = step(body, start, of_group(0, 1, "a0") + of_group(1, 1, "b0"), 10)
    out = step(body, out, of_group(0, 1, "a1") + of_group(1, 1, "b0"), 30, deployment=applied(start))
    wire = out.status.to_wire()
    for leader in wire["attempts"][0]["groupLeaders"]:  # type: ignore[index]
        del leader["restarts"]
    out.status, problem = read_status(wire)
    assert problem is None and out.status.attempts[0].group_restarts == 1
    out = step(body, out, of_group(0, 1, "a2") + of_group(1, 1, "b0"), 50, deployment=applied(start))
    assert [g.restarts for g in out.status.attempts[0].group_leaders or []] == [2, 1]
    out = step(body, out, of_group(0, 1, "a2") + of_group(1, 1, "b1"), 70, deployment=applied(start))
    assert [g.restarts for g in out.status.attempts[0].group_leaders or []] == [2, 2]
    assert out.status.phase is not None and out.status.phase.value == "Starting"
