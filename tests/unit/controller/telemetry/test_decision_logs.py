"""One INFO line per decision per server (planned, started attempt N, failed as KIND, stepped to X, Ready),
through kopf's per-object logger; CTXFIT_LOG_LEVEL sets the level, the chart sets CTXFIT_LOG_LEVEL."""

from __future__ import annotations

import logging
from datetime import timedelta

import pytest
from ctxfit.api.status import InferenceServerStatus
from ctxfit.controller.converge import converge
from ctxfit.controller.settings import Settings
from ctxfit.controller.telemetry.decision_log import DECISIONS_LOGGER, decisions, log_decisions
from ctxfit.recovery import Failure, FailureKind

from tests.unit.chart.chartkit import ALL_ON, one, render
from tests.unit.controller.builders import NOW, SETTINGS, applied, diagnosed, never, pod, snapshot, spec, step_down

BODY = {"apiVersion": "ctxfit.io/v1alpha1", "kind": "InferenceServer",
        "metadata": {"name": "kimi", "namespace": "ns", "uid": "uid-1"}}


def _verbs(old: InferenceServerStatus, out: object) -> list[str]:
    return [d.verb for d in decisions(old, out)]  # type: ignore[arg-type]


def test_a_life_with_one_step_down_logs_each_decision_once() -> None:
    body = spec(target=262144)
    body["model"]["weightsPerGPU"] = "64Gi"
    start = converge(snapshot(body), SETTINGS, never)
    found = decisions(InferenceServerStatus(), start)
    assert [d.verb for d in found] == ["planned", "started"]
    assert found[0].message.startswith("planned context 262144 on NVIDIA-RTX-PRO-6000")
    assert found[1].message == "started attempt 1 with context 262144"
    again = converge(snapshot(body, start.status, deployment=applied(start)), SETTINGS, never)
    assert _verbs(start.status, again) == [], "a pass that decides nothing logs nothing"

    failed, body = step_down()
    before = converge(snapshot(body), SETTINGS, never).status
    found = decisions(before, failed)
    assert [d.verb for d in found] == ["failed", "stepped"]
    assert found[0].message.startswith("attempt 1 failed as KVCacheTooSmall: the estimated maximum")
    assert found[1].message == "stepped to contextLength=131072 (attempt 2)"
    assert found[1].fields == {"attempt": 2, "contextLength": 131072}

    later = NOW + timedelta(seconds=60)
    second = converge(snapshot(body, failed.status, now=later), SETTINGS, never)
    assert [d.message for d in decisions(failed.status, second)] == ["started attempt 2 with context 131072"]
    ready = converge(snapshot(body, second.status, pods=(pod(2, ready=True),), deployment=applied(second),
                              now=later), SETTINGS, never)
    assert [d.message for d in decisions(second.status, ready)] == ["Ready: attempt 2 serves context 131072"]


def test_same_configuration_again_is_logged_as_retrying() -> None:
    start = converge(snapshot(spec()), SETTINGS, never)
    unknown = Failure(FailureKind.UNKNOWN, {}, "segfault")
    out = converge(snapshot(spec(), start.status, pods=(pod(1, terminated="Error"),), deployment=applied(start),
                            now=NOW + timedelta(seconds=30)), SETTINGS, diagnosed(unknown))
    assert _verbs(start.status, out) == ["failed", "retrying"]


def test_does_not_fit_and_permanent_failure_are_logged() -> None:
    body = spec("glm5-200k.yaml")
    body["model"]["weightsPerGPU"] = "90.8Gi"
    out = converge(snapshot(body), SETTINGS, never)
    found = decisions(InferenceServerStatus(), out)
    assert [d.verb for d in found] == ["planned", "gave-up"]
    assert "does not fit" in found[0].message
    start = converge(snapshot(spec()), SETTINGS, never)
    weights = Failure(FailureKind.WEIGHTS_DO_NOT_FIT, {}, "CUDA out of memory while loading weights")
    dead = converge(snapshot(spec(), start.status, pods=(pod(1, terminated="Error"),), deployment=applied(start)),
                    SETTINGS, diagnosed(weights))
    assert _verbs(start.status, dead) == ["failed", "gave-up"]


