"""The operator names, at start-up, a process environment variable it cannot use as set (one log line each)."""

from __future__ import annotations

import pytest
from ctxfit.controller.app.lifecycle import environment_problems

NAMES = ("CTXFIT_HUB_TIMEOUT_SECONDS", "HF_HUB_ETAG_TIMEOUT", "HF_HUB_DOWNLOAD_TIMEOUT", "HF_ENDPOINT")


@pytest.fixture(autouse=True)
def clean_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in NAMES:
        monkeypatch.delenv(name, raising=False)


def test_nothing_set_is_no_problem() -> None:
    assert environment_problems() == []


@pytest.mark.parametrize(("name", "raw"), [("CTXFIT_HUB_TIMEOUT_SECONDS", "abc"), ("CTXFIT_HUB_TIMEOUT_SECONDS", "0"),
                                           ("HF_HUB_ETAG_TIMEOUT", "1.5")])
def test_a_bad_timeout_is_one_line_naming_it(monkeypatch: pytest.MonkeyPatch, name: str, raw: str) -> None:
    monkeypatch.setenv(name, raw)
    problems = environment_problems()
    assert len(problems) == 1 and problems[0].startswith(f"{name}={raw!r} is not a "), problems


def test_good_timeouts_are_no_problem(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CTXFIT_HUB_TIMEOUT_SECONDS", "20")
    monkeypatch.setenv("HF_HUB_ETAG_TIMEOUT", "10")
    assert environment_problems() == []


@pytest.mark.parametrize("raw", ["", "http://[::1", "http://hub.internal:99999", "hub.internal"])
def test_a_bad_endpoint_is_one_line_naming_it(monkeypatch: pytest.MonkeyPatch, raw: str) -> None:
    monkeypatch.setenv("HF_ENDPOINT", raw)
    monkeypatch.setenv("HF_HUB_ETAG_TIMEOUT", "x")
    problems = environment_problems()
    assert len(problems) == 2 and problems[0].startswith(f"HF_ENDPOINT={raw!r} is "), problems
    assert problems[1].startswith("HF_HUB_ETAG_TIMEOUT='x' is not a "), problems


def test_a_good_endpoint_is_no_problem(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HF_ENDPOINT", "http://hub.internal:8080")
    assert environment_problems() == []
