"""vLLM across several nodes: Ray for the versions that need it, the native multiprocessing mode after.

- vLLM < 0.11.1: multi-node runs only on Ray (``ParallelConfig.distributed_executor_backend`` falls back
  to ``ray`` when the world size exceeds the node's GPUs; docs "Distributed Inference and Serving": "multi-node
  inferencing currently requires Ray"). The leader starts the Ray head, waits until ``LWS_GROUP_SIZE``
  nodes have joined, then runs ``vllm serve ... --distributed-executor-backend ray``; workers run
  ``ray start --address LEADER:6379 --block``.
- vLLM >= 0.11.1: the multiprocessing executor spans nodes (``vllm/config/parallel.py`` ``ParallelConfig``
  fields ``nnodes``, ``node_rank``, ``master_addr``, ``master_port``; ``vllm/engine/arg_utils.py`` flags
  ``--nnodes --node-rank --master-addr --master-port``; nodes other than rank 0 run ``--headless``, i.e.
  workers without the API server).
"""

from __future__ import annotations

from ctxfit.api import EffectiveConfig, InferenceServerSpec
from ctxfit.vocab.version import parse_version

from ..group import GROUP_SIZE_ENV, LEADER_ADDRESS_ENV, WORKER_INDEX_ENV, GroupRoles
from . import COMMAND

NATIVE_MULTINODE_SINCE = (0, 11, 1)
"""First vLLM release whose mp executor spans nodes (``--nnodes``/``--node-rank``/``--master-addr``)."""
DEFAULT_VERSION = (0, 20, 0)
"""Version assumed when ``spec.engine.version`` is unset (``ctxfit.vocab.inputs.DEFAULT_ENGINE_VERSION``)."""
MASTER_PORT = 29500
"""torch.distributed rendezvous port of the native mode (the PyTorch default ``MASTER_PORT``)."""
RAY_PORT = 6379
"""Ray GCS port (``ray start --head`` default, ``ray_constants.DEFAULT_PORT``)."""
RAY_OBJECT_STORE_FRACTION = 0.3
"""Ray's object store defaults to 30% of the container's memory (``ray_constants``
``DEFAULT_OBJECT_STORE_MEMORY_PROPORTION``) and lives in /dev/shm, so /dev/shm must hold it too."""

_WAIT_FOR_RAY_NODES = (
    'until [ "$(python3 -c \'import ray; ray.init(address="auto", logging_level="ERROR"); '
    'print(sum(1 for n in ray.nodes() if n["Alive"]))\')" -ge "${' + GROUP_SIZE_ENV + '}" ]; do sleep 5; done'
)


def uses_ray(spec: InferenceServerSpec) -> bool:
    """True for vLLM versions before ``NATIVE_MULTINODE_SINCE`` (multi-node needs a Ray cluster)."""
    return parse_version(spec.engine.version, default=DEFAULT_VERSION) < NATIVE_MULTINODE_SINCE


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
