"""Which failed pod of a group is diagnosed (``converge/groups.py::most_telling_failure``): a worker's KV-cache
error that takes the leader down with a collective-communication error is the failure, not the leader's
Unknown (every pod of the group is read)."""

from __future__ import annotations

from dataclasses import replace
from datetime import timedelta

from ctxfit.controller.converge import converge
from ctxfit.controller.converge.groups import most_telling_failure
from ctxfit.controller.views.pods import Termination
from ctxfit.vocab.kinds import FailureKind

from tests.unit.controller.builders import (
    BUDGET_2,
    GROUP_KV_FAILURE,
    H100_0,
    H100_1,
    NCCL,
    NOW,
    applied,
    by_name,
    ended,
    group_spec,
    member,
    never,
    snapshot,
    stored,
)


def test_a_known_kind_beats_unknown_whatever_the_order() -> None:
    leader = ended(member(1, "kimi-0", terminated="Error"), "2026-01-01T12:00:05Z")
    worker = ended(member(1, "kimi-0-1", terminated="Error"), "2026-01-01T12:00:09Z")
    calls, diagnose = by_name({"kimi-0": NCCL, "kimi-0-1": GROUP_KV_FAILURE})
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
    _, diagnose = by_name({"kimi-0": NCCL, "kimi-0-1": GROUP_KV_FAILURE})
    out = converge(snapshot(body, stored(start.status), pods=pods, nodes=(H100_0, H100_1),
                            deployment=applied(start), now=NOW + timedelta(seconds=30)), BUDGET_2, diagnose)
    first, second = out.status.attempts
    assert (first.failure_kind, first.pod) == ("KVCacheTooSmall", "kimi-0-1")
    assert second.effective.context_length < first.effective.context_length


# Edge cases: termination times in other RFC 3339 forms.

def test_the_first_to_end_is_found_whatever_the_rfc3339_form() -> None:
    """Termination times compare as times: fractional seconds or an offset instead of ``Z`` do not reorder them,
    and one without a zone ranks as unknown (last) instead of raising."""
    _, diagnose = by_name({"kimi-0": NCCL, "kimi-0-1": NCCL})
    for leader_at, worker_at in (("2026-01-01T12:00:05.900Z", "2026-01-01T12:00:05Z"),
                                 ("2026-01-01T13:00:05+01:00", "2026-01-01T12:00:04Z"),
                                 ("2026-01-01T12:00:05", "2026-01-01T12:00:09Z")):
        leader = ended(member(1, "kimi-0", terminated="Error"), leader_at)
        worker = ended(member(1, "kimi-0-1", terminated="Error"), worker_at)
        assert most_telling_failure([leader, worker], diagnose)[0].name == "kimi-0-1", leader_at  # type: ignore[arg-type]
