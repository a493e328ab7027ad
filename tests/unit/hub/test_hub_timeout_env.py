"""Hostile Hub timeout variables (reviewer): ``ctxfit plan --fetch-config`` says in one line which variable is
wrong, exit 2, and a huge or infinite CTXFIT_HUB_TIMEOUT_SECONDS is capped, not an OverflowError that read as
``InvalidCheckpoint``; the real huggingface_hub client against a local socket that accepts and never answers."""

from __future__ import annotations

from pathlib import Path

import pytest
from ctxfit.hub.bounded import MAX_HUB_TIMEOUT_SECONDS, cli_timeouts, env_seconds
from ctxfit.hub.resolve import HUB_TIMEOUT_SECONDS, hub_timeout

from tests.unit.hub.silenthub import TIMEOUTS, plan_fetch_config, silent_hub


@pytest.mark.parametrize("raw", ["abc", "1.5", "", "-1", "nan"])
def test_a_bad_hf_timeout_variable_is_one_line_naming_it(tmp_path: Path, raw: str) -> None:
    run, _ = plan_fetch_config(tmp_path, "http://127.0.0.1:9", {"HF_HUB_ETAG_TIMEOUT": raw}, timeout=30)
    lines = run.stderr.strip().splitlines()
    assert run.returncode == 2 and len(lines) == 1, run.stderr
    assert f"HF_HUB_ETAG_TIMEOUT={raw!r} is not a whole number of seconds" in lines[0], lines[0]
    assert "Traceback" not in run.stderr and "invalid literal" not in run.stderr and run.stdout == ""


@pytest.mark.parametrize("raw", ["inf", "1e300"])
def test_an_infinite_ctxfit_timeout_is_capped_not_an_overflow(tmp_path: Path, raw: str) -> None:
    """The fetch still waits the HF variables' 1 + 1 s (the line names them), not an overflow nor the capped
    CTXFIT value (an hour: past ``plan_fetch_config``'s 30 s hang guard, the test would fail)."""
    with silent_hub() as hub:
        timeouts = {"CTXFIT_HUB_TIMEOUT_SECONDS": raw, "HF_HUB_ETAG_TIMEOUT": "1", "HF_HUB_DOWNLOAD_TIMEOUT": "1"}
        run, _ = plan_fetch_config(tmp_path, hub.endpoint, timeouts, timeout=30)
        stalled = hub.stalled()
    lines = run.stderr.strip().splitlines()
    assert run.returncode == 2 and len(lines) == 1, run.stderr
    assert "HubUnreachable" in lines[0] and "OverflowError" not in lines[0], lines[0]
    assert f"no answer from {hub.endpoint} in 2 s" in lines[0], lines[0]
    assert stalled >= 1, "the CLI never reached the silent Hub"


def test_timeout_values_are_positive_finite_and_capped(monkeypatch: pytest.MonkeyPatch) -> None:
    for raw, want in [("inf", MAX_HUB_TIMEOUT_SECONDS), ("1e300", MAX_HUB_TIMEOUT_SECONDS), ("nan", None),
                      ("-inf", None), ("0", None), ("-3", None), ("x", None), ("2.5", 2.5)]:
        monkeypatch.setenv("CTXFIT_HUB_TIMEOUT_SECONDS", raw)
        assert env_seconds("CTXFIT_HUB_TIMEOUT_SECONDS") == want, raw
        assert hub_timeout() == (want or HUB_TIMEOUT_SECONDS), raw
    monkeypatch.setenv("CTXFIT_HUB_TIMEOUT_SECONDS", "inf")
    for name in TIMEOUTS[:2]:
        monkeypatch.delenv(name, raising=False)
    assert cli_timeouts() == (MAX_HUB_TIMEOUT_SECONDS, MAX_HUB_TIMEOUT_SECONDS)


@pytest.mark.parametrize("raw", ["abc", "0", "-3", "nan", "-inf", "10s"])
def test_a_bad_ctxfit_timeout_is_one_line_naming_it(tmp_path: Path, raw: str) -> None:
    """Not a positive number: one line and exit 2, not a plan that silently waited the default instead."""
    run, _ = plan_fetch_config(tmp_path, "http://127.0.0.1:9", {"CTXFIT_HUB_TIMEOUT_SECONDS": raw}, timeout=30)
    lines = run.stderr.strip().splitlines()
    assert run.returncode == 2 and len(lines) == 1, run.stderr
    assert f"CTXFIT_HUB_TIMEOUT_SECONDS={raw!r} is not a positive number of seconds" in lines[0], lines[0]
    assert run.stdout == ""


def test_an_empty_ctxfit_timeout_reads_as_unset(monkeypatch: pytest.MonkeyPatch) -> None:
    from ctxfit.hub.bounded import timeout_problem

    for name in TIMEOUTS:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("CTXFIT_HUB_TIMEOUT_SECONDS", "")
    assert timeout_problem() is None and hub_timeout() == HUB_TIMEOUT_SECONDS
    monkeypatch.setenv("CTXFIT_HUB_TIMEOUT_SECONDS", "2.5")
    assert timeout_problem() is None
