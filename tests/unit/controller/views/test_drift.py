"""Live-vs-desired comparison of the engine Deployment (``views/workloads.py``): the API server's defaults and
canonical quantities are not drift; hand edits of what ctxfit renders are."""

from __future__ import annotations

import copy
from typing import Any

import pytest
from ctxfit.controller.converge import converge
from ctxfit.controller.views.pods import deployment_view
from ctxfit.controller.views.workloads import describe_drift, drifted, live_deployment
from ctxfit.render import render_deployment

from tests.unit.render.renderkit import CASES, render_input

ENGINE = "engine"


def desired(case: str = "kimi-128k") -> dict[str, Any]:
    return render_deployment(render_input(case if case in CASES else CASES[0]))


def stored(obj: dict[str, Any]) -> dict[str, Any]:
    """``obj`` as the API server stores it: defaults filled in, quantities canonical, status added."""
    live = copy.deepcopy(obj)
    live["metadata"]["generation"] = 1
    live["status"] = {"observedGeneration": 1, "replicas": 1}
    spec = live["spec"]["template"]["spec"]
    spec.update(restartPolicy="Always", dnsPolicy="ClusterFirst", schedulerName="default-scheduler",
                securityContext={})
    for container in spec["containers"]:
        container.update(imagePullPolicy="IfNotPresent", terminationMessagePath="/dev/termination-log")
        for key in ("startupProbe", "readinessProbe", "livenessProbe"):
            probe = container.get(key)
            if probe:
                probe.setdefault("timeoutSeconds", 1)
                probe.setdefault("successThreshold", 1)
                probe.get("httpGet", {}).setdefault("scheme", "HTTP")
        for var in container.get("env") or []:
            field_ref = (var.get("valueFrom") or {}).get("fieldRef")
            if field_ref:
                field_ref.setdefault("apiVersion", "v1")
        limits = container.get("resources", {}).get("limits", {})
        if "cpu" in limits:
            limits["cpu"] = str(limits["cpu"])
    return live


@pytest.mark.parametrize("case", CASES)
def test_stored_rendering_is_not_drift(case: str) -> None:
    want = desired(case)
    assert drifted(want, live_deployment(stored(want), ENGINE), ENGINE) == []
    assert drifted(want, live_deployment(want, ENGINE), ENGINE) == []


def test_canonical_quantities_are_not_drift() -> None:
    want = desired()
    live = stored(want)
    container = live["spec"]["template"]["spec"]["containers"][0]
    container["resources"]["requests"]["cpu"] = "16000m"
    assert drifted(want, live_deployment(live, ENGINE), ENGINE) == []


def _container(obj: dict[str, Any]) -> dict[str, Any]:
    container: dict[str, Any] = obj["spec"]["template"]["spec"]["containers"][0]
    return container


def _edit_arg(obj: dict[str, Any]) -> None:
    args = _container(obj)["args"]
    args[args.index("--max-model-len") + 1] = "999999"


@pytest.mark.parametrize(("edit", "field"), [
    pytest.param(_edit_arg, "container.args", id="max-model-len"),
    pytest.param(lambda o: _container(o).update(image="other/image:latest"), "container.image", id="set-image"),
    pytest.param(lambda o: _container(o)["args"].append("--enforce-eager"), "container.args", id="extra-arg"),
    pytest.param(lambda o: _container(o).update(command=["sh", "-c", "sleep inf"]), "container.command",
                 id="command"),
    pytest.param(lambda o: _container(o).setdefault("env", []).append({"name": "X", "value": "1"}), "container.env",
                 id="added-env"),
    pytest.param(lambda o: _container(o)["resources"]["limits"].update({"nvidia.com/gpu": "1"}),
                 "container.resources", id="gpu-limit"),
    pytest.param(lambda o: _container(o)["resources"]["limits"].update(memory="1Gi"), "container.resources",
                 id="memory-limit"),
    pytest.param(lambda o: _container(o).pop("livenessProbe"), "container.livenessProbe", id="probe-removed"),
    pytest.param(lambda o: _container(o)["startupProbe"].update(failureThreshold=1), "container.startupProbe",
                 id="probe-threshold"),
    pytest.param(lambda o: o["spec"]["template"]["spec"]["volumes"].clear(), "pod.volumes", id="volumes-removed"),
    pytest.param(lambda o: _container(o)["volumeMounts"][0].update(mountPath="/tmp"), "container.volumeMounts",
                 id="mount-moved"),
])
def test_hand_edits_are_drift(edit: Any, field: str) -> None:
    want = desired()
    live = stored(want)
    edit(live)
    changed = drifted(want, live_deployment(live, ENGINE), ENGINE)
    assert field in changed, changed


