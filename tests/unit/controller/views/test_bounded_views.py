"""The views the operator keeps per indexed object are bounded in bytes, whatever a tenant puts
into an object it labels as the operator's (``managed-by: ctxfit``, ``ctxfit.io/server``), and the bound never
hides a hand edit of the operator's own workload (bench/hostile_rss.py measures the same on the real control
plane)."""

from __future__ import annotations

import copy
import dataclasses
import json
from pathlib import Path
from typing import Any

import pytest
import yaml
from ctxfit.api import InferenceServer
from ctxfit.budget.multinode import plan_group
from ctxfit.controller.views.cache import download_view
from ctxfit.controller.views.ownership import OWNERS_KEPT, holder_of
from ctxfit.controller.views.pods import deployment_view, pod_view
from ctxfit.controller.views.workloads import MAX_LIVE_BYTES, OVERSIZED, describe_drift, drifted, live_deployment
from ctxfit.render import RenderInput, render_deployment
from ctxfit.render.cache import CLAIM_ANNOTATION
from ctxfit.render.labels import OWNER_UID_ANNOTATION
from ctxfit.render.leaderworkerset import render_workload

from tests.unit.render.renderkit import render_input

ENGINE = "engine"
KIB = 1024
GOLDEN = Path(__file__).resolve().parents[3] / "golden"
UID = "00000000-0000-4000-8000-000000000005"
VIEW_BYTES = 16 * KIB
"""What a view of one hostile object may cost, as JSON (its fields: names, uids, short texts, capped messages)."""


def size(view: Any) -> int:
    return len(json.dumps(dataclasses.asdict(view), default=str).encode())


def big_env(count: int = 36) -> list[dict[str, str]]:
    """~1.2 MB of env (36 values of 32 KiB)."""
    return [{"name": f"E{i:02d}", "value": f"{i}" + "x" * (32 * KIB - 1)} for i in range(count)]


def labelled(kind: str, name: str, **meta: Any) -> dict[str, Any]:
    return {"apiVersion": "apps/v1" if kind == "Deployment" else "v1", "kind": kind,
            "metadata": {"name": name, "namespace": "ns", "uid": f"uid-{name}",
                         "labels": {"app.kubernetes.io/managed-by": "ctxfit", "ctxfit.io/server": name}, **meta}}


def tenant_deployment(**meta: Any) -> dict[str, Any]:
    """A tenant's Deployment labelled as the operator's, with 1.2 MB of env and a 200 KiB hash annotation."""
    obj = labelled("Deployment", "billing", annotations={"ctxfit.io/pod-template-hash": "h" * (200 * KIB)}, **meta)
    obj["spec"] = {"replicas": 0, "template": {"spec": {"containers": [
        {"name": ENGINE, "image": "busybox", "env": big_env()}]}}}
    return obj


def test_a_labelled_deployment_naming_no_server_keeps_only_who_holds_it() -> None:
    view = deployment_view(tenant_deployment())
    assert view is not None and view.live is None
    assert view.template_hash == ""  # over-long: matches no rendering
    assert view.holder is not None and view.holder.owners == ()
    assert size(view) < VIEW_BYTES


def test_an_oversized_template_of_the_servers_own_workload_is_drift_and_not_kept() -> None:
    want = render_deployment(render_input("kimi-128k"))
    edited = copy.deepcopy(want)
    edited["metadata"]["uid"] = "deployment-uid"
    edited["spec"]["template"]["spec"]["containers"][0].setdefault("env", []).extend(big_env())
    view = deployment_view(edited)
    assert view is not None and view.live is not None and view.holder is not None
    assert view.holder.owns(UID, "Deployment")
    assert view.live.fields_json == "" and view.live.oversized > MAX_LIVE_BYTES
    assert size(view) < VIEW_BYTES
    assert drifted(want, view.live, ENGINE) == [OVERSIZED]
    assert "more than any rendering" in describe_drift([OVERSIZED], want, view.live, ENGINE)
    small = copy.deepcopy(want)  # a small hand edit is still named field by field
    small["spec"]["template"]["spec"]["containers"][0]["image"] = "evil:1"
    assert drifted(want, live_deployment(small, ENGINE), ENGINE) == ["container.image"]


