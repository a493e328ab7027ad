"""``make demo``'s state dir is one per checkout, and a demo never stops another one still running in its dir
(hack/demo.py ``default_dir``, ``running_owner``). Real processes stand in for the owner and its cluster."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

HACK = Path(__file__).resolve().parents[3] / "hack"
sys.path.insert(0, str(HACK))
import demo  # noqa: E402
from cluster_procs import pid_exe  # noqa: E402


def test_each_checkout_has_its_own_demo_dir(tmp_path: Path) -> None:
    one, two = tmp_path / "one", tmp_path / "two"
    one.mkdir()
    two.mkdir()
    assert demo.default_dir(one) != demo.default_dir(two)
    assert demo.default_dir(one) == demo.default_dir(one)
    assert demo.default_dir(one).parent == Path.home() / ".cache" / "ctxfit" / "cluster"
    assert demo.default_dir().name.startswith("demo-") and demo.default_dir() == demo.default_dir(demo.ROOT)


def test_a_live_demo_is_never_taken_for_a_leftover() -> None:
    owner = subprocess.Popen(["sleep", "30"])
    component = subprocess.Popen(["sleep", "30"])
    try:
        exe = "sleep"  # argv[0], as the harness records it
        # Popen returns once the kernel lets a vfork parent go, before the new image's argv is in place: until then
        # /proc/<pid>/cmdline reads empty (seen under load). Wait for both exec()s to finish.
        deadline = time.monotonic() + 10
        while any(pid_exe(p.pid) != exe for p in (owner, component)) and time.monotonic() < deadline:
            time.sleep(0.01)
        state = {"owner_pid": owner.pid, "processes": {"etcd": {"pid": component.pid, "pgid": component.pid,
                                                                "exe": exe}}}
        assert demo.running_owner(state) == owner.pid
        assert demo.running_owner({**state, "owner_pid": os.getpid()}) is None, "our own cluster"
        owner.kill()
        owner.wait()
        assert demo.running_owner(state) is None, "its owner died: a leftover, cleaned up"
    finally:
        for proc in (owner, component):
            proc.kill()
            proc.wait()
    assert demo.running_owner({"owner_pid": 1, "processes": {}}) is None
