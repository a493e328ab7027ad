"""vLLM data parallelism with one API server per rank (external load balancing), for InferencePool members.

Inside a pool the endpoint picker routes to each data-parallel rank itself: the pool lists one target port per
rank (GIE v1 ``targetPorts``: "every port will be treated as a distinctive endpoint by EPP"). vLLM's external
load-balancing mode serves exactly that: ``vllm serve ... --data-parallel-size N --data-parallel-rank R
--port P+R`` started once per rank, each with its own GPUs (vLLM ``config/parallel.py``
``data_parallel_external_lb``: "useful for a one-pod-per-rank wide-EP setup in Kubernetes. Set implicitly when
--data-parallel-rank is provided explicitly to vllm serve"; ``engine/arg_utils.py`` ``create_engine_config``
asserts ``data_parallel_size_local`` is 1 then; read in 0.10.2 and 0.19.0). Ranks on one host share the
default ``--data-parallel-address`` 127.0.0.1 and RPC port (vLLM docs "Data Parallel Deployment", external
load balancing).

The container runs ``RANKS_SCRIPT`` with ``python3`` (the image's own interpreter): it starts every rank with
``CUDA_VISIBLE_DEVICES`` set to that rank's ``tensor x pipeline`` GPUs (the container sees its GPUs as
0..count-1), forwards SIGTERM/SIGINT to all of them, and when one exits stops the others and exits with that
code, so a crashed rank fails the container exactly as a crashed single engine does (restart, logs, failure
classification unchanged). All ranks write to the container's log (their lines interleave; the start-up
parsers aggregate per field). Versions before ``RANK_PORTS_SINCE`` run data parallelism behind one port.
"""

from __future__ import annotations

from ctxfit.api import InferenceServerSpec
from ctxfit.api.routing import rank_ports_apply

RANK_PORTS_SINCE = (0, 10, 0)
"""Oldest vLLM whose ``vllm serve`` takes ``--data-parallel-rank`` for external load balancing (verified in
0.10.2 ``engine/arg_utils.py``; the external mode predates it, but 0.10.2 is the oldest wheel read)."""

RANKS_SCRIPT = """\
import os, signal, subprocess, sys
ranks, per_rank, base = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
program = sys.argv[4:]
procs = []
for rank in range(ranks):
    env = dict(os.environ, CUDA_VISIBLE_DEVICES=",".join(str(rank * per_rank + i) for i in range(per_rank)))
    argv = program + ["--port", str(base + rank), "--data-parallel-rank", str(rank)]
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
"""The rank launcher (argv: ranks, GPUs per rank, base port, then the engine's program and flags). 25 s of
grace for the others stays inside the pod's 30 s ``terminationGracePeriodSeconds``."""

READY_SCRIPT = """\
import sys, urllib.request
for port in sys.argv[2:]:
    urllib.request.urlopen(f"http://127.0.0.1:{port}{sys.argv[1]}", timeout=4).close()
"""
"""Readiness of a multi-rank pod: every rank answers its health path (argv: path, ports). A pod is Ready only
when every port the pool routes to serves."""


def rank_ports(spec: InferenceServerSpec) -> tuple[int, ...]:
    """The pod's API ports: ``serving.port + r`` per rank in external-LB mode, else ``(serving.port,)``."""
    from ctxfit.vocab.version import parse_version

    p = spec.parallelism
    pooled = spec.routing.inference_pool is not None
    version = parse_version(spec.engine.version, default=(0, 20, 0))
    if rank_ports_apply("vllm", spec.nodes, p.data, pooled) and version >= RANK_PORTS_SINCE:
        return tuple(spec.serving.port + r for r in range(p.data))
    return (spec.serving.port,)


def rank_launch(spec: InferenceServerSpec, program: tuple[str, ...], args: list[str]) -> tuple[list[str], list[str]]:
    """``(command, args)`` of the rank launcher for ``program args`` (``--port`` is the launcher's per rank).

    Raises:
        ValueError: ``args`` has no ``--port`` value to take over (engine_args always renders one).
    """
    if "--port" not in args:
        raise ValueError("vLLM arguments without --port: nothing to assign per rank")
    i = args.index("--port")
    rest = args[:i] + args[i + 2:]
    p = spec.parallelism
    return (["python3", "-c", RANKS_SCRIPT],
            [str(p.data), str(p.tensor * p.pipeline), str(spec.serving.port), *program, *rest])


def readiness_command(health_path: str, ports: tuple[int, ...]) -> list[str]:
    """The exec readiness probe's command for a multi-rank pod."""
    return ["python3", "-c", READY_SCRIPT, health_path, *map(str, ports)]
