"""The operator-path diagnosis harness: one handed failure case run through ``reconcile.diagnose`` (over
``fakekube.FakeKube``) and ``attempts.fail``."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from ctxfit.api.status import Attempt as StatusAttempt
from ctxfit.api.status import EffectiveStatus, InferenceServerStatus
from ctxfit.budget.planner import replan_context
from ctxfit.controller.converge import Outcome, attempts
from ctxfit.controller.reconcile import diagnose as controller_diagnose
from ctxfit.controller.views.pods import Termination
from ctxfit.recovery import initial_effective, observed_effective

from tests.unit.controller.builders import NOW, SETTINGS, pod
from tests.unit.controller.fakekube import FakeKube, runtime
from tests.unit.recovery.casekit import assert_next, assert_numbers, build_spec


def check_through_the_operator_policy(case: dict[str, Any]) -> None:
    """A handed case through the controller: ``reconcile.diagnose`` on a pod
    carrying the case's termination and Events, then ``attempts.fail`` (the policy wire the
    controller uses) on the configuration the operator would have rendered."""
    spec_ = build_spec(case["server"])
    observed = case["observed"]
    term = observed.get("terminated", {})
    view = replace(pod(1, terminated="Error"), node="node-1",
                   termination=Termination(term.get("reason"), term.get("exitCode"), observed.get("message", ""),
                                           None))
    rt = runtime(FakeKube(None, events=tuple(observed.get("events", ()))), SETTINGS)
    failure = controller_diagnose(rt, "ns", view, spec_.engine.kind)
    expect = case["expect"]
    assert failure.kind.value == expect["failure"], failure.evidence
    assert_numbers(dict(failure.numbers), expect.get("numbers", {}))
    rendered = observed_effective(initial_effective(spec_), failure, spec_)
    cur = StatusAttempt(number=1, effective=EffectiveStatus.of(rendered), started_at="2026-01-01T12:00:00Z")
    out = Outcome(status=InferenceServerStatus(attempts=[cur]))
    attempts.fail(out, spec_, cur, view, failure, None, SETTINGS, NOW, 1,
                  lambda s, pin: replan_context(s, pin))
    st = out.status
    assert st.attempts[0].failure_kind == expect["failure"] and st.attempts[0].explanation
    if expect.get("permanent"):
        assert st.phase is not None and st.phase.value == "Failed" and len(st.attempts) == 1
        return
    assert len(st.attempts) == 2, st.attempts[0].explanation
    if expect.get("next"):
        assert_next(rendered.to_wire(), st.attempts[1].effective.to_config().to_wire(), expect["next"])
