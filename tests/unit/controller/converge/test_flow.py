"""Reconciliation with fakes: ``converge`` (pure) step by step, and ``reconcile`` against a fake API.

Each step feeds the previous step's status back in, like the operator does across events; running a
step twice must change nothing (idempotent), and stale pods must be ignored.
"""

from __future__ import annotations

from dataclasses import replace
from datetime import timedelta
from typing import Any

import pytest
from ctxfit.api.status import ConditionType
from ctxfit.controller.converge import converge
from ctxfit.recovery import Failure, FailureKind

from tests.unit.controller.builders import (
    H100,
    NOW,
    RTX,
    SETTINGS,
    applied,
    diagnosed,
    never,
    pod,
    snapshot,
    spec,
    step_down,
)


def test_plan_creates_attempt_one_deployment_and_service() -> None:
    out = converge(snapshot(spec()), SETTINGS, never)
    st = out.status
    assert st.phase is not None and st.phase.value == "Starting"
    assert [a.number for a in st.attempts] == [1]
    assert st.context_length == 131072 and st.plan is not None and st.plan.fits
    assert st.node_product == RTX.product
    assert out.deployment is not None and out.service is None, "the Service follows on the next pass"
    assert out.deployment["spec"]["template"]["metadata"]["annotations"]["ctxfit.io/attempt"] == "1"
    assert [e.reason.value for e in out.events] == ["Planned"]
    assert st.observed_generation == 1
    assert out.requeue_after is not None and out.requeue_after <= 1
    again = converge(snapshot(spec(), st, deployment=applied(out)), SETTINGS, never)
    assert again.service is not None and again.deployment is None


def test_second_run_is_a_no_op() -> None:
    first = converge(snapshot(spec()), SETTINGS, never)
    again = converge(snapshot(spec(), first.status, deployment=applied(first)), SETTINGS, never)
    assert again.status.to_wire() == first.status.to_wire()
    assert again.deployment is None and not again.events


def test_no_eligible_node_waits_and_creates_nothing() -> None:
    out = converge(snapshot(spec(), nodes=(H100,)), SETTINGS, never)
    assert out.status.phase is not None and out.status.phase.value == "Planning"
    fits = out.status.condition(ConditionType.BUDGET_FITS)
    assert fits is not None and fits.reason.value == "NoEligibleNode" and "H100" in fits.message
    assert out.deployment is None and out.waiting_for_nodes
    assert out.requeue_after == SETTINGS.node_recheck_seconds
    again = converge(snapshot(spec(), out.status, nodes=(H100,)), SETTINGS, never)
    assert not again.events, "the Event is posted once, not on every re-check"
    later = converge(snapshot(spec(), out.status), SETTINGS, never)
    assert later.deployment is not None and not later.waiting_for_nodes


def test_does_not_fit_fails_without_deployment() -> None:
    body = spec("glm5-200k.yaml")
    body["model"]["weightsPerGPU"] = "90.8Gi"
    out = converge(snapshot(body), SETTINGS, never)
    assert out.status.phase is not None and out.status.phase.value == "Failed"
    assert out.status.plan is not None and not out.status.plan.fits
    assert out.deployment is None and out.service is None and not out.status.attempts
    assert [e.reason.value for e in out.events] == ["DoesNotFit"]


@pytest.mark.parametrize(("mutate", "needle"), [
    (lambda s: s["parallelism"].update(tensor=4), "tensor x pipeline x data"),
    (lambda s: s["context"].update(minimum=1_000_000, target=1_000_000), "above the model's maximum context"),
], ids=["pydantic", "planner"])
def test_invalid_spec_is_a_condition_not_a_crash(mutate: Any, needle: str) -> None:
    body = spec()
    mutate(body)
    body["model"] = {k: v for k, v in body["model"].items() if v is not None}
    out = converge(snapshot(body), SETTINGS, never)
    assert out.status.phase is not None and out.status.phase.value == "Failed"
    assert needle in (out.status.message or "")
    assert [e.reason.value for e in out.events] == ["InvalidSpec"]


def test_failure_records_the_next_attempt_before_applying_it() -> None:
    out, _ = step_down()
    first, second = out.status.attempts
    assert (first.outcome.value, first.failure_kind) == ("Failed", "KVCacheTooSmall")
    assert second.effective.context_length == 131072 and second.not_before is not None
    assert out.status.phase is not None and out.status.phase.value == "SteppingDown"
    assert out.deployment is None, "attempt 2 waits for its backoff"
    assert out.requeue_after is not None and out.requeue_after <= SETTINGS.backoff_seconds
    assert [e.reason.value for e in out.events] == ["AttemptFailed"]
    assert out.step_down_reasons == ["KVCacheTooSmall"]


