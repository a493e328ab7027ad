"""Hostile Hub timeout variables (reviewer): ``ctxfit plan --fetch-config`` says in one line which variable is
wrong, exit 2, and a huge or infinite CTXFIT_HUB_TIMEOUT_SECONDS is capped, not an OverflowError that read as
``InvalidCheckpoint``; the real huggingface_hub client against a local socket that accepts and never answers."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml
from ctxfit.hub.bounded import MAX_HUB_TIMEOUT_SECONDS, cli_timeouts, env_seconds
from ctxfit.hub.resolve import HUB_TIMEOUT_SECONDS, hub_timeout

ROOT = Path(__file__).resolve().parents[3]
TIMEOUTS = ("HF_HUB_ETAG_TIMEOUT", "HF_HUB_DOWNLOAD_TIMEOUT", "CTXFIT_HUB_TIMEOUT_SECONDS")


def _plan(tmp_path: Path, endpoint: str, extra: dict[str, str]) -> tuple[subprocess.CompletedProcess[str], float]:
    path = tmp_path / "server.yaml"
    path.write_text(yaml.safe_dump({"apiVersion": "ctxfit.io/v1alpha1", "kind": "InferenceServer",
                                    "metadata": {"name": "silent"}, "spec": {
                                        "model": {"name": "acme/never-answers"},
                                        "engine": {"kind": "vllm", "version": "0.19.0"},
                                        "gpu": {"product": "NVIDIA-H100-80GB-HBM3", "count": 1}}}))
    env = {k: v for k, v in os.environ.items() if k not in ("HF_TOKEN", "HUGGING_FACE_HUB_TOKEN", "HF_HUB_OFFLINE",
                                                            *TIMEOUTS)}
    env |= {"HF_ENDPOINT": endpoint, "HF_HOME": str(tmp_path / "hf"), "CTXFIT_CACHE": str(tmp_path / "ctxfit"),
            "HF_HUB_DISABLE_TELEMETRY": "1"} | extra
    start = time.monotonic()
    run = subprocess.run([sys.executable, "-m", "ctxfit.cli", "plan", "-f", str(path), "--fetch-config"],
                         capture_output=True, text=True, timeout=30, env=env, cwd=ROOT)
    return run, time.monotonic() - start


@pytest.mark.parametrize("raw", ["abc", "1.5", "", "-1", "nan"])
def test_a_bad_hf_timeout_variable_is_one_line_naming_it(tmp_path: Path, raw: str) -> None:
    run, _ = _plan(tmp_path, "http://127.0.0.1:9", {"HF_HUB_ETAG_TIMEOUT": raw})
    lines = run.stderr.strip().splitlines()
    assert run.returncode == 2 and len(lines) == 1, run.stderr
    assert f"HF_HUB_ETAG_TIMEOUT={raw!r} is not a whole number of seconds" in lines[0], lines[0]
    assert "Traceback" not in run.stderr and "invalid literal" not in run.stderr and run.stdout == ""


@pytest.mark.parametrize("raw", ["inf", "1e300"])
def test_an_infinite_ctxfit_timeout_is_capped_not_an_overflow(tmp_path: Path, raw: str) -> None:
    silent = socket.socket()
    silent.bind(("127.0.0.1", 0))
    silent.listen(16)  # the kernel completes the handshake; nothing ever reads or answers
    try:
        endpoint = f"http://127.0.0.1:{silent.getsockname()[1]}"
        run, elapsed = _plan(tmp_path, endpoint, {"CTXFIT_HUB_TIMEOUT_SECONDS": raw, "HF_HUB_ETAG_TIMEOUT": "1",
                                                  "HF_HUB_DOWNLOAD_TIMEOUT": "1"})
    finally:
        silent.close()
    lines = run.stderr.strip().splitlines()
    assert run.returncode == 2 and len(lines) == 1, run.stderr
    assert "HubUnreachable" in lines[0] and "OverflowError" not in lines[0], lines[0]
    assert elapsed < 8, elapsed


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
