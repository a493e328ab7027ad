"""vLLM across several nodes: Ray for the versions that need it, the native multiprocessing mode after.

Where each flag appeared (read in the released wheels' ``vllm/engine/arg_utils.py`` and
``vllm/entrypoints/cli/serve.py``):

- ``--headless`` and ``--data-parallel-address``: vLLM 0.9.0 (absent in 0.8.5), for multi-node *data*
  parallelism only: a headless node runs data-parallel engines, the tensor/pipeline group of one engine
  still has to fit one node.
- ``--nnodes``/``-n``, ``--node-rank``/``-r``, ``--master-addr``, ``--master-port``: vLLM 0.11.1 (absent in
  0.11.0), from "[V1] Support MP Executor for multi node distributed inference"
  (https://github.com/vllm-project/vllm/pull/23691). ``ParallelConfig`` picks the ``mp`` backend when
  ``nnodes > 1`` (``vllm/config/parallel.py``), and ``serve --headless`` on a node whose
  ``node_rank_within_dp > 0`` runs a "headless multiproc executor": the node's tensor/pipeline ranks
  without the API server (``run_headless`` in ``vllm/entrypoints/cli/serve.py``).

So:

- vLLM < 0.11.1 (and pre-releases of 0.11.1, ``0.11.1rc1``/``0.11.1.dev...``, built before or while the
  flags landed): multi-node runs only on Ray (docs "Distributed Inference and Serving": "multi-node
  inferencing currently requires Ray"). The leader starts the Ray head, waits until ``LWS_GROUP_SIZE``
  nodes have joined, then runs ``vllm serve ... --distributed-executor-backend ray``; workers run
  ``ray start --address LEADER:6379 --block``.
- vLLM >= 0.11.1: every pod runs ``vllm serve ... --nnodes N --node-rank R --master-addr LEADER
  --master-port P``; the workers (rank >= 1) add ``--headless``.
"""

from __future__ import annotations

import re

from ctxfit.api import EffectiveConfig, InferenceServerSpec
from ctxfit.vocab.version import parse_version

from ..group import GROUP_SIZE_ENV, LEADER_ADDRESS_ENV, WORKER_INDEX_ENV, GroupRoles
from . import COMMAND

NATIVE_MULTINODE_SINCE = (0, 11, 1)
"""First vLLM release whose mp executor spans nodes: ``--nnodes``/``--node-rank``/``--master-addr`` are in
0.11.1's ``vllm/engine/arg_utils.py`` and not in 0.11.0's (vllm-project/vllm pull request 23691)."""
DEFAULT_VERSION = (0, 20, 0)
"""Version assumed when ``spec.engine.version`` is unset (``ctxfit.vocab.inputs.DEFAULT_ENGINE_VERSION``)."""
MASTER_PORT = 29501
"""torch.distributed rendezvous port of the native mode: vLLM's own default (``ParallelConfig.master_port``
in ``vllm/config/parallel.py``, 0.11.1). Not 29500: that is ``ParallelConfig.data_parallel_master_port``,
which the leader also binds when data parallelism spans the nodes."""
RAY_PORT = 6379
"""Ray GCS port (``ray start --head`` default, ``ray_constants.DEFAULT_PORT``)."""
RAY_OBJECT_STORE_FRACTION = 0.3
"""Ray's object store defaults to 30% of the container's memory (``ray_constants``
``DEFAULT_OBJECT_STORE_MEMORY_PROPORTION``) and lives in /dev/shm, so /dev/shm must hold it too."""

_PRERELEASE = re.compile(r"^v?\d+\.\d+(?:\.\d+)?[.-]?(?:dev|rc|a|alpha|b|beta)\d*", re.IGNORECASE)
"""A PEP 440 pre-release or dev build of a version (``0.11.1rc1``, ``0.11.1.dev42+gabc``)."""

_WAIT_FOR_RAY_NODES = (
    'until [ "$(python3 -c \'import ray; ray.init(address="auto", logging_level="ERROR"); '
    'print(sum(1 for n in ray.nodes() if n["Alive"]))\')" -ge "${' + GROUP_SIZE_ENV + '}" ]; do sleep 5; done'
)


def uses_ray(spec: InferenceServerSpec) -> bool:
    """True for vLLM versions before ``NATIVE_MULTINODE_SINCE`` and for pre-releases of it (``0.11.1rc1``,
    ``0.11.1.dev42+g...``: builds between 0.11.0 and 0.11.1 may predate the flags); Ray runs on every version,
    the native flags only from 0.11.1. Unset version: ``DEFAULT_VERSION`` (native)."""
    version = parse_version(spec.engine.version, default=DEFAULT_VERSION)
    if version != NATIVE_MULTINODE_SINCE:
        return version < NATIVE_MULTINODE_SINCE
    return bool(_PRERELEASE.match((spec.engine.version or "").strip()))


def _quote(args: list[str]) -> str:
    return " ".join("'" + a.replace("'", "'\"'\"'") + "'" for a in args)


def vllm_group_roles(spec: InferenceServerSpec, effective: EffectiveConfig, engine_args: list[str]) -> GroupRoles:
    """Leader and worker wiring for vLLM (see the module docstring for the two modes)."""
    serve = list(COMMAND)
    if uses_ray(spec):
        shm = effective.shm_bytes + int(RAY_OBJECT_STORE_FRACTION * effective.memory_limit_bytes)
        leader = (
            f"ray start --head --port={RAY_PORT} && {_WAIT_FOR_RAY_NODES} && "
            f"exec vllm serve {_quote([*engine_args, '--distributed-executor-backend', 'ray'])}"
        )
        worker = f"exec ray start --address=${{{LEADER_ADDRESS_ENV}}}:{RAY_PORT} --block"
        return GroupRoles(
            leader_command=["/bin/sh", "-c"], leader_args=[leader],
            worker_command=["/bin/sh", "-c"], worker_args=[worker],
            shm_bytes=shm, uses_ray=True,
            wiring=f"vLLM {spec.engine.version or 'default'} < 0.11.1: Ray head on the leader, workers join it",
        )
    rendezvous = ["--nnodes", str(spec.nodes), "--master-addr", f"$({LEADER_ADDRESS_ENV})",
                  "--master-port", str(MASTER_PORT)]
    return GroupRoles(
        leader_command=serve, leader_args=[*engine_args, *rendezvous, "--node-rank", "0"],
        worker_command=serve,
        worker_args=[*engine_args, *rendezvous, "--node-rank", f"$({WORKER_INDEX_ENV})", "--headless"],
        shm_bytes=effective.shm_bytes, uses_ray=False,
        wiring="vLLM >= 0.11.1: native multi-node (--nnodes/--node-rank/--master-addr), workers --headless",
    )
