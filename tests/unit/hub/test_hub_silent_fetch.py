"""``ctxfit plan --fetch-config`` against a Hub (or proxy) that accepts the connection and never answers: one line
naming the endpoint, ``HubUnreachable``, exit 2, after HF_HUB_ETAG_TIMEOUT + HF_HUB_DOWNLOAD_TIMEOUT seconds (the
real huggingface_hub client; before, its own 60 s retries made it about 6 minutes and the line said "not cached")."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml
from ctxfit.hub.bounded import CLI_HUB_TIMEOUT_SECONDS, cli_timeouts

ROOT = Path(__file__).resolve().parents[3]
TIMEOUTS = ("HF_HUB_ETAG_TIMEOUT", "HF_HUB_DOWNLOAD_TIMEOUT", "CTXFIT_HUB_TIMEOUT_SECONDS")


def test_a_silent_hub_fails_fetch_config_in_the_users_timeouts(tmp_path: Path) -> None:
    silent = socket.socket()
    silent.bind(("127.0.0.1", 0))
    silent.listen(16)  # the kernel completes the handshake; nothing ever reads or answers
    try:
        path = tmp_path / "server.yaml"
        path.write_text(yaml.safe_dump({"apiVersion": "ctxfit.io/v1alpha1", "kind": "InferenceServer",
                                        "metadata": {"name": "silent"}, "spec": {
                                            "model": {"name": "acme/never-answers"},
                                            "engine": {"kind": "vllm", "version": "0.19.0"},
                                            "gpu": {"product": "NVIDIA-H100-80GB-HBM3", "count": 1}}}))
        endpoint = f"http://127.0.0.1:{silent.getsockname()[1]}"
        env = {k: v for k, v in os.environ.items() if k not in ("HF_TOKEN", "HUGGING_FACE_HUB_TOKEN", "HF_HUB_OFFLINE",
                                                                *TIMEOUTS)}
        env |= {"HF_ENDPOINT": endpoint, "HF_HOME": str(tmp_path / "hf"), "CTXFIT_CACHE": str(tmp_path / "ctxfit"),
                "HF_HUB_DISABLE_TELEMETRY": "1", "HF_HUB_ETAG_TIMEOUT": "1", "HF_HUB_DOWNLOAD_TIMEOUT": "1"}
        start = time.monotonic()
        run = subprocess.run([sys.executable, "-m", "ctxfit.cli", "plan", "-f", str(path), "--fetch-config"],
                             capture_output=True, text=True, timeout=60, env=env, cwd=ROOT)
        elapsed = time.monotonic() - start
    finally:
        silent.close()
    lines = run.stderr.strip().splitlines()
    assert run.returncode == 2 and len(lines) == 1, run.stderr
    assert "HubUnreachable" in lines[0] and f"no answer from {endpoint} in 2 s" in lines[0], lines[0]
    assert "Traceback" not in run.stderr and run.stdout == ""
    assert 2 <= elapsed < 8, elapsed


def test_the_budget_is_the_users_hf_timeouts_else_ours(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in TIMEOUTS:
        monkeypatch.delenv(name, raising=False)
    assert cli_timeouts() == (CLI_HUB_TIMEOUT_SECONDS, CLI_HUB_TIMEOUT_SECONDS) and sum(cli_timeouts()) <= 10
    monkeypatch.setenv("CTXFIT_HUB_TIMEOUT_SECONDS", "2.5")
    assert cli_timeouts() == (2.5, 2.5)
    monkeypatch.setenv("HF_HUB_ETAG_TIMEOUT", "7")
    monkeypatch.setenv("HF_HUB_DOWNLOAD_TIMEOUT", "not-a-number")
    assert cli_timeouts() == (7.0, 2.5), "huggingface_hub's own variable first; a bad value is ignored"
