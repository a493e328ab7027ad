"""The restart budget of a multi-node group (``converge/group_restarts.py``): recreations by the LWS controller
are counted per attempt in status, a rollout or an engine failure is not one, Ready starts the count over, and
a group recreated past the budget ends Failed; a deleting group pod that crashed is still read."""

from __future__ import annotations

from dataclasses import replace
from datetime import timedelta

from ctxfit.api.status import AttemptOutcome, ConditionType, Reason
from ctxfit.api.status_check import read_status
from ctxfit.controller.converge import converge
from ctxfit.controller.converge.group_restarts import RECREATION_WINDOW_SECONDS
from ctxfit.controller.converge.waiting import attempt_pods
from ctxfit.controller.settings import Settings
from ctxfit.controller.views.pods import PodView

from tests.unit.controller.builders import (
    BUDGET_2,
    GROUP_KV_FAILURE,
    NODES,
    NOW,
    applied,
    diagnosed,
    events,
    group,
    group_spec,
    member,
    never,
    pod,
    snapshot,
    spec,
    step,
    stored,
)


def test_a_group_recreated_past_the_budget_ends_failed_and_scales_to_zero() -> None:
    body = group_spec()
    start = converge(snapshot(body, nodes=NODES), BUDGET_2, never)
    first = step(body, start, group(1, "a"), 10)
    assert first.status.attempts[0].group_restarts is None, "the first incarnation is no recreation"
    assert [g.uid for g in first.status.attempts[0].group_leaders or []] == ["a"]
    outs = [first]
    for i, uid in enumerate(("b", "c"), start=1):
        out = step(body, outs[-1], group(1, uid), 10 + 10 * i, deployment=applied(start))
        assert out.status.attempts[0].group_restarts == i
        assert out.status.phase is not None and out.status.phase.value == "Starting"
        (message,) = events(out, Reason.GROUP_RECREATED)
        assert message == (f"the LeaderWorkerSet recreated group 0 of attempt 1 (new leader pod kimi-0 on h100-0): "
                           f"{i} recreation(s) without every pod Ready; budget 2 (CTXFIT_GROUP_RESTART_BUDGET)")
        outs.append(out)
    again = step(body, outs[-1], group(1, "c"), 40, deployment=applied(start))
    assert again.status.attempts[0].group_restarts == 2 and not again.events, "the same leader is counted once"
    final = step(body, again, group(1, "d"), 50, deployment=applied(start))
    attempt = final.status.attempts[0]
    assert attempt.group_restarts == 3 and attempt.outcome is AttemptOutcome.FAILED and attempt.pod == "kimi-0"
    assert final.finished == [attempt] and len(final.status.attempts) == 1, "no further attempt"
    ready = final.status.condition(ConditionType.READY)
    assert ready is not None and ready.reason is Reason.GROUP_RESTARTS_EXHAUSTED
    assert final.status.phase is not None and final.status.phase.value == "Failed"
    (message,) = events(final, Reason.GROUP_RESTARTS_EXHAUSTED)
    assert message.startswith("the LeaderWorkerSet recreated group 0 of attempt 1 (new leader pod kimi-0 on h100-0): "
                              "3 recreation(s) without every pod Ready; recreated more than 2 times")
    assert message.endswith("no further attempts, scaled to 0")
    assert final.deployment is not None and final.deployment["spec"]["replicas"] == 0
    after = step(body, final, group(1, "e"), 60, deployment=applied(final))
    assert after.status.attempts[0].group_restarts == 3 and after.deployment is None, "Failed stays Failed"


def test_the_default_budget_is_three_recreations() -> None:
    body = group_spec()
    settings = Settings(backoff_seconds=10, metrics_port=0, health_port=0)
    start = converge(snapshot(body, nodes=NODES), settings, never)
    out = step(body, start, group(1, "u0"), 10, settings)
    for i in range(1, 5):
        out = step(body, out, group(1, f"u{i}"), 10 + 10 * i, settings, deployment=applied(start))
        assert (out.status.phase is not None and out.status.phase.value == "Failed") is (i == 4), i


def test_a_rollout_to_a_new_template_revision_is_not_a_recreation() -> None:
    """ctxfit's own template change (or a reverted hand edit) rolls the group: new leader, new revision."""
    body = group_spec()
    start = converge(snapshot(body, nodes=NODES), BUDGET_2, never)
    out = step(body, start, group(1, "a", revision="rev-1"), 10)
    out = step(body, out, group(1, "b", revision="rev-2"), 20, deployment=applied(start))
    out = step(body, out, group(1, "c", revision="rev-1"), 30, deployment=applied(start))
    assert out.status.attempts[0].group_restarts is None and not events(out, Reason.GROUP_RECREATED)
    assert [(g.uid, g.revision) for g in out.status.attempts[0].group_leaders or []] == [("c", "rev-1")]


