"""Process facts from /proc for the operator benchmark: peak RSS, RSS split, threads, CPU seconds, and the
CPU split between the operator and the local control plane's processes over a window.

On 2 cores the operator, kube-apiserver, etcd, kube-controller-manager, kube-scheduler and kwok share the
CPU, so how fast Deployments are written depends on how much CPU each of them spends per server: the split
says where the time went (``CpuSplit``), in the operator's window and in the plain-client ceiling's.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

CONTROL_PLANE = ("kube-apiserver", "etcd", "kube-controller-manager", "kube-scheduler", "kwok")
"""Harness processes (``hack/ctxfit_cluster.py``, ``state.json`` ``processes``) whose CPU is counted."""


def peak_rss_mib(pid: int) -> float:
    """VmHWM (peak resident set) of ``pid`` in MiB, 0 when unreadable."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    except OSError:
        pass
    return 0.0


def rss_mib(pid: int) -> float:
    """VmRSS (resident set now) of ``pid`` in MiB, 0 when unreadable."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    except OSError:
        pass
    return 0.0


def process_facts(pid: int) -> str:
    """``pid``'s resident memory now (anonymous / file-backed, MiB) and thread count, from /proc."""
    fields: dict[str, int] = {}
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            key, _, value = line.partition(":")
            if key in ("VmRSS", "RssAnon", "RssFile", "Threads"):
                fields[key] = int(value.split()[0])
    except (OSError, ValueError, IndexError):
        return "unreadable"
    mib = {k: v / 1024 for k, v in fields.items() if k != "Threads"}
    return (f"RSS {mib.get('VmRSS', 0):.0f} MiB (anon {mib.get('RssAnon', 0):.0f}, file "
            f"{mib.get('RssFile', 0):.0f}), {fields.get('Threads', 0)} threads")


def cpu_seconds(pid: int) -> float:
    """user + system CPU seconds of ``pid`` (all its threads) so far; 0 when unreadable."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    except (OSError, IndexError, ValueError):
        return 0.0


def control_plane_pids(state_file: Path) -> dict[str, int]:
    """``{process name: pid}`` of the harness processes in ``CONTROL_PLANE`` from a cluster's ``state.json``;
    {} when the file is absent or unreadable (a cluster not started by the harness)."""
    try:
        state = json.loads(state_file.read_text())
    except (OSError, ValueError):
        return {}
    processes = state.get("processes") or {}
    return {name: int(processes[name]["pid"]) for name in CONTROL_PLANE if name in processes}


@dataclass(frozen=True)
class CpuSplit:
    """CPU seconds per process over one window: ``seconds`` (wall) and ``cpu`` (name -> CPU seconds)."""

    seconds: float
    cpu: Mapping[str, float]

    def describe(self, units: int, unit: str) -> str:
        """One line: total CPU, its share of 2 cores' wall time, and per process (ms per ``unit``)."""
        total = sum(self.cpu.values())
        cores = os.cpu_count() or 1
        parts = ", ".join(f"{name} {cpu:.1f} s ({cpu / units * 1000:.0f} ms/{unit})"
                          for name, cpu in sorted(self.cpu.items(), key=lambda kv: -kv[1]) if cpu > 0)
        busy = total / (self.seconds * cores) if self.seconds > 0 else 0.0
        return (f"{total:.1f} CPU-s in {self.seconds:.1f} s ({busy:.0%} of {cores} cores; {total / units * 1000:.0f} "
                f"ms/{unit}): {parts}")


class CpuMeter:
    """Snapshots of ``cpu_seconds`` for named pids: ``start()``, then ``stop()`` -> ``CpuSplit``."""

    def __init__(self, pids: Mapping[str, int]) -> None:
        self.pids = dict(pids)
        self._began: dict[str, float] = {}
        self._began_at = 0.0

    def start(self, now: float) -> None:
        """Remember every process's CPU at wall time ``now`` (monotonic seconds)."""
        self._began = {name: cpu_seconds(pid) for name, pid in self.pids.items()}
        self._began_at = now

    def add(self, name: str, pid: int) -> None:
        """Count one more process from now on (e.g. the operator, started after the window opened)."""
        self.pids[name] = pid
        self._began[name] = cpu_seconds(pid)

    def stop(self, now: float) -> CpuSplit:
        """CPU used by each process since ``start`` (a process that ended reads as 0)."""
        used = {name: max(0.0, cpu_seconds(pid) - self._began.get(name, 0.0)) for name, pid in self.pids.items()}
        return CpuSplit(seconds=now - self._began_at, cpu=used)