def test_lines_go_through_kopfs_per_object_logger(caplog: pytest.LogCaptureFixture) -> None:
    out = converge(snapshot(spec()), SETTINGS, never)
    with caplog.at_level(logging.INFO, logger=DECISIONS_LOGGER):
        log_decisions(BODY, decisions(InferenceServerStatus(), out))
    records = [r for r in caplog.records if r.name == DECISIONS_LOGGER]
    assert [r.levelno for r in records] == [logging.INFO, logging.INFO]
    assert all(r.k8s_ref["namespace"] == "ns" and r.k8s_ref["name"] == "kimi" for r in records)  # type: ignore[attr-defined]
    assert all(r.k8s_skip for r in records), "log lines, not Events"  # type: ignore[attr-defined]
    assert [r.decision for r in records] == ["planned", "started"]  # type: ignore[attr-defined]


def test_warning_level_silences_the_decision_lines(caplog: pytest.LogCaptureFixture) -> None:
    out = converge(snapshot(spec()), SETTINGS, never)
    with caplog.at_level(logging.WARNING, logger=DECISIONS_LOGGER):
        log_decisions(BODY, decisions(InferenceServerStatus(), out))
    assert not [r for r in caplog.records if r.name == DECISIONS_LOGGER]


@pytest.mark.parametrize(("env", "level"), [(None, "INFO"), ("debug", "DEBUG"), ("WARNING", "WARNING"), ("", "INFO")])
def test_ctxfit_log_level_setting(monkeypatch: pytest.MonkeyPatch, env: str | None, level: str) -> None:
    if env is None:
        monkeypatch.delenv("CTXFIT_LOG_LEVEL", raising=False)
    else:
        monkeypatch.setenv("CTXFIT_LOG_LEVEL", env)
    assert Settings().log_level == level


@pytest.mark.tools
def test_chart_sets_the_log_level_and_passes_no_arguments() -> None:
    container = one(render([ALL_ON]), "Deployment")["spec"]["template"]["spec"]["containers"][0]
    env = {e["name"]: e.get("value") for e in container["env"]}
    assert env["CTXFIT_LOG_LEVEL"] == "DEBUG"
    assert "args" not in container, "the operator reads no arguments: settings are CTXFIT_* variables"
    default = one(render(), "Deployment")["spec"]["template"]["spec"]["containers"][0]
    assert "CTXFIT_LOG_LEVEL" not in {e["name"] for e in default["env"]}


def test_an_engine_up_behind_a_refused_service_is_not_logged_as_ready() -> None:
    """The attempt's engine serves but a refusal holds Ready: the line says so, never "Ready"."""
    from dataclasses import replace

    from ctxfit.controller.converge.refusals import Refusal, Write, fingerprint

    body = spec()
    first = converge(snapshot(body), SETTINGS, never)
    ready = snapshot(body, first.status, pods=(pod(1, ready=True),), deployment=applied(first), service_port=8000)
    seen = converge(ready, SETTINGS, never)
    assert [line.verb for line in decisions(first.status, seen)] == ["ready"]
    refused = Refusal(Write.SERVICE, fingerprint(None), 30.0, "Service kimi already exists and is not owned by this "
                      "InferenceServer", announce=True)
    held = converge(replace(ready, refusals=(refused,)), SETTINGS, never)
    lines = decisions(first.status, held)
    assert [line.verb for line in lines] == ["ready-held"]
    assert "Ready:" not in lines[0].message and "not owned by this InferenceServer" in lines[0].message


def test_ready_reached_after_a_held_pass_is_logged_as_ready_once() -> None:
    """The engine serves while the Service is refused (ready-held); the refusal clears in a later pass, which
    turns the server Ready with no attempt finishing in it: that pass logs "Ready", and the next logs nothing."""
    from dataclasses import replace

    from ctxfit.controller.converge.refusals import Refusal, Write, fingerprint

    body = spec()
    first = converge(snapshot(body), SETTINGS, never)
    serving = snapshot(body, first.status, pods=(pod(1, ready=True),), deployment=applied(first), service_port=8000)
    refused = Refusal(Write.SERVICE, fingerprint(None), 30.0, "Service kimi already exists and is not owned by this "
                      "InferenceServer", announce=True)
    held = converge(replace(serving, refusals=(refused,)), SETTINGS, never)
    assert [line.verb for line in decisions(first.status, held)] == ["ready-held"]
    released = converge(replace(serving, status=held.status), SETTINGS, never)
    assert released.status.phase.value == "Ready"
    lines = decisions(held.status, released)
    assert [line.verb for line in lines] == ["ready"]
    assert lines[0].message == "Ready: attempt 1 serves context 131072"
    again = converge(replace(serving, status=released.status), SETTINGS, never)
    assert decisions(released.status, again) == []
