"""``ctxfit plan --fetch-config`` against a Hub (or proxy) that accepts the connection and never answers: one line
naming the endpoint, ``HubUnreachable``, exit 2, after HF_HUB_ETAG_TIMEOUT + HF_HUB_DOWNLOAD_TIMEOUT seconds (the
real huggingface_hub client; before, its own 60 s retries made it about 6 minutes and the line said "not cached")."""

from __future__ import annotations

from pathlib import Path

import pytest
from ctxfit.hub.bounded import CLI_HUB_TIMEOUT_SECONDS, cli_timeouts

from tests.unit.hub.silenthub import TIMEOUTS, plan_fetch_config, silent_hub


def test_a_silent_hub_fails_fetch_config_in_the_users_timeouts(tmp_path: Path) -> None:
    """The fetch is given up on after the user's 1 + 1 s (the line names them) and not before (the lower bound: the
    CLI waited them out); a fetch left to huggingface_hub's own retries outlives ``plan_fetch_config``'s hang
    guard (60 s) and fails the test."""
    with silent_hub() as hub:
        run, elapsed = plan_fetch_config(tmp_path, hub.endpoint, {"HF_HUB_ETAG_TIMEOUT": "1",
                                                                  "HF_HUB_DOWNLOAD_TIMEOUT": "1"})
        stalled = hub.stalled()
    lines = run.stderr.strip().splitlines()
    assert run.returncode == 2 and len(lines) == 1, run.stderr
    assert "HubUnreachable" in lines[0] and f"no answer from {hub.endpoint} in 2 s" in lines[0], lines[0]
    assert "Traceback" not in run.stderr and run.stdout == ""
    assert stalled >= 1, "the CLI never reached the silent Hub"
    assert elapsed >= 2, elapsed  # a lower bound only: the 2 s were honoured, not cut short


def test_the_budget_is_the_users_hf_timeouts_else_ours(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in TIMEOUTS:
        monkeypatch.delenv(name, raising=False)
    assert cli_timeouts() == (CLI_HUB_TIMEOUT_SECONDS, CLI_HUB_TIMEOUT_SECONDS) and sum(cli_timeouts()) <= 10
    monkeypatch.setenv("CTXFIT_HUB_TIMEOUT_SECONDS", "2.5")
    assert cli_timeouts() == (2.5, 2.5)
    monkeypatch.setenv("HF_HUB_ETAG_TIMEOUT", "7")
    monkeypatch.setenv("HF_HUB_DOWNLOAD_TIMEOUT", "not-a-number")
    assert cli_timeouts() == (7.0, 2.5), "huggingface_hub's own variable first; a bad value is ignored"
