"""Processes of the local control plane: the binaries, free ports, spawning, watching and stopping.

The bottom layer of the harness (no other harness module is imported here): the harness's error type,
its log line, the polling loop every wait uses, and the process plumbing behind ``Cluster._spawn``,
``Cluster._check_alive``, ``Cluster._wait_http``, ``Cluster.running_components`` and ``Cluster.stop``.
Each component runs in its own process group (``start_new_session``), logs to its own file and is
recorded as ``{"pid", "pgid", "exe"}`` in the cluster's state.json; stopping signals exactly those
groups, and only while the PID still runs the recorded executable (a reused PID is never signalled).
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal
import socket
import ssl
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

HACK_DIR = Path(__file__).resolve().parent
REPO_DIR = HACK_DIR.parent
K8S_BINS_SCRIPT = HACK_DIR / "k8s-bins.sh"


class HarnessError(RuntimeError):
    """The local control plane could not be built, started or reached, or a wait timed out."""


def log(msg: str) -> None:
    """One timestamped harness line on stderr."""
    print(f"[cluster {time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def wait_until(pred: Callable[[], Any], timeout: float, what: str, interval: float = 0.2) -> Any:
    """Call `pred` every `interval` seconds until it returns something truthy, and return that; an exception
    counts as not yet. Raises HarnessError naming `what` (and the last exception) after `timeout` seconds."""
    deadline = time.monotonic() + timeout
    last_exc: Exception | None = None
    while True:
        try:
            val = pred()
            if val:
                return val
        except Exception as exc:  # noqa: BLE001 - polled condition
            last_exc = exc
        if time.monotonic() > deadline:
            raise HarnessError(
                f"timed out after {timeout:.0f}s waiting for {what}" + (f": {last_exc}" if last_exc else "")
            )
        time.sleep(interval)


def find_bin_dir(build: bool = True, components: tuple[str, ...] = ()) -> Path:
    """The directory with the binaries: $CTXFIT_K8S_BIN_DIR, else the last stdout line of
    hack/k8s-bins.sh (a no-op when cached; builds them otherwise). ``components``: what to build
    (``("cluster",)``: kube-*, etcd, kwok; ``("helm",)``; empty: everything, add-ons included)."""
    env = os.environ.get("CTXFIT_K8S_BIN_DIR")
    if env:
        return Path(env)
    if not build:
        raise HarnessError("CTXFIT_K8S_BIN_DIR not set")
    proc = subprocess.run(["bash", str(K8S_BINS_SCRIPT), *components], stdout=subprocess.PIPE, text=True)
    if proc.returncode != 0:
        raise HarnessError(f"hack/k8s-bins.sh failed with exit code {proc.returncode}")
    lines = [ln for ln in proc.stdout.splitlines() if ln.strip()]
    if not lines:
        raise HarnessError("hack/k8s-bins.sh printed no directory")
    return Path(lines[-1].strip())


# --------------------------------------------------------------------------------------------
# ports and PIDs


def free_ports(n: int) -> list[int]:
    """n distinct free TCP ports on 127.0.0.1 (held open together so they are distinct)."""
    socks = []
    try:
        for _ in range(n):
            s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            s.bind(("127.0.0.1", 0))
            socks.append(s)
        return [s.getsockname()[1] for s in socks]
    finally:
        for s in socks:
            s.close()


def port_listening(port: int, host: str = "127.0.0.1") -> bool:
    """True if something accepts TCP connections on host:port."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.settimeout(0.5)
        return s.connect_ex((host, port)) == 0


