"""The CONTEXT column (``status.contextLength``) says what runs: empty while Failed (scaled to 0), while
``status.effective`` keeps the configuration tried last."""

from __future__ import annotations

from ctxfit.api.status import Phase
from ctxfit.controller.converge import converge
from ctxfit.recovery import Failure, FailureKind

from tests.unit.controller.builders import SETTINGS, applied, diagnosed, never, pod, snapshot, spec


def test_the_context_column_is_empty_while_failed() -> None:
    start = converge(snapshot(spec()), SETTINGS, never)
    assert start.status.context_length == 131072
    denied = Failure(FailureKind.INVALID_PARALLELISM, {}, "AssertionError: 64 is not divisible by 3")
    out = converge(snapshot(spec(), start.status, pods=(pod(1, terminated="Error"),), deployment=applied(start)),
                   SETTINGS, diagnosed(denied))
    assert out.status.phase is Phase.FAILED
    assert out.status.context_length is None and "contextLength" not in out.status.to_wire()
    assert out.status.effective is not None and out.status.effective.context_length == 131072, "what was tried"
    again = converge(snapshot(spec(), out.status, deployment=applied(start)), SETTINGS, never)
    assert again.status.phase is Phase.FAILED and again.status.context_length is None


def test_a_spec_that_no_longer_validates_clears_it_too() -> None:
    start = converge(snapshot(spec()), SETTINGS, never)
    broken = spec()
    broken["parallelism"] = {"tensor": 3}
    out = converge(snapshot(broken, start.status, deployment=applied(start)), SETTINGS, never)
    assert out.status.phase is Phase.FAILED and out.scale_to_zero
    assert out.status.context_length is None
