"""``resolve_adapter`` (a Hub LoRA adapter's adapter_config.json) against a Hub that accepts the connection and never
answers: ``HubUnreachable`` (waiting) within CTXFIT_HUB_TIMEOUT_SECONDS, as ``resolve_hub``; its ``model_info`` passed
no timeout and huggingface_hub's default client has none, so it hung forever (reviewer). The real huggingface_hub
client, in a fresh interpreter: ``bound_hub_requests`` is once per process, so no other test can have bounded it."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

from tests.unit.hub.silenthub import ROOT, hub_env, silent_hub

PROBE = """
import sys
from ctxfit.hub import ResolveError, resolve_adapter
try:
    resolve_adapter("acme/silent-lora", endpoint=sys.argv[1], cache_dir=sys.argv[2])
except ResolveError as exc:
    print(exc.kind.value, exc.kind.waiting)
"""


def test_a_silent_hub_fails_the_adapter_resolution_in_bounded_seconds(tmp_path: Path) -> None:
    env = hub_env(tmp_path, None, {"CTXFIT_HUB_TIMEOUT_SECONDS": "1"})
    start = time.monotonic()
    with silent_hub() as endpoint:
        run = subprocess.run([sys.executable, "-c", PROBE, endpoint, str(tmp_path / "cache")], capture_output=True,
                             text=True, timeout=9, env=env, cwd=ROOT)
    assert time.monotonic() - start < 9
    assert run.returncode == 0 and run.stdout.split() == ["HubUnreachable", "True"], (run.stdout, run.stderr)
