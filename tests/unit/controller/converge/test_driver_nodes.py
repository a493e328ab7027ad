"""Nodes with a driver too old for the engine image are not chosen; a node that failed so is excluded."""

from __future__ import annotations

from dataclasses import replace
from datetime import timedelta
from typing import Any

import pytest
from ctxfit.api import InferenceServerSpec
from ctxfit.api.status import Attempt, AttemptOutcome, EffectiveStatus, InferenceServerStatus
from ctxfit.controller.converge import converge
from ctxfit.controller.views.nodes import failed_driver_nodes, node_cuda, required_cuda
from ctxfit.controller.views.pods import describe_nodes, eligible_nodes, gpu_node
from ctxfit.recovery import Failure, FailureKind, initial_effective
from ctxfit.render import RenderInput, render_deployment

from tests.unit.controller.builders import NOW, RTX, SETTINGS, applied, diagnosed, never, pod, snapshot, spec


def node(name: str, labels: dict[str, str]) -> dict[str, Any]:
    return {"metadata": {"name": name, "labels": {"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3", **labels}},
            "status": {"allocatable": {"nvidia.com/gpu": "8", "memory": "1Ti"}}}


@pytest.mark.parametrize(
    ("labels", "cuda"),
    [
        ({"nvidia.com/cuda.runtime-version.major": "12", "nvidia.com/cuda.runtime-version.minor": "4"}, (12, 4)),
        ({"nvidia.com/cuda.runtime.major": "12", "nvidia.com/cuda.runtime.minor": "9"}, (12, 9)),  # older GFD
        ({"nvidia.com/cuda.runtime-version.major": "13"}, (13, 0)),
        ({"nvidia.com/cuda.driver-version.major": "550"}, None),  # the driver number alone is not a CUDA version
        ({}, None),
    ],
    ids=["gfd", "gfd-deprecated", "major-only", "driver-only", "unlabelled"],
)
def test_gfd_cuda_labels(labels: dict[str, str], cuda: tuple[int, int] | None) -> None:
    assert node_cuda(labels) == cuda
    assert gpu_node(node("n", labels)).cuda == cuda


def server(engine: str = "vllm", version: str | None = None, image: str | None = None) -> InferenceServerSpec:
    eng: dict[str, Any] = {"kind": engine}
    if version:
        eng["version"] = version
    if image:
        eng["image"] = image
    return InferenceServerSpec.model_validate({"model": {"name": "Qwen/Qwen3-8B"}, "engine": eng,
                                               "gpu": {"count": 1}})


@pytest.mark.parametrize(
    ("engine", "version", "image", "needed"),
    [
        ("vllm", "0.4.2", None, (12, 1)),
        ("vllm", "0.6.3", None, (12, 4)),
        ("vllm", "0.9.0", None, (12, 8)),
        ("vllm", None, None, (12, 8)),
        ("sglang", "0.5.5", None, (12, 9)),
        ("sglang", "0.4.6", None, None),
        ("vllm", None, "registry.local/vllm:v0.10.0-cu126", (12, 6)),
        ("vllm", None, "registry.local/vllm:latest", None),
    ],
)
def test_required_cuda_of_the_image(engine: str, version: str | None, image: str | None,
                                    needed: tuple[int, int] | None) -> None:
    assert required_cuda(server(engine, version, image)) == needed


@pytest.mark.parametrize(
    ("operator_image", "image", "needed"),
    [
        ("registry.local/vllm:v0.10.0-cu126", None, (12, 6)),
        ("registry.local/vllm:latest", None, None),
        ("registry.local/vllm:v0.10.0-cu126", "registry.local/vllm:v0.10.0-cu130", (13, 0)),
    ],
    ids=["operator-image-tag", "operator-image-untagged", "spec-image-wins"],
)
def test_required_cuda_follows_the_image_that_runs(operator_image: str, image: str | None,
                                                   needed: tuple[int, int] | None) -> None:
    """One precedence rule (``render.engine_image``): the operator's image counts, as the renderer uses it."""
    spec_ = server("vllm", "0.9.0", image)
    assert required_cuda(spec_, operator_image) == needed
    inp = RenderInput(name="s", namespace="ns", uid="u", spec=spec_, effective=initial_effective(spec_), attempt=1,
                      image=operator_image)
    container = render_deployment(inp)["spec"]["template"]["spec"]["containers"][0]
    assert container["image"] == (image or operator_image)


def test_eligible_nodes_skip_an_old_driver_and_say_why() -> None:
    old = gpu_node(node("old", {"nvidia.com/cuda.runtime-version.major": "12",
                                "nvidia.com/cuda.runtime-version.minor": "4"}))
    new = gpu_node(node("new", {"nvidia.com/cuda.runtime-version.major": "12",
                                "nvidia.com/cuda.runtime-version.minor": "8"}))
    unknown = gpu_node(node("unknown", {}))
    s = server("vllm", "0.10.1")
    assert [n.name for n in eligible_nodes(s, [old, new, unknown])] == ["new", "unknown"]
    assert [n.name for n in eligible_nodes(server("vllm", "0.8.5"), [old])] == ["old"]
    assert eligible_nodes(s, [old]) == []
    assert "old" in describe_nodes(s, [old]) and "12.8" in describe_nodes(s, [old])


