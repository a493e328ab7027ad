"""Stopping one add-on process of a running harness (KEDA, Prometheus) without stopping the cluster.

``Cluster.stop`` stops every recorded process at once; an add-on fixture that ends earlier uses
``stop_component``: the same rule (only a pid that still runs the recorded executable, its whole process
group, SIGTERM then SIGKILL after ``grace`` seconds), for one name, and the name leaves the state file.
"""

from __future__ import annotations

import contextlib
import os
import signal
import time

from ctxfit_cluster import Cluster, pid_alive, pid_exe


def stop_component(cluster: Cluster, name: str, grace: float = 8.0) -> None:
    """Stop the recorded process ``name`` (no-op if not recorded or already gone) and forget it."""
    info = cluster.state.get("processes", {}).pop(name, None)
    proc = cluster._procs.pop(name, None)
    if info is not None and pid_alive(info["pid"]) and pid_exe(info["pid"]) == info["exe"]:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(info["pgid"], signal.SIGTERM)
        deadline = time.monotonic() + grace
        while pid_alive(info["pid"]) and (proc is None or proc.poll() is None) and time.monotonic() < deadline:
            time.sleep(0.05)
        if pid_alive(info["pid"]) and (proc is None or proc.poll() is None):
            with contextlib.suppress(ProcessLookupError):
                os.killpg(info["pgid"], signal.SIGKILL)
    if proc is not None:
        proc.wait(timeout=5)
    if info is not None and cluster.state_file.exists():
        cluster._save_state()
