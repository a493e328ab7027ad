"""Which failed pod of a group is diagnosed (``converge/groups.py::most_telling_failure``): a worker's KV-cache
error that takes the leader down with a collective-communication error is the failure, not the leader's
Unknown (issue 13 item 4: read every pod of the group)."""

from __future__ import annotations

from dataclasses import replace
from datetime import timedelta

from ctxfit.controller.converge.flow import converge
from ctxfit.controller.converge.groups import most_telling_failure
from ctxfit.controller.views.pods import PodView, Termination
from ctxfit.vocab.kinds import Failure, FailureKind

from tests.unit.controller.converge.test_converge_group import H100_0, H100_1, KV_FAILURE, group_spec, member
from tests.unit.controller.converge.test_flow import NOW, applied, never, snapshot
from tests.unit.controller.converge.test_group_restarts import BUDGET_2, stored

NCCL = Failure(FailureKind.UNKNOWN, {}, "torch.distributed.DistBackendError: NCCL error: remote process exited")


def ended(pod: PodView, at: str) -> PodView:
    assert pod.termination is not None
    return replace(pod, termination=replace(pod.termination, finished_at=at))


def by_name(failures: dict[str, Failure]) -> tuple[list[str], object]:
    calls: list[str] = []

    def diagnose(pod: PodView, restarts: int) -> Failure:
        calls.append(pod.name)
        return failures[pod.name]
    return calls, diagnose


def test_a_known_kind_beats_unknown_whatever_the_order() -> None:
    leader = ended(member(1, "kimi-0", terminated="Error"), "2026-01-01T12:00:05Z")
    worker = ended(member(1, "kimi-0-1", terminated="Error"), "2026-01-01T12:00:09Z")
    calls, diagnose = by_name({"kimi-0": NCCL, "kimi-0-1": KV_FAILURE})
    pod, failure = most_telling_failure([leader, worker], diagnose)  # type: ignore[arg-type]
    assert (pod.name, failure.kind) == ("kimi-0-1", FailureKind.KV_CACHE_TOO_SMALL)
    assert sorted(calls) == ["kimi-0", "kimi-0-1"], "each failed pod read once"


def test_between_equally_telling_failures_the_first_to_end_is_the_cause() -> None:
    leader = ended(member(1, "kimi-0", terminated="Error"), "2026-01-01T12:00:09Z")
    worker = ended(member(1, "kimi-0-1", terminated="Error"), "2026-01-01T12:00:05Z")
    _, diagnose = by_name({"kimi-0": NCCL, "kimi-0-1": NCCL})
    assert most_telling_failure([leader, worker], diagnose)[0].name == "kimi-0-1"  # type: ignore[arg-type]
    no_time = replace(worker, termination=Termination("Error", 1, "boom", None))
    assert most_telling_failure([leader, no_time], diagnose)[0].name == "kimi-0"  # type: ignore[arg-type]


def test_the_group_steps_down_on_the_workers_kv_error_when_the_leader_fails_first_in_the_list() -> None:
    body = group_spec(context={"target": 262144, "minimum": 32768, "headroom": 0.25})
    start = converge(snapshot(body, nodes=(H100_0, H100_1)), BUDGET_2, never)
    pods = (ended(member(1, "kimi-0", terminated="Error", uid="a"), "2026-01-01T12:00:20Z"),
            ended(member(1, "kimi-0-1", terminated="Error", uid="a-worker"), "2026-01-01T12:00:19Z"))
    _, diagnose = by_name({"kimi-0": NCCL, "kimi-0-1": KV_FAILURE})
    out = converge(snapshot(body, stored(start.status), pods=pods, nodes=(H100_0, H100_1),
                            deployment=applied(start), now=NOW + timedelta(seconds=30)), BUDGET_2, diagnose)
    first, second = out.status.attempts
    assert (first.failure_kind, first.pod) == ("KVCacheTooSmall", "kimi-0-1")
    assert second.effective.context_length < first.effective.context_length
