"""``resolve_adapter`` (a Hub LoRA adapter's adapter_config.json) against a Hub that accepts the connection and never
answers: ``HubUnreachable`` (waiting) within CTXFIT_HUB_TIMEOUT_SECONDS, as ``resolve_hub``; its ``model_info`` passed
no timeout and huggingface_hub's default client has none, so it hung forever (reviewer). The real huggingface_hub
client, in a fresh interpreter: ``bound_hub_requests`` is once per process, so no other test can have bounded it."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from tests.unit.hub.silenthub import RECORD_TIMEOUTS, ROOT, hub_env, recorded_timeouts, silent_hub

PROBE = RECORD_TIMEOUTS + """
from ctxfit.hub import ResolveError, resolve_adapter
try:
    resolve_adapter("acme/silent-lora", endpoint=sys.argv[1], cache_dir=sys.argv[2])
except ResolveError as exc:
    print(exc.kind.value, exc.kind.waiting)
"""


def test_a_silent_hub_fails_the_adapter_resolution_in_bounded_seconds(tmp_path: Path) -> None:
    """``model_info`` is given CTXFIT_HUB_TIMEOUT_SECONDS (what the code passes, recorded in the child), the request
    stalls on the silent Hub and ends HubUnreachable. Unbounded, the child hangs past the hang guard (60 s)."""
    log = tmp_path / "timeouts"
    env = hub_env(tmp_path, None, {"CTXFIT_HUB_TIMEOUT_SECONDS": "1", "CTXFIT_TEST_TIMEOUTS": str(log)})
    with silent_hub() as hub:
        run = subprocess.run([sys.executable, "-c", PROBE, hub.endpoint, str(tmp_path / "cache")],
                             capture_output=True, text=True, timeout=60, env=env, cwd=ROOT)  # hang guard
        stalled = hub.stalled()
    assert run.returncode == 0 and run.stdout.split() == ["HubUnreachable", "True"], (run.stdout, run.stderr)
    assert recorded_timeouts(log) == [1.0], run.stderr
    assert stalled >= 1, "the adapter resolution never reached the silent Hub"
