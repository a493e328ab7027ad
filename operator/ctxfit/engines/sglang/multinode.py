"""SGLang across several nodes: every pod runs ``sglang.launch_server`` with its node rank.

``python3 -m sglang.launch_server ... --nnodes N --node-rank R --dist-init-addr HOST:PORT``
(``sglang/srt/server_args.py`` ``ServerArgs.nnodes``, ``node_rank``, ``dist_init_addr``): rank 0 (the LWS
leader, ``LWS_WORKER_INDEX`` 0) serves the HTTP API; ranks >= 1 run only their schedulers and wait
(``sglang/srt/entrypoints/engine.py`` ``_launch_subprocesses``: ``if server_args.node_rank >= 1``).
"""

from __future__ import annotations

from ctxfit.api import EffectiveConfig, InferenceServerSpec

from ..group import LEADER_ADDRESS_ENV, WORKER_INDEX_ENV, GroupRoles
from . import COMMAND

DIST_INIT_PORT = 20000
"""torch.distributed init port on the leader (the port SGLang's multi-node examples use)."""


def sglang_group_roles(spec: InferenceServerSpec, effective: EffectiveConfig,
                       engine_args: list[str]) -> GroupRoles:
    """Leader and worker wiring for SGLang: same program, node rank from the LWS worker index."""
    command = list(COMMAND)
    rendezvous = ["--nnodes", str(spec.nodes), "--node-rank", f"$({WORKER_INDEX_ENV})",
                  "--dist-init-addr", f"$({LEADER_ADDRESS_ENV}):{DIST_INIT_PORT}"]
    return GroupRoles(
        leader_command=command, leader_args=[*engine_args, *rendezvous],
        worker_command=command, worker_args=[*engine_args, *rendezvous],
        shm_bytes=effective.shm_bytes, uses_ray=False,
        wiring="SGLang: --nnodes/--node-rank from LWS_WORKER_INDEX, --dist-init-addr on the LWS leader",
    )