def pid_alive(pid: int) -> bool:
    """True if pid exists and is not a zombie."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            state = f.read().rsplit(")", 1)[1].split()[0]
        return state not in ("Z", "X")
    except (FileNotFoundError, ProcessLookupError, IndexError):
        return False


def pid_exe(pid: int) -> str | None:
    """argv[0] of a running pid (compared with the recorded executable), None if it is gone."""
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return f.read().split(b"\0", 1)[0].decode()
    except OSError:
        return None


_PRCTL: Any
try:  # resolved in the parent: the child (between fork and exec) only makes the call
    _PRCTL = ctypes.CDLL(None, use_errno=True).prctl
except (OSError, AttributeError):  # not Linux
    _PRCTL = None


def _set_pdeathsig() -> None:
    """PR_SET_PDEATHSIG(SIGKILL): the child dies when the parent (the test run) dies."""
    if _PRCTL is not None:
        _PRCTL(1, int(signal.SIGKILL))


# --------------------------------------------------------------------------------------------
# component processes


def spawn(
    exe: str, args: list[str], log_file: Path, cwd: Path, env: dict[str, str] | None, die_with_parent: bool
) -> subprocess.Popen[bytes]:
    """Start `exe args` in its own process group, stdout and stderr appended to `log_file`; with
    `die_with_parent` the child gets PR_SET_PDEATHSIG(SIGKILL)."""
    logf = open(log_file, "ab")  # noqa: SIM115 - handed to the child, closed after Popen
    proc = subprocess.Popen(
        [exe, *args],
        stdin=subprocess.DEVNULL,
        stdout=logf,
        stderr=subprocess.STDOUT,
        cwd=cwd,
        env={**os.environ, **(env or {})},
        start_new_session=True,  # own process group: stopped as a group, untouched by ^C of the shell
        preexec_fn=_set_pdeathsig if die_with_parent else None,
    )
    logf.close()
    return proc


def check_alive(name: str, proc: subprocess.Popen[bytes] | None, log_file: Path) -> None:
    """Raise HarnessError with the tail of `log_file` if the child `proc` has exited."""
    if proc is not None and proc.poll() is not None:
        tail = log_file.read_text(errors="replace")[-3000:]
        raise HarnessError(f"{name} exited with {proc.returncode}; log tail:\n{tail}")


def wait_http(
    name: str, url: str, timeout: float, ctx: ssl.SSLContext | None, check: Callable[[], None]
) -> None:
    """Poll `url` until it answers 200, calling `check` (which raises if the process died) each time."""

    def ok() -> bool:
        check()
        try:
            with urllib.request.urlopen(url, context=ctx, timeout=2) as r:
                return bool(r.status == 200)
        except (urllib.error.URLError, OSError):
            return False

    wait_until(ok, timeout, f"{name} at {url}")


def alive_processes(recorded: dict[str, dict[str, Any]]) -> dict[str, int]:
    """Name -> PID of the recorded processes that are still alive and still run the recorded binary."""
    alive = {}
    for name, info in recorded.items():
        pid = info["pid"]
        if pid_alive(pid) and pid_exe(pid) == info["exe"]:
            alive[name] = pid
    return alive


def stop_processes(
    recorded: dict[str, dict[str, Any]], children: Iterable[subprocess.Popen[bytes]], grace: float
) -> None:
    """Stop exactly the recorded processes that still run their binary (whole process groups):
    SIGTERM, then SIGKILL after `grace` seconds; reap our `children` and wait for the others to go."""
    children = list(children)
    targets = {name: recorded[name] for name in alive_processes(recorded)}
    for info in targets.values():
        with contextlib.suppress(ProcessLookupError):
            os.killpg(info["pgid"], signal.SIGTERM)
    deadline = time.monotonic() + grace
    while targets and time.monotonic() < deadline:
        for child in children:
            child.poll()
        if not any(pid_alive(i["pid"]) for i in targets.values()):
            break
        time.sleep(0.1)
    for info in targets.values():
        if pid_alive(info["pid"]):
            with contextlib.suppress(ProcessLookupError):
                os.killpg(info["pgid"], signal.SIGKILL)
    for child in children:
        with contextlib.suppress(subprocess.TimeoutExpired):
            child.wait(timeout=5)
    # also wait for non-children to disappear (they are reaped by init)
    end = time.monotonic() + 5
    while any(pid_alive(i["pid"]) for i in targets.values()) and time.monotonic() < end:
        time.sleep(0.05)
