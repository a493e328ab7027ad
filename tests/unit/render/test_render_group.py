"""Multi-node rendering: LeaderWorkerSet golden files per engine and the group contracts.

Golden files: ``tests/golden/multinode/<case>/inferenceserver.yaml`` -> ``expected.yaml`` (LeaderWorkerSet
and the leader-only Service for attempt 1 of the planner's configuration). Regenerate only on purpose:
``CTXFIT_UPDATE_GOLDEN=1 pytest tests/unit/render/test_render_group.py``.
"""

from __future__ import annotations

import os
from dataclasses import replace
from typing import Any

import pytest
import yaml
from ctxfit.engines.vllm.multinode import MASTER_PORT, RAY_PORT, uses_ray
from ctxfit.render import RenderInput, render_deployment
from ctxfit.render.leaderworkerset import (
    WORKER_INDEX_LABEL,
    render_group_service,
    render_leaderworkerset,
    render_workload,
)

from tests.unit.render.groupkit import CASES, GOLDEN, UID, render_input


def containers(lws: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    t = lws["spec"]["leaderWorkerTemplate"]
    return t["leaderTemplate"]["spec"]["containers"][0], t["workerTemplate"]["spec"]["containers"][0]


def test_every_engine_has_a_golden_case() -> None:
    engines = {yaml.safe_load((GOLDEN / c / "inferenceserver.yaml").read_text())["spec"]["engine"]["kind"]
               for c in CASES}
    assert engines == {"vllm", "sglang"}


@pytest.mark.parametrize("case", CASES)
def test_golden(case: str) -> None:
    inp = render_input(case)
    docs = [render_leaderworkerset(inp), render_group_service(inp)]
    expected = GOLDEN / case / "expected.yaml"
    text = yaml.safe_dump_all(docs, sort_keys=False, width=120)
    if os.environ.get("CTXFIT_UPDATE_GOLDEN") == "1":
        expected.write_text(text)
    assert expected.exists(), f"missing {expected}: run with CTXFIT_UPDATE_GOLDEN=1"
    assert list(yaml.safe_load_all(expected.read_text())) == docs


@pytest.mark.parametrize("case", CASES)
def test_group_shape(case: str) -> None:
    inp = render_input(case)
    lws = render_leaderworkerset(inp)
    spec = lws["spec"]
    assert lws["apiVersion"] == "leaderworkerset.x-k8s.io/v1" and lws["kind"] == "LeaderWorkerSet"
    assert spec["leaderWorkerTemplate"]["size"] == inp.spec.nodes == 2
    assert spec["leaderWorkerTemplate"]["restartPolicy"] == "RecreateGroupOnPodRestart"
    leader, worker = containers(lws)
    assert {"startupProbe", "readinessProbe", "livenessProbe", "ports"} <= set(leader)
    assert not {"startupProbe", "readinessProbe", "livenessProbe", "ports"} & set(worker)
    for role in ("leaderTemplate", "workerTemplate"):
        pod = spec["leaderWorkerTemplate"][role]["spec"]
        assert pod["nodeSelector"] == {"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"}
        term = pod["affinity"]["podAntiAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"][0]
        assert term["topologyKey"] == "kubernetes.io/hostname"
        assert term["matchLabelKeys"] == ["leaderworkerset.sigs.k8s.io/group-key"]
        assert pod["containers"][0]["resources"]["limits"]["nvidia.com/gpu"] == "8"
    assert render_group_service(inp)["spec"]["selector"] == {"ctxfit.io/server": inp.name, WORKER_INDEX_LABEL: "0"}


def test_vllm_before_native_multinode_uses_ray_and_sizes_shm_for_its_object_store() -> None:
    inp = render_input("vllm-ray-2x8")
    lws = render_leaderworkerset(inp)
    leader, worker = containers(lws)
    assert leader["command"] == worker["command"] == ["/bin/sh", "-c"]
    assert "ray start --head" in leader["args"][0] and "'--distributed-executor-backend' 'ray'" in leader["args"][0]
    assert "${LWS_GROUP_SIZE}" in leader["args"][0]
    assert worker["args"] == ["exec ray start --address=${LWS_LEADER_ADDRESS}:6379 --block"]
    shm = lws["spec"]["leaderWorkerTemplate"]["workerTemplate"]["spec"]["volumes"][0]["emptyDir"]["sizeLimit"]
    # effective shm 16Gi + 30% of the 500Gi container memory limit (Ray's default object store)
    assert shm == "166Gi"


def test_vllm_native_multinode_has_rank_and_headless_workers() -> None:
    leader, worker = containers(render_leaderworkerset(render_input("vllm-native-2x8")))
    assert leader["command"] == worker["command"] == ["vllm", "serve"]
    for c, rank in ((leader, "0"), (worker, "$(LWS_WORKER_INDEX)")):
        a = c["args"]
        assert a[a.index("--nnodes") + 1] == "2"
        assert a[a.index("--node-rank") + 1] == rank
        assert a[a.index("--master-addr") + 1] == "$(LWS_LEADER_ADDRESS)"
    assert "--headless" in worker["args"] and "--headless" not in leader["args"]


@pytest.mark.parametrize(("version", "ray"), [
    ("0.8.5", True),
    ("0.11.0", True),  # no --nnodes/--node-rank/--master-addr in 0.11.0's arg_utils.py
    ("v0.11.0", True),
    ("0.11.1rc1", True),  # pre-releases of the boundary may predate the flags
    ("0.11.1.dev42+g1234abc", True),
    ("0.11.1", False),  # the flags are in 0.11.1 (vllm-project/vllm pull request 23691)
    ("v0.11.1", False),
    ("0.11.1+cu128", False),  # a local build of the release
    ("0.11.2", False),
    ("0.12.0rc1", False),
    (None, False),  # unset: DEFAULT_VERSION (0.20.0)
], ids=str)
def test_vllm_native_multinode_boundary_both_sides(version: str | None, ray: bool) -> None:
    inp = render_input("vllm-native-2x8")
    engine = inp.spec.engine.model_copy(update={"version": version})
    spec = inp.spec.model_copy(update={"engine": engine})
    assert uses_ray(spec) is ray
    leader, worker = containers(render_leaderworkerset(replace(inp, spec=spec)))
    if ray:
        assert leader["command"] == ["/bin/sh", "-c"] and "--nnodes" not in leader["args"][0]
        assert worker["args"] == [f"exec ray start --address=${{LWS_LEADER_ADDRESS}}:{RAY_PORT} --block"]
    else:
        assert leader["command"] == ["vllm", "serve"] and "ray" not in " ".join(leader["args"])
        assert worker["args"][worker["args"].index("--master-port") + 1] == str(MASTER_PORT)


def test_native_rendezvous_port_is_vllms_own_default_not_the_data_parallel_port() -> None:
    """vLLM 0.11.1 ``ParallelConfig``: ``master_port`` 29501, ``data_parallel_master_port`` 29500 (also bound on
    the leader when data parallelism spans the nodes)."""
    assert MASTER_PORT == 29501
    leader, _ = containers(render_leaderworkerset(render_input("vllm-native-2x8")))
    assert leader["args"][leader["args"].index("--master-port") + 1] == "29501"


def test_sglang_rank_from_worker_index_and_init_addr_from_leader() -> None:
    leader, worker = containers(render_leaderworkerset(render_input("sglang-2x8")))
    assert leader["args"] == worker["args"]
    a = worker["args"]
    assert a[a.index("--model-path") + 1] == "zai-org/GLM-5"
    assert a[a.index("--nnodes") + 1] == "2"
    assert a[a.index("--node-rank") + 1] == "$(LWS_WORKER_INDEX)"
    assert a[a.index("--dist-init-addr") + 1] == "$(LWS_LEADER_ADDRESS):20000"
    assert a[a.index("--tp-size") + 1] == "16"


def test_hash_changes_with_the_plan_and_workload_dispatch() -> None:
    inp = render_input("vllm-native-2x8")
    first = render_leaderworkerset(inp)["metadata"]["annotations"]["ctxfit.io/pod-template-hash"]
    smaller = render_input("vllm-native-2x8", context_length=65536)
    assert render_leaderworkerset(smaller)["metadata"]["annotations"]["ctxfit.io/pod-template-hash"] != first
    assert render_workload(inp)["kind"] == "LeaderWorkerSet"
    single = RenderInput(name="one", namespace="inference", uid=UID,
                         spec=inp.spec.model_copy(update={"nodes": 1}), effective=inp.effective, attempt=1)
    assert render_workload(single) == render_deployment(single)
    with pytest.raises(ValueError, match="nodes: a group needs at least 2 nodes"):
        render_leaderworkerset(single)
