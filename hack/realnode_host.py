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


KUBELET_CONTROLLERS = frozenset({"cpu", "cpuset", "memory", "hugetlb", "pids"})
"""The cgroup v2 controllers the kubelet uses; those of them the root cgroup offers must all be enabled in its
cgroupRoot (kubernetes v1.34 pkg/kubelet/cm/cgroup_v2_manager_linux.go, Validate and
getSupportedUnifiedControllers: "cgroup ... has some missing controllers")."""


def make_cgroup(cgroup: str) -> None:
    """Create the cgroup in every hierarchy. On v2 the controllers the kubelet needs (KUBELET_CONTROLLERS the root
    offers; io too, best effort) are delegated down to it: ``+controller`` into ``cgroup.subtree_control`` of each
    parent. A parent that lacks one or refuses to enable it (EBUSY: processes directly in a non-root cgroup, e.g. a
    container's own root, the v2 "no internal processes" rule) raises HarnessError naming it, instead of a kubelet
    that fails later. This machine is cgroup v1 (hybrid): the v2 branch runs here only against a directory tree
    (tests/unit/hack/test_realnode_host.py), never against the kernel."""
    if (CGROUP_FS / "cgroup.controllers").exists():
        needed = KUBELET_CONTROLLERS & set((CGROUP_FS / "cgroup.controllers").read_text().split())
        parent = CGROUP_FS
        for part in cgroup.strip("/").split("/"):
            available = set((parent / "cgroup.controllers").read_text().split())
            if missing := needed - available:
                raise HarnessError(f"cgroup v2: {parent} does not offer {', '.join(sorted(missing))} (not delegated "
                                   f"to it); the real node's kubelet needs {', '.join(sorted(needed))}")
            for controller in sorted(available & (needed | {"io"})):
                try:
                    (parent / "cgroup.subtree_control").write_text(f"+{controller}")
                except OSError as exc:
                    if controller in needed:
                        raise HarnessError(
                            f"cgroup v2: cannot enable {controller} in {parent / 'cgroup.subtree_control'} ({exc}); "
                            "if processes live directly in that cgroup (a container's root), move them to a child "
                            "cgroup first, as kind's entrypoint does") from exc
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


