"""The restart budget of a multi-node group (``converge/group_restarts.py``): recreations by the LWS controller
are counted per attempt in status, a rollout or an engine failure is not one, Ready starts the count over, and
a group recreated past the budget ends Failed; a deleting group pod that crashed is still read (issue 13)."""

from __future__ import annotations

from dataclasses import replace
from datetime import timedelta
from typing import Any

from ctxfit.api.status import AttemptOutcome, ConditionType, InferenceServerStatus, Reason
from ctxfit.api.status_check import read_status
from ctxfit.controller.converge.flow import Outcome, converge
from ctxfit.controller.converge.group_restarts import RECREATION_WINDOW_SECONDS
from ctxfit.controller.converge.waiting import attempt_pods
from ctxfit.controller.settings import Settings
from ctxfit.controller.views.pods import DeploymentView, PodView

from tests.unit.controller.converge.test_converge_group import H100_0, H100_1, KV_FAILURE, group_spec, member
from tests.unit.controller.converge.test_flow import NOW, applied, diagnosed, never, pod, snapshot, spec

BUDGET_2 = Settings(backoff_seconds=10, metrics_port=0, health_port=0, group_restart_budget=2)
NODES = (H100_0, H100_1)
NOW_STAMP = NOW.strftime("%Y-%m-%dT%H:%M:%SZ")


def group(attempt: int, leader_uid: str, *, ready: bool = False, revision: str = "rev-1") -> tuple[PodView, ...]:
    """Leader (uid ``leader_uid``) and worker of group 0; a new leader uid is a new incarnation of the group."""
    return (member(attempt, "kimi-0", ready=ready, uid=leader_uid, revision=revision),
            member(attempt, "kimi-0-1", ready=ready, uid=f"{leader_uid}-worker", revision=revision))


def stored(status: InferenceServerStatus) -> InferenceServerStatus:
    """``status`` written and read back as the operator does (what survives an operator restart)."""
    back, problem = read_status(status.to_wire())
    assert problem is None, problem
    return back


def step(body: dict[str, Any], before: Outcome, pods: tuple[PodView, ...], seconds: int, settings: Settings = BUDGET_2,
         deployment: DeploymentView | None = None, generation: int = 1) -> Outcome:
    """One pass ``seconds`` after NOW; pods without an explicit creation time were created at that moment."""
    at = (NOW + timedelta(seconds=seconds)).strftime("%Y-%m-%dT%H:%M:%SZ")
    pods = tuple(replace(p, created=at) if p.created == NOW_STAMP else p for p in pods)
    return converge(snapshot(body, stored(before.status), pods=pods, nodes=NODES,
                             deployment=deployment or applied(before), now=NOW + timedelta(seconds=seconds),
                             generation=generation), settings, never)


def events(out: Outcome, reason: Reason) -> list[str]:
    return [e.message for e in out.events if e.reason is reason]


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
    diagnose = diagnosed(KV_FAILURE)
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
