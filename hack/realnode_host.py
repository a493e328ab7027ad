"""What the real node (hack/cluster_realnode.py) does to the machine besides running processes: commands,
cgroups (v1 hierarchies or the v2 unified one), mounts. Needs root."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import time
from pathlib import Path

from cluster_procs import HarnessError

CGROUP_FS = Path("/sys/fs/cgroup")

# --------------------------------------------------------------------------------------------
# small system helpers


def run(*cmd: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    proc = subprocess.run(list(cmd), capture_output=True, text=True, check=False, timeout=60)
    if check and proc.returncode != 0:
        raise HarnessError(f"`{' '.join(cmd)}` failed: {proc.stderr.strip()}")
    return proc


def cgroup_dirs(cgroup: str) -> list[Path]:
    """The cgroup's directory in every mounted hierarchy (v1: one per controller; v2: the unified one)."""
    if (CGROUP_FS / "cgroup.controllers").exists():  # pure v2
        return [CGROUP_FS / cgroup.lstrip("/")]
    return [h / cgroup.lstrip("/") for h in sorted(CGROUP_FS.iterdir())
            if h.is_dir() and not h.is_symlink() and (h / "cgroup.procs").exists()]


def make_cgroup(cgroup: str) -> None:
    """Create the cgroup in every hierarchy. On v2 the controllers the kubelet needs are delegated down to it
    (``cgroup.subtree_control`` of each parent; best effort: what the parent lacks it cannot give). Not exercised
    on this CI machine (cgroup v1)."""
    if (CGROUP_FS / "cgroup.controllers").exists():
        parent = CGROUP_FS
        for part in cgroup.strip("/").split("/"):
            available = set((parent / "cgroup.controllers").read_text().split())
            wanted = available & {"cpu", "cpuset", "memory", "pids", "io", "hugetlb"}
            for controller in sorted(wanted):
                with contextlib.suppress(OSError):
                    (parent / "cgroup.subtree_control").write_text(f"+{controller}")
            parent = parent / part
            parent.mkdir(exist_ok=True)
        return
    for d in cgroup_dirs(cgroup):
        d.mkdir(parents=True, exist_ok=True)
        for knob in ("cpuset.cpus", "cpuset.mems"):  # a v1 cpuset child starts empty: no task may join it
            f = d / knob
            if f.exists() and not f.read_text().strip():
                f.write_text((d.parent / knob).read_text())


def cgroup_pids(cgroup: str) -> set[int]:
    pids: set[int] = set()
    for d in cgroup_dirs(cgroup):
        if d.exists():
            for procs in d.rglob("cgroup.procs"):
                with contextlib.suppress(OSError):
                    pids |= {int(p) for p in procs.read_text().split()}
    return pids


def kill_cgroup(cgroup: str, timeout: float = 15) -> None:
    """SIGKILL every process under the cgroup (shims, containers, anything left), then remove it."""
    deadline = time.monotonic() + timeout
    while (pids := cgroup_pids(cgroup)) and time.monotonic() < deadline:
        for pid in pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        time.sleep(0.2)
    for d in cgroup_dirs(cgroup):
        if d.exists():
            for sub in sorted((p for p in d.rglob("*") if p.is_dir()), key=lambda p: -len(p.parts)):
                with contextlib.suppress(OSError):
                    sub.rmdir()
            with contextlib.suppress(OSError):
                d.rmdir()


def unmount_under(*roots: str) -> None:
    """Lazily unmount the given dirs and every mount point under them (deepest first): volumes, rootfs, netns,
    the tmpfs."""
    bases = [r.rstrip("/") for r in roots if r]
    points = []
    with open("/proc/self/mountinfo") as f:
        for line in f:
            point = line.split()[4].replace("\\040", " ")
            if any(point == b or point.startswith(b + "/") for b in bases):
                points.append(point)
    for point in sorted(set(points), key=lambda p: -p.count("/")):
        subprocess.run(["umount", "-l", point], capture_output=True, check=False)