def test_a_ready_group_starts_the_count_over() -> None:
    body = group_spec()
    start = converge(snapshot(body, nodes=NODES), BUDGET_2, never)
    out = step(body, start, group(1, "a"), 10)
    out = step(body, out, group(1, "b"), 20, deployment=applied(start))
    out = step(body, out, group(1, "c"), 30, deployment=applied(start))
    assert out.status.attempts[0].group_restarts == 2
    out = step(body, out, group(1, "c", ready=True), 40, deployment=applied(start))
    assert out.status.phase is not None and out.status.phase.value == "Ready"
    assert out.status.attempts[0].group_restarts == 0
    for i, uid in enumerate(("d", "e"), start=1):  # recreated again later (e.g. a node lost): counted afresh
        out = step(body, out, group(1, uid), 40 + 10 * i, deployment=applied(start))
        assert out.status.attempts[0].group_restarts == i and out.status.phase.value == "Starting"


def test_an_engine_failure_is_a_step_down_not_a_recreation() -> None:
    """The recreated group's old worker, already being deleted by the LWS controller, shows the KV-cache crash
    (its container restarted): read as for one pod, the attempt steps down once."""
    body = group_spec(context={"target": 262144, "minimum": 32768, "headroom": 0.25})
    start = converge(snapshot(body, nodes=NODES), BUDGET_2, never)
    out = step(body, start, group(1, "a"), 10)
    crashed = member(1, "kimi-0-1", terminated="Error", uid="a-worker", deleting=True)
    assert crashed.restart_count == 1 and crashed.deleting
    diagnose = diagnosed(GROUP_KV_FAILURE)
    pods = (member(1, "kimi-0", uid="b"), crashed)
    failed = converge(snapshot(body, stored(out.status), pods=pods, nodes=NODES, deployment=applied(start),
                               now=NOW + timedelta(seconds=20)), BUDGET_2, diagnose)
    assert diagnose.calls == ["kimi-0-1"]
    first, second = failed.status.attempts
    assert first.failure_kind == "KVCacheTooSmall" and first.pod == "kimi-0-1" and first.group_restarts is None
    assert second.effective.context_length <= 178752 and not events(failed, Reason.GROUP_RECREATED)


def test_a_deleting_pod_counts_only_with_crash_evidence() -> None:
    shows = member(1, "kimi-0-1", terminated="Error", deleting=True)
    rolled = member(1, "kimi-0-1", deleting=True)  # a rollout or a deletion: no restart, no termination
    plain = pod(1, terminated="Error", deleting=True)  # a Deployment's pod being deleted: unchanged
    live, _ = attempt_pods([shows, rolled], "kimi", 1, None, {"h100-0", "h100-1"})
    assert live == [shows]
    assert attempt_pods([plain], "kimi", 1, None, {"rtx-0"}) == ([], [])


def test_single_node_servers_never_count() -> None:
    body = spec()
    start = converge(snapshot(body), BUDGET_2, never)
    out = converge(snapshot(body, stored(start.status), pods=(pod(1),), deployment=applied(start),
                            now=NOW + timedelta(seconds=10)), BUDGET_2, never)
    cur = out.status.attempts[0]
    assert cur.group_restarts is None and cur.group_leaders is None
    assert "groupLeaders" not in str(out.status.to_wire())


def test_a_spec_change_after_exhaustion_starts_a_fresh_attempt() -> None:
    body = group_spec()
    start = converge(snapshot(body, nodes=NODES), BUDGET_2, never)
    out = step(body, start, group(1, "u0"), 10)
    for i in range(1, 4):
        out = step(body, out, group(1, f"u{i}"), 10 + 10 * i, deployment=applied(start))
    assert out.status.phase is not None and out.status.phase.value == "Failed"
    same = step(body, out, (), 45, deployment=applied(out))
    assert same.status.phase is not None and same.status.phase.value == "Failed", "same generation: stays Failed"
    edited = dict(body, pod={"tolerations": [{"key": "gpu", "operator": "Exists"}]})
    reopened = step(edited, out, (), 50, deployment=applied(out), generation=2)
    assert [a.outcome for a in reopened.status.attempts] == [AttemptOutcome.FAILED, AttemptOutcome.RUNNING]
    second = reopened.status.attempts[1]
    assert second.number == 2 and second.group_restarts is None
    assert second.effective == reopened.status.attempts[0].effective
    assert events(reopened, Reason.REOPENED) == ["spec changed (generation 2) after GroupRestartsExhausted: "
                                                 "starting attempt 2"]
    assert reopened.deployment is not None and reopened.deployment["spec"]["replicas"] == 1