def desired_with_cache() -> dict[str, Any]:
    """A rendering with the weights cache: the ``model-download`` init container and the claim volume."""
    from dataclasses import replace

    from ctxfit.api.model_cache import CacheMode
    from ctxfit.render.cache import CacheVolume

    inp = render_input("kimi-128k")
    cache = CacheVolume(CacheMode.VOLUME_CLAIM_TEMPLATE, claim_name="kimi-k25-weights", size_bytes=615 << 30)
    return render_deployment(replace(inp, cache=cache))


def _pod(obj: dict[str, Any]) -> dict[str, Any]:
    pod: dict[str, Any] = obj["spec"]["template"]["spec"]
    return pod


def _init(obj: dict[str, Any]) -> dict[str, Any]:
    init: dict[str, Any] = _pod(obj)["initContainers"][0]
    return init


@pytest.mark.parametrize(("edit", "field"), [
    pytest.param(lambda o: _pod(o)["nodeSelector"].update({"nvidia.com/gpu.product": "NVIDIA-B200"}),
                 "pod.nodeSelector", id="node-selector"),
    pytest.param(lambda o: _pod(o).pop("nodeSelector"), "pod.nodeSelector", id="node-selector-removed"),
    pytest.param(lambda o: _pod(o).update(nodeName="gpu-7"), "pod.nodeName", id="node-name"),
    pytest.param(lambda o: _pod(o).update(hostNetwork=True), "pod.hostNetwork", id="host-network"),
    pytest.param(lambda o: _pod(o).update(hostPID=True), "pod.hostPID", id="host-pid"),
    pytest.param(lambda o: _pod(o).update(serviceAccountName="admin"), "pod.serviceAccountName", id="identity"),
    pytest.param(lambda o: _pod(o).update(tolerations=[{"operator": "Exists"}]), "pod.tolerations",
                 id="tolerations-added"),
    pytest.param(lambda o: _container(o).update(securityContext={"privileged": True}), "container.securityContext",
                 id="privileged"),
    pytest.param(lambda o: _container(o).update(envFrom=[{"secretRef": {"name": "db"}}]), "container.envFrom",
                 id="env-from-secret"),
    pytest.param(lambda o: _init(o).update(image="evil/downloader:1"), "init.model-download.image",
                 id="init-image"),
    pytest.param(lambda o: _init(o).update(securityContext={"privileged": True}),
                 "init.model-download.securityContext", id="init-privileged"),
    pytest.param(lambda o: _init(o)["env"].append({"name": "HF_ENDPOINT", "value": "http://evil"}),
                 "init.model-download.env", id="init-env"),
    pytest.param(lambda o: _pod(o)["containers"].append({"name": "sidecar", "image": "busybox"}), "pod.containers",
                 id="sidecar"),
    pytest.param(lambda o: _pod(o)["initContainers"].clear(), "pod.initContainers", id="init-removed"),
    pytest.param(lambda o: _pod(o)["volumes"].append({"name": "host", "hostPath": {"path": "/"}}), "pod.volumes",
                 id="host-volume"),
    pytest.param(lambda o: o["spec"]["template"]["metadata"]["labels"].pop("ctxfit.io/server"), "pod.labels",
                 id="pod-label"),
])
def test_every_field_rendered_and_every_privilege_added_is_drift(edit: Any, field: str) -> None:
    want = desired_with_cache()
    assert drifted(want, live_deployment(stored(want), ENGINE), ENGINE) == []
    live = stored(want)
    edit(live)
    view = live_deployment(live, ENGINE)
    changed = drifted(want, view, ENGINE)
    assert field in changed, changed
    assert describe_drift(changed, want, view, ENGINE)