def failed_status(kind: str, node_name: str | None) -> InferenceServerStatus:
    out = converge(snapshot(spec()), SETTINGS, never)
    st = out.status.model_copy(deep=True)
    first = st.attempts[0]
    first.outcome, first.failure_kind, first.node = AttemptOutcome.FAILED, kind, node_name
    st.attempts.append(Attempt(number=2, effective=EffectiveStatus.of(first.effective.to_config()),
                               started_at=first.started_at))
    return st


def terms_of(deployment: dict[str, Any]) -> list[list[dict[str, Any]]]:
    affinity = deployment["spec"]["template"]["spec"]["affinity"]["nodeAffinity"]
    return [t["matchExpressions"] for t in
            affinity["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]]


def test_failed_driver_nodes_are_excluded_by_node_affinity() -> None:
    st = failed_status("CUDADriverTooOld", "rtx-0")
    assert failed_driver_nodes(st.attempts) == ["rtx-0"]
    out = converge(snapshot(spec(), st), SETTINGS, never)
    assert out.deployment is not None
    terms = terms_of(out.deployment)
    hostname = {"key": "kubernetes.io/hostname", "operator": "NotIn", "values": ["rtx-0"]}
    assert terms and all(t[0] == hostname for t in terms)  # every ORed term excludes the node


def test_other_failures_and_unknown_nodes_only_ask_for_the_image_cuda() -> None:
    for st in (failed_status("KVCacheTooSmall", "rtx-0"), failed_status("CUDADriverTooOld", None)):
        assert failed_driver_nodes(st.attempts) == []
        out = converge(snapshot(spec(), st), SETTINGS, never)
        assert out.deployment is not None
        assert all(e["key"] != "kubernetes.io/hostname" for t in terms_of(out.deployment) for e in t)


MAJOR, MINOR = "nvidia.com/cuda.runtime-version.major", "nvidia.com/cuda.runtime-version.minor"


def matches(terms: list[list[dict[str, Any]]], labels: dict[str, str]) -> bool:
    """Kubernetes' node-affinity semantics for In/NotIn/Gt/DoesNotExist (terms ORed, expressions ANDed)."""
    def one(e: dict[str, Any]) -> bool:
        value = labels.get(e["key"])
        if e["operator"] == "DoesNotExist":
            return value is None
        if e["operator"] == "In":
            return value in e["values"]
        if e["operator"] == "NotIn":
            return value not in e["values"]
        return value is not None and int(value) > int(e["values"][0])
    return any(all(one(e) for e in t) for t in terms)


@pytest.mark.parametrize(
    ("node_labels", "allowed"),
    [
        ({MAJOR: "12", MINOR: "8"}, True),
        ({MAJOR: "12", MINOR: "9"}, True),
        ({MAJOR: "13", MINOR: "0"}, True),
        ({MAJOR: "12", MINOR: "4"}, False),
        ({MAJOR: "11", MINOR: "8"}, False),
        ({}, True),  # GFD does not describe the node: not excluded
    ],
)
def test_cuda_affinity_admits_drivers_at_or_above_the_image(node_labels: dict[str, str], allowed: bool) -> None:
    from ctxfit.render.affinity import node_affinity

    aff = node_affinity((12, 8), ())
    assert aff is not None
    terms = [t["matchExpressions"] for t in
             aff["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]]
    assert matches(terms, node_labels) is allowed
    assert node_affinity(None, ()) is None


def test_a_failed_attempt_records_its_node() -> None:
    start = converge(snapshot(spec(target=262144)), SETTINGS, never)
    failure = Failure(FailureKind.KV_CACHE_TOO_SMALL, {"estimatedMaxContextLength": 178752}, "max model len")
    failed = converge(snapshot(spec(target=262144), start.status, pods=(pod(1, terminated="Error"),),
                               deployment=applied(start), now=NOW + timedelta(seconds=30)),
                      SETTINGS, diagnosed(failure))
    assert failed.status.attempts[0].node == "rtx-0"
    assert failed.status.to_wire()["attempts"][0]["node"] == "rtx-0"  # type: ignore[index]


def test_render_is_unchanged_without_nodes_to_avoid() -> None:
    s = InferenceServerSpec.model_validate(spec())
    from ctxfit.budget.planner import plan

    eff = plan(s, node_product=RTX.product).effective
    base = RenderInput(name="k", namespace="ns", uid="u", spec=s, effective=eff, attempt=1)
    assert "affinity" not in render_deployment(base)["spec"]["template"]["spec"]
    avoided = render_deployment(replace(base, avoid_nodes=("b", "a", "b")))
    exprs = avoided["spec"]["template"]["spec"]["affinity"]["nodeAffinity"][
        "requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"][0]["matchExpressions"]
    assert exprs[0]["values"] == ["a", "b"]
