"""Live-vs-desired comparison of the engine Deployment (``controller/drift.py``): the API server's defaults and
canonical quantities are not drift; hand edits of what ctxfit renders are."""

from __future__ import annotations

import copy
from typing import Any

import pytest
from ctxfit.controller.drift import describe_drift, drifted, live_deployment
from ctxfit.controller.observe import deployment_view
from ctxfit.render import render_deployment

from .test_render import CASES, render_input

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
])
def test_service_edited_away_from_the_rendering_is_applied_again(edit: Any, port: str | None) -> None:
    from ctxfit.controller.drift import owned_service_port

    service = _service()
    server, rendered = service["metadata"]["name"], service["spec"]["ports"][0]["port"]
    edit(service)
    assert owned_service_port(service, server) == (rendered if port else None)