def test_defaults_and_additions_of_other_controllers_are_not_drift() -> None:
    """What the API server defaults, and what a webhook or ``kubectl rollout restart`` adds outside the guarded
    fields, is left alone (reverting it would fight them forever)."""
    want = desired_with_cache()
    live = stored(want)
    _pod(live).update(terminationGracePeriodSeconds=30, enableServiceLinks=True, priorityClassName="normal")
    _init(live).update(imagePullPolicy="IfNotPresent", terminationMessagePath="/dev/termination-log")
    live["spec"]["template"]["metadata"].setdefault("annotations", {})["kubectl.kubernetes.io/restartedAt"] = "now"
    _container(live)["securityContext"] = {}
    assert drifted(want, live_deployment(live, ENGINE), ENGINE) == []


def test_drift_description_names_fields_and_images() -> None:
    want = desired()
    live = stored(want)
    _edit_arg(live)
    _container(live)["image"] = "other/image:latest"
    view = live_deployment(live, ENGINE)
    text = describe_drift(drifted(want, view, ENGINE), want, view, ENGINE)
    assert "args" in text and "'other/image:latest' ->" in text and _container(want)["image"] in text
    assert "args --max-model-len 999999 -> " in text, text
    extra = stored(want)
    _container(extra)["args"].append("--enforce-eager")
    view = live_deployment(extra, ENGINE)
    assert "args removed --enforce-eager" in describe_drift(drifted(want, view, ENGINE), want, view, ENGINE)


def test_replica_failure_only_for_the_observed_generation() -> None:
    live = stored(desired())
    live["status"]["conditions"] = [{"type": "ReplicaFailure", "status": "True", "reason": "FailedCreate",
                                     "message": 'Pod "x" is invalid: spec.containers[0].image: Invalid value: '
                                                '" vllm/vllm-openai:v0.11.0 ": must not have leading or trailing '
                                                'whitespace'}]
    view = deployment_view(live)
    assert view is not None and view.live is not None and "whitespace" in (view.live.replica_failure or "")
    live["metadata"]["generation"] = 2  # the Deployment controller has not seen the new template yet
    view = deployment_view(live)
    assert view is not None and view.live is not None and view.live.replica_failure is None


def _service() -> dict[str, Any]:
    from ctxfit.render import render_service

    service = render_service(render_input(CASES[0]))
    service["spec"]["clusterIP"] = "10.96.0.17"
    service["spec"]["ports"][0]["protocol"] = "TCP"
    return service


@pytest.mark.parametrize(("edit", "port"), [
    pytest.param(lambda s: None, "rendered", id="as-rendered"),
    pytest.param(lambda s: s["spec"]["selector"].update(extra="x"), None, id="selector-key-added"),
    pytest.param(lambda s: s["spec"].update(selector={"app": "other"}), None, id="selector-replaced"),
    pytest.param(lambda s: s["spec"]["ports"][0].update(targetPort=9999), None, id="target-port"),
    pytest.param(lambda s: s["spec"].update(type="NodePort"), None, id="node-port"),
    pytest.param(lambda s: s["spec"]["ports"].append({"name": "x", "port": 1, "targetPort": 1}), None,
                 id="port-added"),
    pytest.param(lambda s: s["spec"]["ports"].append({"name": "http-rank1", "port": s["spec"]["ports"][0]["port"] + 1,
                                                     "targetPort": "http-rank1"}), "rendered",
                 id="a-data-parallel-rank-port"),
    pytest.param(lambda s: s["spec"]["ports"].append({"name": "http-rank1", "port": 9999, "targetPort": "http-rank1"}),
                 None, id="a-rank-port-moved"),
])
def test_service_edited_away_from_the_rendering_is_applied_again(edit: Any, port: str | None) -> None:
    from ctxfit.controller.views.workloads import owned_service_port

    service = _service()
    server, rendered = service["metadata"]["name"], service["spec"]["ports"][0]["port"]
    edit(service)
    assert owned_service_port(service, server) == (rendered if port else None)