def test_stored_counts_are_bounded() -> None:
    status = converge(snapshot(group_spec(), nodes=NODES), BUDGET_2, never).status.to_wire()
    status["attempts"][0]["groupRestarts"] = -1  # type: ignore[index]
    fresh, problem = read_status(status)
    assert problem is not None and "groupRestarts" in problem and not fresh.attempts


def test_a_cascade_of_recreations_before_the_group_is_complete_counts_once() -> None:
    """One eviction: the LWS controller recreates the group (leader "b"), then again while the old worker is
    still terminating (leader "c", no worker of its own yet): one disruption, one count. Once "c"'s worker
    exists the group is complete, and its next recreation counts again."""
    body = group_spec()
    start = converge(snapshot(body, nodes=NODES), BUDGET_2, never)
    out = step(body, start, group(1, "a"), 10)
    assert [g.complete for g in out.status.attempts[0].group_leaders or []] == [True]
    old_worker = member(1, "kimi-0-1", uid="a-worker", deleting=True)
    out = step(body, out, (member(1, "kimi-0", uid="b"), old_worker), 20, deployment=applied(start))
    assert out.status.attempts[0].group_restarts == 1 and len(events(out, Reason.GROUP_RECREATED)) == 1
    assert [g.complete for g in out.status.attempts[0].group_leaders or []] == [False]
    out = step(body, out, (member(1, "kimi-0", uid="c"), old_worker), 21, deployment=applied(start))
    assert out.status.attempts[0].group_restarts == 1 and not events(out, Reason.GROUP_RECREATED), \
        "an incomplete incarnation replaced is the same disruption"
    out = step(body, out, group(1, "c"), 30, deployment=applied(start))
    assert out.status.attempts[0].group_restarts == 1
    assert [(g.uid, g.complete) for g in out.status.attempts[0].group_leaders or []] == [("c", True)]
    out = step(body, out, group(1, "d"), 40, deployment=applied(start))
    assert out.status.attempts[0].group_restarts == 2 and len(events(out, Reason.GROUP_RECREATED)) == 1


def test_a_worker_older_than_its_leader_is_not_part_of_the_incarnation() -> None:
    """A worker created before the leader (left over from the previous incarnation, not yet marked deleting)
    does not make the new incarnation complete."""
    body = group_spec()
    start = converge(snapshot(body, nodes=NODES), BUDGET_2, never)
    out = step(body, start, group(1, "a"), 10)
    leader = replace(member(1, "kimi-0", uid="b"), created="2026-01-01T00:00:30Z")
    stale = replace(member(1, "kimi-0-1", uid="a-worker"), created="2026-01-01T00:00:05Z")
    out = step(body, out, (leader, stale), 30, deployment=applied(start))
    assert [(g.uid, g.complete) for g in out.status.attempts[0].group_leaders or []] == [("b", False)]


def test_leaders_stored_before_completeness_was_recorded_count_as_complete() -> None:
    body = group_spec()
    start = converge(snapshot(body, nodes=NODES), BUDGET_2, never)
    out = step(body, start, group(1, "a"), 10)
    wire = out.status.to_wire()
    del wire["attempts"][0]["groupLeaders"][0]["complete"]  # type: ignore[index]
    legacy, problem = read_status(wire)
    assert problem is None and (legacy.attempts[0].group_leaders or [])[0].complete is None
    out.status = legacy
    out = step(body, out, group(1, "b"), 20, deployment=applied(start))
    assert out.status.attempts[0].group_restarts == 1


def test_recreations_within_the_window_count_once_and_a_fast_loop_still_ends() -> None:
    """Complete incarnations seconds apart (the LWS controller reacting to one deletion again, pods gone at once)
    are one disruption; a group recreated every 2 s forever is counted once per window and ends Failed."""
    body = group_spec()
    start = converge(snapshot(body, nodes=NODES), BUDGET_2, never)
    out = step(body, start, group(1, "a"), 10)
    out = step(body, out, group(1, "b"), 20, deployment=applied(start))
    out = step(body, out, group(1, "c"), 22, deployment=applied(start))
    assert out.status.attempts[0].group_restarts == 1 and not events(out, Reason.GROUP_RECREATED)
    assert (out.status.attempts[0].group_leaders or [])[0].since == "2026-01-01T12:00:20Z", "b opened it"
    out = step(body, out, group(1, "d"), 20 + RECREATION_WINDOW_SECONDS, deployment=applied(start))
    assert out.status.attempts[0].group_restarts == 2
    seconds = 20 + RECREATION_WINDOW_SECONDS
    while out.status.phase is not None and out.status.phase.value != "Failed":
        seconds += 2
        assert seconds < 200, "a fast loop ends within a few windows"
        out = step(body, out, group(1, f"x{seconds}"), seconds, deployment=applied(start))
    assert out.status.attempts[0].group_restarts == 3
    assert seconds >= 20 + 2 * RECREATION_WINDOW_SECONDS


# Edge cases an SRE running several groups meets.

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
