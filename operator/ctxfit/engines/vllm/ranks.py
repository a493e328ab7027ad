"""vLLM data parallelism with one API server per rank (external load balancing), for InferencePool members.

vLLM's external load-balancing mode serves a port per rank: ``vllm serve ... --data-parallel-size N
--data-parallel-rank R --port P+R`` started once per rank, each with its own GPUs (vLLM ``config/parallel.py``
``data_parallel_external_lb``: "useful for a one-pod-per-rank wide-EP setup in Kubernetes. Set implicitly when
--data-parallel-rank is provided explicitly to vllm serve"; ``engine/arg_utils.py`` ``create_engine_config``
asserts ``data_parallel_size_local`` is 1 then; read in 0.10.2 and 0.19.0). Ranks on one host share the
default ``--data-parallel-address`` 127.0.0.1 and RPC port (vLLM docs "Data Parallel Deployment", external
load balancing). The launcher and the readiness probe are ``ctxfit.engines.ranks``'. Versions before
``RANK_PORTS_SINCE`` run data parallelism behind one port.
"""

from __future__ import annotations

from ctxfit.api import InferenceServerSpec
from ctxfit.api.routing import rank_ports_apply

from .. import ranks as shared

RANK_PORTS_SINCE = (0, 10, 0)
"""Oldest vLLM whose ``vllm serve`` takes ``--data-parallel-rank`` for external load balancing (verified in
0.10.2 ``engine/arg_utils.py``; the external mode predates it, but 0.10.2 is the oldest wheel read)."""

RANK_FLAG = "--data-parallel-rank"


def rank_ports(spec: InferenceServerSpec) -> tuple[int, ...]:
    """The pod's API ports: ``serving.port + r`` per rank in external-LB mode, else ``(serving.port,)``."""
    from ctxfit.vocab.version import parse_version

    pooled = spec.routing.inference_pool is not None
    version = parse_version(spec.engine.version, default=(0, 20, 0))
    per_rank = rank_ports_apply("vllm", spec.nodes, spec.parallelism.data, pooled) and version >= RANK_PORTS_SINCE
    return shared.rank_ports(spec, per_rank)


def rank_launch(spec: InferenceServerSpec, program: tuple[str, ...], args: list[str]) -> tuple[list[str], list[str]]:
    """``(command, args)`` of the rank launcher for ``vllm serve`` (each rank gets ``--data-parallel-rank R``;
    ``--data-parallel-size N`` stays, as external load balancing needs it).

    Raises:
        ValueError: ``args`` has no ``--port`` value to take over (engine_args always renders one).
    """
    return shared.rank_launch(spec, program, args, rank_flag=RANK_FLAG)


readiness_command = shared.readiness_command
RANKS_SCRIPT = shared.RANKS_SCRIPT
READY_SCRIPT = shared.READY_SCRIPT