def test_the_same_failure_is_never_applied_twice() -> None:
    out, body = step_down()
    stale = (pod(1, terminated="Error"),)
    for seconds in (31, 35, 60):  # the old pod keeps crash-looping; the operator may restart in between
        again = converge(snapshot(body, out.status, pods=stale, now=NOW + timedelta(seconds=seconds)), SETTINGS,
                         never)
        assert len(again.status.attempts) == 2 and not again.events
    after = converge(snapshot(body, out.status, pods=stale, now=NOW + timedelta(seconds=60)), SETTINGS, never)
    assert after.deployment is not None
    assert after.deployment["spec"]["template"]["metadata"]["annotations"]["ctxfit.io/attempt"] == "2"


def test_ready_pod_of_the_current_attempt_makes_it_ready() -> None:
    out, body = step_down()
    later = NOW + timedelta(seconds=60)
    applied2 = converge(snapshot(body, out.status, now=later), SETTINGS, never)
    ready = converge(snapshot(body, applied2.status, pods=(pod(1, terminated="Error", deleting=True),
                                                            pod(2, ready=True)),
                              deployment=applied(applied2), now=later), SETTINGS, never)
    st = ready.status
    assert st.phase is not None and st.phase.value == "Ready"
    assert [a.outcome.value for a in st.attempts] == ["Failed", "Succeeded"]
    degraded = st.condition(ConditionType.DEGRADED)
    assert degraded is not None
    assert (degraded.status, degraded.reason.value) == ("True", "SteppedDown")
    assert [e.reason.value for e in ready.events] == ["EngineReady"]
    assert ready.deployment is None


def test_permanent_failure_scales_to_zero() -> None:
    start = converge(snapshot(spec()), SETTINGS, never)
    weights = Failure(FailureKind.WEIGHTS_DO_NOT_FIT, {}, "CUDA out of memory while loading weights")
    out = converge(snapshot(spec(), start.status, pods=(pod(1, terminated="Error"),), deployment=applied(start)),
                   SETTINGS, diagnosed(weights))
    assert out.status.phase is not None and out.status.phase.value == "Failed"
    assert len(out.status.attempts) == 1
    assert out.deployment is not None and out.deployment["spec"]["replicas"] == 0
    ready = out.status.condition(ConditionType.READY)
    assert ready is not None and ready.reason.value == "PermanentFailure"
    after = converge(snapshot(spec(), out.status, pods=(pod(1, terminated="Error"),),
                              deployment=replace(applied(out))), SETTINGS, never)
    assert after.deployment is None and not after.events


def test_startup_deadline_counts_as_a_failure() -> None:
    start = converge(snapshot(spec()), SETTINGS, never)
    timeout = Failure(FailureKind.STARTUP_PROBE_TIMEOUT, {}, "Startup probe failed")
    before = converge(snapshot(spec(), start.status, pods=(pod(1),), deployment=applied(start),
                               now=NOW + timedelta(seconds=1800)), SETTINGS, never)
    assert before.requeue_after is not None and before.requeue_after <= SETTINGS.startup_grace_seconds
    diagnose = diagnosed(timeout)
    overdue = NOW + timedelta(seconds=1800 + SETTINGS.startup_grace_seconds + 1)
    converge(snapshot(spec(), start.status, pods=(pod(1),), deployment=applied(start), now=overdue), SETTINGS,
             diagnose)
    assert diagnose.calls == ["kimi-1"]


def test_spec_change_supersedes_and_replans() -> None:
    start = converge(snapshot(spec()), SETTINGS, never)
    changed = spec(target=65536)
    out = converge(snapshot(changed, start.status, deployment=applied(start), generation=2), SETTINGS, never)
    assert [a.number for a in out.status.attempts] == [1]
    assert out.status.context_length == 65536
    assert [e.reason.value for e in out.events] == ["SpecChanged", "Planned"]
    assert out.finished[0].outcome.value == "Superseded"
    assert out.deployment is not None and out.status.observed_generation == 2


def test_pod_metadata_change_keeps_history() -> None:
    out, body = step_down()
    body["pod"] = {"labels": {"team": "search"}}
    again = converge(snapshot(body, out.status, generation=2), SETTINGS, never)
    assert len(again.status.attempts) == 2 and not again.events


def test_service_follows_the_serving_port() -> None:
    start = converge(snapshot(spec()), SETTINGS, never)
    same = converge(snapshot(spec(), start.status, deployment=applied(start), service_port=8000), SETTINGS, never)
    assert same.service is None
    body = spec()
    body["serving"] = {"port": 9000}
    moved = converge(snapshot(body, start.status, deployment=applied(start), service_port=8000, generation=2),
                     SETTINGS, never)
    assert moved.service is not None and moved.service["spec"]["ports"][0]["port"] == 9000
    assert moved.status.endpoint is not None and moved.status.endpoint.endswith(":9000")
