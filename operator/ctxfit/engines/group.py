"""What each pod of a multi-node group runs: leader and worker commands, /dev/shm, per engine.

``group_roles`` asks the spec's engine (``Engine.group_roles``). The LeaderWorkerSet controller
injects ``LWS_LEADER_ADDRESS`` (the leader pod's DNS name), ``LWS_GROUP_SIZE`` and ``LWS_WORKER_INDEX``
(0 on the leader) into every container (sigs.k8s.io/lws ``api/leaderworkerset/v1/leaderworkerset_types.go``,
set by its pod webhook), so arguments reference them as ``$(NAME)``, which the kubelet expands.
"""

from __future__ import annotations

from dataclasses import dataclass

from ctxfit.api import EffectiveConfig, InferenceServerSpec

LEADER_ADDRESS_ENV = "LWS_LEADER_ADDRESS"
GROUP_SIZE_ENV = "LWS_GROUP_SIZE"
WORKER_INDEX_ENV = "LWS_WORKER_INDEX"


@dataclass(frozen=True)
class GroupRoles:
    """The leader's and the workers' container command and args, and the group's /dev/shm size.

    Attributes:
        leader_command, leader_args: the leader runs the API server (and the Ray head when ``uses_ray``).
        worker_command, worker_args: workers join the leader; they serve no HTTP API.
        shm_bytes: /dev/shm size of every pod in bytes (Ray's object store lives there when used).
        uses_ray: the engine version needs a Ray cluster for multi-node.
        wiring: one line saying which multi-node mode is used and why (for plan reasons / docs).
    """

    leader_command: list[str]
    leader_args: list[str]
    worker_command: list[str]
    worker_args: list[str]
    shm_bytes: int
    uses_ray: bool
    wiring: str


def group_roles(spec: InferenceServerSpec, effective: EffectiveConfig, engine_args: list[str]) -> GroupRoles:
    """Leader/worker wiring of ``spec``'s engine for a group of ``spec.nodes`` pods.

    Args:
        spec: validated spec with ``nodes > 1``.
        effective: the configuration to run (memory limit and shm in bytes).
        engine_args: the single-node engine arguments (``Engine.engine_args``), reused by the leader.

    Raises:
        ValueError: ``spec.nodes`` is 1 (a single node runs as a Deployment).
    """
    if spec.nodes < 2:
        raise ValueError("nodes: a group needs at least 2 nodes; one node renders a Deployment")
    from . import get_engine

    return get_engine(spec.engine.kind).group_roles(spec, effective, engine_args)