def at_every_bound(spec: dict[str, Any]) -> dict[str, Any]:
    """``spec`` with every free-form field the CRD and the operator admit at its bound."""
    engine = spec["engine"]
    engine["env"] = [{"name": f"E{i}", "value": "v" * (32 * KIB)} for i in range(2)]  # 64 KiB in all
    engine["args"] = [f"--chat-template={i:03d}" + "c" * (1024 - 19) for i in range(128)]
    pod = spec.setdefault("pod", {})
    pod["annotations"] = {f"bench.ctxfit.io/a{i:02d}": "a" * (3 * KIB) for i in range(64)}
    pod["labels"] = {f"bench.ctxfit.io/l{i:02d}": "l" * 63 for i in range(60)}
    return spec


@pytest.mark.parametrize("case", ["kimi-128k", "multinode/vllm-native-2x8", "multinode/sglang-2x8"])
def test_the_largest_rendering_the_spec_admits_is_under_the_bound(case: str) -> None:
    body = yaml.safe_load((GOLDEN / case / "inferenceserver.yaml").read_text())
    body["spec"] = at_every_bound(body["spec"])
    server = InferenceServer.model_validate(body)
    result, _ = plan_group(server.spec)
    assert result.fits, result.reasons
    inp = RenderInput(name=server.metadata.name, namespace="inference", uid=UID, spec=server.spec,
                      effective=result.effective, attempt=1, gpu_product=server.spec.gpu.product)
    workload = render_workload(inp)
    live = live_deployment(workload, ENGINE)
    assert live.oversized == 0
    assert len(live.fields_json.encode()) > 300 * KIB, "the bounds were not reached: the test proves nothing"
    assert len(live.fields_json.encode()) < MAX_LIVE_BYTES * 0.9
    assert drifted(workload, live, ENGINE) == []


def test_a_holder_is_bounded_whatever_the_metadata() -> None:
    refs = [{"apiVersion": "ctxfit.io/v1alpha1", "kind": "InferenceServer", "name": "x" * 300,
             "uid": f"{i}" + "u" * (10 * KIB), "controller": i == 0} for i in range(200)]
    refs += [{"apiVersion": "ctxfit.io/v1alpha1", "kind": "InferenceServer", "name": "s", "uid": f"uid-{i}"}
             for i in range(200)]
    obj = labelled("Deployment", "billing", ownerReferences=refs,
                   annotations={OWNER_UID_ANNOTATION: "m" * (200 * KIB)})
    holder = holder_of(obj)
    assert holder is not None
    assert len(holder.owners) == OWNERS_KEPT and all(len(uid) < 64 for _, uid in holder.owners)
    assert holder.marker == "" and not holder.owns("m" * (200 * KIB), "PersistentVolumeClaim")
    assert len(holder.controller.encode()) <= 512
    assert size(holder) < VIEW_BYTES


def test_a_labelled_pod_view_is_bounded() -> None:
    pod = labelled("Pod", "billing-pod", annotations={CLAIM_ANNOTATION: "c" * (200 * KIB)},
                   ownerReferences=[{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "r" * (100 * KIB),
                                     "uid": "rs", "controller": True}])
    pod["spec"] = {"initContainers": [{"name": "model-download", "image": "x"}],
                   "containers": [{"name": ENGINE, "image": "i" * (200 * KIB), "env": big_env()}]}
    pod["status"] = {"phase": "Pending", "message": "m" * (100 * KIB), "conditions": [
        {"type": "PodScheduled", "status": "False", "message": "s" * (100 * KIB)}]}
    view = pod_view(pod)
    assert view.facts.owner_replicaset is None and view.facts.image is not None
    assert size(view) < VIEW_BYTES
    download = download_view(pod)
    assert download is not None and download.claim == ""


def test_a_kept_workload_view_is_compressed_and_reads_back_the_same() -> None:
    """The compared fields kept per Deployment are zlib'd JSON: smaller than the text, the same fields when read,
    and equal renderings give equal (hashable) views, so an unchanged Deployment still enqueues nothing."""
    inp = render_input("kimi-128k")
    workload = render_deployment(inp)
    live = live_deployment(workload, ENGINE)
    assert live.oversized == 0 and len(live.fields_zlib) < len(live.fields_json.encode()) / 2
    assert json.loads(live.fields_json) == live.fields and drifted(workload, live, ENGINE) == []
    again = live_deployment(copy.deepcopy(workload), ENGINE)
    assert again == live and hash(again) == hash(live)
    edited = copy.deepcopy(workload)
    edited["spec"]["template"]["spec"]["containers"][0]["args"].append("--enforce-eager")
    assert live_deployment(edited, ENGINE) != live and drifted(edited, live, ENGINE) == ["container.args"]
