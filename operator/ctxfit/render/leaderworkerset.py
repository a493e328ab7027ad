"""InferenceServer spec + effective configuration -> LeaderWorkerSet (``spec.nodes`` > 1; pure, deterministic).

Shape (``leaderworkerset.x-k8s.io/v1``, sigs.k8s.io/lws ``api/leaderworkerset/v1/leaderworkerset_types.go``):
``replicas`` groups of ``size = spec.nodes`` pods. Both templates start from the Deployment's pod template
(``render_pod_template``: GPUs, node selector on the GPU product, /dev/shm, ctxfit labels/annotations) and
then differ: the leader runs the API server and keeps the startup/readiness/liveness probes; workers join
it and have no probes and no HTTP port. ``restartPolicy: RecreateGroupOnPodRestart`` recreates the whole
group when any pod restarts (a worker's failure takes the group down, as the engines cannot lose a rank);
``startupPolicy: LeaderCreated`` creates the workers with the leader (a Ray head or a torch rendezvous on
the leader waits for them). A required pod anti-affinity on ``kubernetes.io/hostname`` with
``matchLabelKeys: [leaderworkerset.sigs.k8s.io/group-key]`` puts the pods of one group on different nodes.
The Service selects the leader only (``worker-index: "0"``).
"""

from __future__ import annotations

import copy
from typing import Any

from ctxfit.api import API_GROUP, API_VERSION, KIND, bytes_to_quantity
from ctxfit.engines import get_engine
from ctxfit.engines.group import GroupRoles, group_roles

from .deployment import SHM_VOLUME, RenderInput, render_deployment, render_pod_template
from .inferencepool import ROUTING_ANNOTATIONS, ROUTING_LABELS
from .labels import (
    ATTEMPT_ANNOTATION,
    TEMPLATE_HASH_ANNOTATION,
    common_labels,
    owner_reference,
    selector_labels,
    template_hash,
)
from .service import render_service

LWS_API_VERSION = "leaderworkerset.x-k8s.io/v1"
LWS_KIND = "LeaderWorkerSet"
LWS_PLURAL = "leaderworkersets"
WORKER_INDEX_LABEL = "leaderworkerset.sigs.k8s.io/worker-index"
GROUP_KEY_LABEL = "leaderworkerset.sigs.k8s.io/group-key"
GROUP_INDEX_LABEL = "leaderworkerset.sigs.k8s.io/group-index"
HOSTNAME_TOPOLOGY = "kubernetes.io/hostname"
SHM_ANNOTATION = "ctxfit.io/shm-bytes"
"""Set to the group's /dev/shm size (larger than the effective one when Ray's object store lives there)."""
ROLE_LABEL = "ctxfit.io/role"
"""``leader`` or ``worker`` on the pods (lets tests and the simulated engine tell them apart)."""


def _group_spread(name: str) -> dict[str, Any]:
    return {"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [{
        "labelSelector": {"matchLabels": selector_labels(name)},
        "matchLabelKeys": [GROUP_KEY_LABEL],
        "topologyKey": HOSTNAME_TOPOLOGY,
    }]}}


def _role_template(base: dict[str, Any], inp: RenderInput, roles: GroupRoles, leader: bool) -> dict[str, Any]:
    template = copy.deepcopy(base)
    labels = {**template["metadata"]["labels"], ROLE_LABEL: "leader" if leader else "worker"}
    if not leader:  # workers serve no API: never in a pool, no context labels
        labels = {k: v for k, v in labels.items() if k not in ROUTING_LABELS}
        for key in ROUTING_ANNOTATIONS:
            template["metadata"]["annotations"].pop(key, None)
    template["metadata"]["labels"] = dict(sorted(labels.items()))
    template["metadata"]["annotations"][SHM_ANNOTATION] = str(roles.shm_bytes)
    pod = template["spec"]
    container = pod["containers"][0]
    container["command"] = list(roles.leader_command if leader else roles.worker_command)
    container["args"] = list(roles.leader_args if leader else roles.worker_args)
    if not leader:
        for key in ("ports", "startupProbe", "readinessProbe", "livenessProbe"):
            container.pop(key, None)
    for volume in pod["volumes"]:
        if volume["name"] == SHM_VOLUME:
            volume["emptyDir"]["sizeLimit"] = bytes_to_quantity(roles.shm_bytes)
    pod["affinity"] = _group_spread(inp.name)
    return template


def render_leaderworkerset(inp: RenderInput) -> dict[str, Any]:
    """The engine LeaderWorkerSet, owned by the InferenceServer, carrying the hash of both templates.

    Raises:
        ValueError: ``spec.nodes`` is 1 (render a Deployment instead).
    """
    spec = inp.spec
    base = render_pod_template(inp)
    engine_args = get_engine(spec.engine.kind).engine_args(spec, inp.effective)
    roles = group_roles(spec, inp.effective, engine_args)
    leader = _role_template(base, inp, roles, leader=True)
    worker = _role_template(base, inp, roles, leader=False)
    replicas = spec.replicas if inp.replicas is None else inp.replicas
    return {
        "apiVersion": LWS_API_VERSION,
        "kind": LWS_KIND,
        "metadata": {
            "name": inp.name,
            "namespace": inp.namespace,
            "labels": common_labels(inp.name, spec.engine.kind),
            "annotations": {TEMPLATE_HASH_ANNOTATION: template_hash({"leader": leader, "worker": worker}),
                            ATTEMPT_ANNOTATION: str(inp.attempt)},
            "ownerReferences": [owner_reference(f"{API_GROUP}/{API_VERSION}", KIND, inp.name, inp.uid)],
        },
        "spec": {
            "replicas": replicas,
            "startupPolicy": "LeaderCreated",
            "rolloutStrategy": {"type": "RollingUpdate",
                                "rollingUpdateConfiguration": {"maxUnavailable": 1, "maxSurge": 0}},
            "leaderWorkerTemplate": {
                "size": spec.nodes,
                "restartPolicy": "RecreateGroupOnPodRestart",
                "leaderTemplate": leader,
                "workerTemplate": worker,
            },
        },
    }


def render_group_service(inp: RenderInput) -> dict[str, Any]:
    """The Service of a multi-node server: as ``render_service`` but selecting the leader pods only."""
    service = render_service(inp)
    service["spec"]["selector"] = {**selector_labels(inp.name), WORKER_INDEX_LABEL: "0"}
    return service


def render_service_for(inp: RenderInput) -> dict[str, Any]:
    """The Service: selecting the leaders for ``spec.nodes`` > 1, every engine pod otherwise."""
    return render_group_service(inp) if inp.spec.nodes > 1 else render_service(inp)


def render_workload(inp: RenderInput) -> dict[str, Any]:
    """The engine workload: a Deployment for one node, a LeaderWorkerSet for ``spec.nodes`` > 1."""
    return render_leaderworkerset(inp) if inp.spec.nodes > 1 else render_deployment(inp)