# LeaderWorkerSet (multi-node): both templates, the group's size and restart policy


def desired_group(case: str = "vllm-native-2x8") -> dict[str, Any]:
    from ctxfit.render.leaderworkerset import render_leaderworkerset

    from tests.unit.render.groupkit import render_input as group_input

    return render_leaderworkerset(group_input(case))


def stored_group(obj: dict[str, Any]) -> dict[str, Any]:
    """``obj`` as stored: the LWS webhook's defaults (sigs.k8s.io/lws ``pkg/webhooks/leaderworkerset_webhook.go``
    ``Default``) and the API server's pod-template defaults in both templates."""
    live = copy.deepcopy(obj)
    live["metadata"]["generation"] = 1
    live["spec"]["networkConfig"] = {"subdomainPolicy": "Shared"}
    live["spec"]["rolloutStrategy"]["rollingUpdateConfiguration"]["partition"] = 0
    live["status"] = {"replicas": 1, "conditions": [{"type": "Available", "status": "True"}]}
    group = live["spec"]["leaderWorkerTemplate"]
    for role in ("leaderTemplate", "workerTemplate"):
        as_deployment = stored({"metadata": {}, "spec": {"template": group[role]}})
        group[role] = as_deployment["spec"]["template"]
    return live


def _group_container(lws: dict[str, Any], role: str) -> dict[str, Any]:
    container: dict[str, Any] = lws["spec"]["leaderWorkerTemplate"][f"{role}Template"]["spec"]["containers"][0]
    return container


@pytest.mark.parametrize("case", ["vllm-native-2x8", "vllm-ray-2x8", "sglang-2x8"])
def test_stored_group_rendering_is_not_drift(case: str) -> None:
    want = desired_group(case)
    view = deployment_view(stored_group(want))
    assert view is not None and view.live is not None
    assert drifted(want, view.live, ENGINE) == []
    assert {"leader.container.args", "worker.container.args", "group.size", "group.restartPolicy"} <= set(
        view.live.fields)


@pytest.mark.parametrize(("edit", "field"), [
    pytest.param(lambda g: _group_container(g, "leader").update(image="other/vllm:1"), "leader.container.image",
                 id="leader-image"),
    pytest.param(lambda g: _group_container(g, "worker")["args"].append("--enforce-eager"),
                 "worker.container.args", id="worker-args"),
    pytest.param(lambda g: _group_container(g, "worker").update(command=["sleep", "inf"]),
                 "worker.container.command", id="worker-command"),
    pytest.param(lambda g: _group_container(g, "worker").update(startupProbe={"exec": {"command": ["true"]}}),
                 "worker.container.startupProbe", id="worker-probe-added"),
    pytest.param(lambda g: g["spec"]["leaderWorkerTemplate"]["workerTemplate"]["spec"]["volumes"].pop(),
                 "worker.pod.volumes", id="worker-volume-removed"),
    pytest.param(lambda g: g["spec"]["leaderWorkerTemplate"].update(size=3), "group.size", id="size"),
    pytest.param(lambda g: g["spec"]["leaderWorkerTemplate"].update(restartPolicy="None"), "group.restartPolicy",
                 id="restart-policy"),
    pytest.param(lambda g: g["spec"]["leaderWorkerTemplate"].pop("restartPolicy"), "group.restartPolicy",
                 id="restart-policy-removed"),
])
def test_group_hand_edits_are_drift(edit: Any, field: str) -> None:
    want = desired_group()
    live = stored_group(want)
    edit(live)
    changed = drifted(want, live_deployment(live, ENGINE), ENGINE)
    assert field in changed, changed
    assert changed == [field], "only the edited field"


def test_group_drift_description_names_the_role() -> None:
    want = desired_group()
    live = stored_group(want)
    _group_container(live, "worker")["args"].append("--enforce-eager")
    _group_container(live, "leader")["image"] = "other/vllm:1"
    live["spec"]["leaderWorkerTemplate"]["size"] = 3
    view = live_deployment(live, ENGINE)
    text = describe_drift(drifted(want, view, ENGINE), want, view, ENGINE)
    image = _group_container(want, "leader")["image"]
    assert text == f"leader image 'other/vllm:1' -> {image!r}, worker args removed --enforce-eager, size 3 -> 2"


