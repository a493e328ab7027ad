"""One API server per data-parallel rank in one pod, for InferencePool members (shared by the engines).

Inside a pool the endpoint picker routes to each data-parallel rank itself: the pool lists one target port per
rank (GIE v1 ``targetPorts``: "every port will be treated as a distinctive endpoint by EPP"). Each engine says
how a rank runs as a server of its own (``ctxfit.engines.vllm.ranks``: vLLM's external load balancing,
``--data-parallel-rank``; ``ctxfit.engines.sglang.ranks``: one ``sglang.launch_server`` per replica with
``SGLANG_DP_RANK``); this module holds what they share.

The container runs ``RANKS_SCRIPT`` with ``python3`` (the image's own interpreter): it starts every rank with
``CUDA_VISIBLE_DEVICES`` set to that rank's ``tensor x pipeline`` GPUs (the container sees its GPUs as
0..count-1), on port ``serving.port + rank``, with the engine's rank flag and/or rank variable; it forwards
SIGTERM/SIGINT to all of them, and when one exits stops the others and exits with that code, so a crashed rank
fails the container exactly as a crashed single engine does (restart, logs, failure classification unchanged).
All ranks write to the container's log (their lines interleave; the start-up parsers aggregate per field).
"""

from __future__ import annotations

from ctxfit.api import InferenceServerSpec

RANKS_SCRIPT = """\
import os, signal, subprocess, sys
ranks, per_rank, base = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
rank_flag, rank_env = sys.argv[4], sys.argv[5]
program = sys.argv[6:]
procs = []
for rank in range(ranks):
    env = dict(os.environ, CUDA_VISIBLE_DEVICES=",".join(str(rank * per_rank + i) for i in range(per_rank)))
    if rank_env:
        env[rank_env] = str(rank)
    argv = program + ["--port", str(base + rank)] + ([rank_flag, str(rank)] if rank_flag else [])
    procs.append(subprocess.Popen(argv, env=env))
def stop(signum, frame):
    for p in procs:
        if p.poll() is None:
            p.send_signal(signum)
signal.signal(signal.SIGTERM, stop)
signal.signal(signal.SIGINT, stop)
pid, status = os.wait()
code = os.waitstatus_to_exitcode(status)
for p in procs:
    if p.pid != pid and p.poll() is None:
        p.terminate()
for p in procs:
    if p.pid != pid:
        try:
            p.wait(timeout=25)
        except subprocess.TimeoutExpired:
            p.kill()
sys.exit(code if code >= 0 else 128 - code)
"""
"""The rank launcher (argv: ranks, GPUs per rank, base port, rank flag ("" for none), rank environment variable
("" for none), then the engine's program and flags). 25 s of grace for the others stays inside the pod's 30 s
``terminationGracePeriodSeconds``."""

READY_SCRIPT = """\
import sys, urllib.request
for port in sys.argv[2:]:
    urllib.request.urlopen(f"http://127.0.0.1:{port}{sys.argv[1]}", timeout=4).close()
"""
"""Readiness of a multi-rank pod: every rank answers its health path (argv: path, ports). A pod is Ready only
when every port the pool routes to serves."""


def rank_ports(spec: InferenceServerSpec, per_rank: bool) -> tuple[int, ...]:
    """The pod's API ports: ``serving.port + r`` per data-parallel rank when ``per_rank``, else
    ``(serving.port,)``."""
    if per_rank:
        return tuple(spec.serving.port + r for r in range(spec.parallelism.data))
    return (spec.serving.port,)


def without_flag(args: list[str], flag: str) -> list[str]:
    """``args`` without ``flag`` and its value (``--flag V`` or ``--flag=V``), every occurrence."""
    out: list[str] = []
    skip = False
    for arg in args:
        if skip:
            skip = False
            continue
        if arg == flag:
            skip = True
            continue
        if arg.startswith(flag + "="):
            continue
        out.append(arg)
    return out


def rank_launch(spec: InferenceServerSpec, program: tuple[str, ...] | list[str], args: list[str], *,
                rank_flag: str = "", rank_env: str = "") -> tuple[list[str], list[str]]:
    """``(command, args)`` of the rank launcher for ``program args`` (``--port`` is the launcher's per rank).

    ``rank_flag``: the engine flag that takes the rank ("" for none); ``rank_env``: the environment variable
    that does ("" for none).

    Raises:
        ValueError: ``args`` has no ``--port`` value to take over (the engines always render one).
    """
    if "--port" not in args:
        raise ValueError("engine arguments without --port: nothing to assign per rank")
    rest = without_flag(args, "--port")
    p = spec.parallelism
    return (["python3", "-c", RANKS_SCRIPT],
            [str(p.data), str(p.tensor * p.pipeline), str(spec.serving.port), rank_flag, rank_env,
             *program, *rest])


def readiness_command(health_path: str, ports: tuple[int, ...]) -> list[str]:
    """The exec readiness probe's command for a multi-rank pod."""
    return ["python3", "-c", READY_SCRIPT, health_path, *map(str, ports)]
