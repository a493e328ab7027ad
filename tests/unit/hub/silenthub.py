"""What the silent-Hub tests share: a local socket that accepts and never answers (``silent_hub``), a clean
Hugging Face environment pointed at it (``hub_env``) and ``ctxfit plan --fetch-config`` run as a user would
(``plan_fetch_config``: the real CLI and the real huggingface_hub client in a subprocess)."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[3]
TIMEOUTS = ("HF_HUB_ETAG_TIMEOUT", "HF_HUB_DOWNLOAD_TIMEOUT", "CTXFIT_HUB_TIMEOUT_SECONDS")
"""The timeout variables a test sets itself (the caller's are dropped)."""


class SilentHub:
    """A socket whose handshake the kernel completes; nothing ever reads or answers."""

    def __init__(self) -> None:
        self.socket = socket.socket()
        self.socket.bind(("127.0.0.1", 0))
        self.socket.listen(16)
        self.endpoint = f"http://127.0.0.1:{self.socket.getsockname()[1]}"

    def stalled(self) -> int:
        """How many connections a client opened and got no answer on (taken off the backlog, never read)."""
        self.socket.setblocking(False)
        count = 0
        while True:
            try:
                conn, _ = self.socket.accept()
            except BlockingIOError:
                return count
            conn.close()
            count += 1


@contextmanager
def silent_hub() -> Iterator[SilentHub]:
    """A ``SilentHub`` (its ``endpoint``: ``http://127.0.0.1:<port>``), closed on exit."""
    hub = SilentHub()
    try:
        yield hub
    finally:
        hub.socket.close()


RECORD_TIMEOUTS = """
import json, os, sys
import huggingface_hub
model_info = huggingface_hub.HfApi.model_info
def recording(self, *args, **kwargs):
    with open(os.environ["CTXFIT_TEST_TIMEOUTS"], "a") as log:
        log.write(json.dumps(kwargs.get("timeout", "unset")) + "\\n")
    return model_info(self, *args, **kwargs)
huggingface_hub.HfApi.model_info = recording
"""
"""Prelude of a probe: every ``HfApi.model_info`` call appends the ``timeout`` it was given to the file
``CTXFIT_TEST_TIMEOUTS`` names (one JSON value a line; ``"unset"`` when none was passed). What the code passes,
not how long it took."""


def recorded_timeouts(path: Path) -> list[object]:
    """The timeouts ``RECORD_TIMEOUTS`` wrote to ``path`` (none when the file was never written)."""
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def hub_env(tmp_path: Path, endpoint: str | None, extra: dict[str, str]) -> dict[str, str]:
    """This process's environment without tokens, offline mode or timeouts; the Hub at ``endpoint`` (None: unset),
    caches under ``tmp_path``, then ``extra``."""
    env = {k: v for k, v in os.environ.items() if k not in ("HF_TOKEN", "HUGGING_FACE_HUB_TOKEN", "HF_HUB_OFFLINE",
                                                            "HF_ENDPOINT", *TIMEOUTS)}
    env |= {"HF_HOME": str(tmp_path / "hf"), "CTXFIT_CACHE": str(tmp_path / "ctxfit"), "HF_HUB_DISABLE_TELEMETRY": "1"}
    if endpoint is not None:
        env["HF_ENDPOINT"] = endpoint
    return env | extra


def plan_fetch_config(tmp_path: Path, endpoint: str, extra: dict[str, str],
                      timeout: float = 60) -> tuple[subprocess.CompletedProcess[str], float]:
    """``ctxfit plan -f server.yaml --fetch-config`` for a model in no catalog, against ``endpoint``; (the run,
    its wall seconds)."""
    start = time.monotonic()
    run = plan_uncatalogued(tmp_path, endpoint, extra, "--fetch-config", timeout=timeout)
    return run, time.monotonic() - start


def plan_uncatalogued(tmp_path: Path, endpoint: str | None, extra: dict[str, str], *flags: str,
                      timeout: float = 60) -> subprocess.CompletedProcess[str]:
    """``ctxfit plan -f server.yaml [flags]`` for ``acme/never-answers`` (in no catalog), with ``hub_env``'s
    environment; ``timeout`` is a hang guard."""
    path = tmp_path / "server.yaml"
    path.write_text(yaml.safe_dump({"apiVersion": "ctxfit.io/v1alpha1", "kind": "InferenceServer",
                                    "metadata": {"name": "silent"}, "spec": {
                                        "model": {"name": "acme/never-answers"},
                                        "engine": {"kind": "vllm", "version": "0.19.0"},
                                        "gpu": {"product": "NVIDIA-H100-80GB-HBM3", "count": 1}}}))
    return subprocess.run([sys.executable, "-m", "ctxfit.cli", "plan", "-f", str(path), *flags],
                          capture_output=True, text=True, timeout=timeout, env=hub_env(tmp_path, endpoint, extra),
                          cwd=ROOT)