def test_group_drift_in_converge_is_reverted_with_an_event() -> None:
    """A hand edit of the LeaderWorkerSet (same hash annotation, same replicas) is applied again, with an Event."""
    from tests.unit.controller.builders import H100_0, H100_1, SETTINGS, group_spec, never, snapshot

    body = group_spec()
    nodes = (H100_0, H100_1)
    start = converge(snapshot(body, nodes=nodes), SETTINGS, never)
    assert start.deployment is not None
    same = converge(snapshot(body, start.status, nodes=nodes,
                             deployment=deployment_view(stored_group(start.deployment))), SETTINGS, never)
    assert same.deployment is None and not [e for e in same.events if e.reason.value == "DriftReverted"]
    edited = stored_group(start.deployment)
    edited["spec"]["leaderWorkerTemplate"]["size"] = 3
    _group_container(edited, "worker")["args"][-1] = "7"
    out = converge(snapshot(body, start.status, nodes=nodes, deployment=deployment_view(edited)), SETTINGS, never)
    assert out.deployment == start.deployment, "the rendering is applied again"
    drift = [e for e in out.events if e.reason.value == "DriftReverted"]
    assert len(drift) == 1 and drift[0].type == "Warning"
    assert drift[0].message == ("reverted a change to LeaderWorkerSet kimi: worker args 7 -> exec ray start "
                                "--address=${LWS_LEADER_ADDRESS}:6379 --block, size 3 -> 2")


def test_a_rendered_data_parallel_service_is_the_operators_own() -> None:
    """A vLLM server in an InferencePool serves a port per rank; its rendered Service (http, http-rank1) is seen
    as the operator's own rendering, so it is written once, not on every pass."""
    from pathlib import Path

    import yaml
    from ctxfit.api import InferenceServer
    from ctxfit.budget.multinode import plan_group
    from ctxfit.controller.views.workloads import owned_service_port
    from ctxfit.render import RenderInput
    from ctxfit.render.leaderworkerset import render_service_for

    golden = Path(__file__).resolve().parents[3] / "golden" / "gateway" / "vllm-dp2" / "inferenceserver.yaml"
    srv = InferenceServer.model_validate(yaml.safe_load(golden.read_text()))
    result, _ = plan_group(srv.spec)
    service = render_service_for(RenderInput(name=srv.metadata.name, namespace="n", uid="u", spec=srv.spec,
                                             effective=result.effective, attempt=1))
    assert len(service["spec"]["ports"]) == 2
    assert owned_service_port(service, srv.metadata.name) == 8000


def test_a_service_is_the_operators_own_only_in_the_rendering_of_the_servers_shape() -> None:
    """A multi-node server's Service selects the group leaders (``worker-index: "0"``): that rendering is the
    operator's own for ``spec.nodes`` > 1 only, and the one-node rendering for one node only (a server that changed
    shape gets its Service applied again)."""
    from ctxfit.controller.views.workloads import service_view
    from ctxfit.render.leaderworkerset import WORKER_INDEX_LABEL

    service = _service()
    service["metadata"]["ownerReferences"] = [{"apiVersion": "ctxfit.io/v1alpha1", "kind": "InferenceServer",
                                               "name": "s", "uid": "uid-1", "controller": True}]
    port = service["spec"]["ports"][0]["port"]
    plain = service_view(service, service["metadata"]["name"])
    assert (plain.port_for("uid-1"), plain.port_for("uid-1", leaders_only=True)) == (port, None)
    service["spec"]["selector"] = {**service["spec"]["selector"], WORKER_INDEX_LABEL: "0"}
    leaders = service_view(service, service["metadata"]["name"])
    assert (leaders.port_for("uid-1"), leaders.port_for("uid-1", leaders_only=True)) == (None, port)
    service["spec"]["selector"][WORKER_INDEX_LABEL] = "1"
    assert service_view(service, service["metadata"]["name"]).port_for("uid-1", leaders_only=True) is None
