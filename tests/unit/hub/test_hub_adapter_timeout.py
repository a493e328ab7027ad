"""``resolve_adapter`` (a Hub LoRA adapter's adapter_config.json) against a Hub that accepts the connection and never
answers: ``HubUnreachable`` (waiting) within CTXFIT_HUB_TIMEOUT_SECONDS, as ``resolve_hub``; its ``model_info`` passed
no timeout and huggingface_hub's default client has none, so it hung forever (reviewer). The real huggingface_hub
client, in a fresh interpreter: ``bound_hub_requests`` is once per process, so no other test can have bounded it."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]

PROBE = """
import sys
from ctxfit.hub import ResolveError, resolve_adapter
try:
    resolve_adapter("acme/silent-lora", endpoint=sys.argv[1], cache_dir=sys.argv[2])
except ResolveError as exc:
    print(exc.kind.value, exc.kind.waiting)
"""


def test_a_silent_hub_fails_the_adapter_resolution_in_bounded_seconds(tmp_path: Path) -> None:
    silent = socket.socket()
    silent.bind(("127.0.0.1", 0))
    silent.listen(16)  # the kernel completes the handshake; nothing ever reads or answers
    env = {k: v for k, v in os.environ.items() if k not in ("HF_TOKEN", "HUGGING_FACE_HUB_TOKEN", "HF_HUB_OFFLINE",
                                                            "HF_HUB_ETAG_TIMEOUT", "HF_HUB_DOWNLOAD_TIMEOUT")}
    env |= {"CTXFIT_HUB_TIMEOUT_SECONDS": "1", "HF_HOME": str(tmp_path / "hf"), "HF_HUB_DISABLE_TELEMETRY": "1"}
    start = time.monotonic()
    try:
        run = subprocess.run([sys.executable, "-c", PROBE, f"http://127.0.0.1:{silent.getsockname()[1]}",
                              str(tmp_path / "cache")], capture_output=True, text=True, timeout=9, env=env, cwd=ROOT)
    finally:
        silent.close()
    assert time.monotonic() - start < 9
    assert run.returncode == 0 and run.stdout.split() == ["HubUnreachable", "True"], (run.stdout, run.stderr)
