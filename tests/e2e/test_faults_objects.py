"""Object faults on the real local control plane (reproductions from
tests/fixtures/operator-faults.md sections 1 and 6, the whitespace image of section 2, and variants).

1. Valid for the CRD, invalid for Kubernetes: refused at admission now (the API server's own message);
   what admission cannot see (a quota, a webhook) ends in ``ObjectsAccepted=False`` + a Warning Event
   with the API server's message, Ready held False without an endpoint, retried with backoff.
4. Managed flags in ``engine.args`` are refused at admission, naming the flag and the field to use.
5. A status edited by someone else is validated on read: re-planned from the spec, said in an Event.
8. Control characters in an engine's termination message never reach status or Events.
"""

from __future__ import annotations

import copy
import json
import re
import time
from typing import Any

import pytest
from kubernetes import client

from .operator_kit import (
    GROUP,
    PLURAL,
    PRODUCT,
    VERSION,
    OperatorProcess,
    ServerClient,
    base,
    condition,
    variant,
    with_sim,
)

REFUSED_AT_ADMISSION = {
    "name-64": (variant("metadata.name", "a" * 64, "a" * 64), "DNS-1035"),
    "name-1abc": (variant("metadata.name", "1abc", "1abc"), "DNS-1035"),
    "name-dot": (variant("metadata.name", "a.b", "a.b"), "DNS-1035"),
    "label-unicode": (variant("spec.pod", {"labels": {"team": "ünïcødé value"}}), "spec.pod.labels.team"),
    "label-64": (variant("spec.pod", {"labels": {"team": "x" * 64}}), "spec.pod.labels.team"),
    "label-key": (variant("spec.pod", {"labels": {"a b": "x"}}), "qualified name"),
    "annotation-key": (variant("spec.pod", {"annotations": {"-bad/": "x"}}), "qualified name"),
    "env-name": (variant("spec.engine.env", [{"name": "BAD=NAME", "value": "x"}]), "spec.engine.env[0].name"),
    "env-name-space": (variant("spec.engine.env", [{"name": "A B", "value": "x"}]), "spec.engine.env[0].name"),
    "toleration-operator": (variant("spec.pod", {"tolerations": [{"operator": "Bogus", "key": "x"}]}), "Bogus"),
    "toleration-seconds": (variant("spec.pod", {"tolerations": [{"key": "x", "operator": "Exists",
                                                                   "effect": "NoSchedule", "tolerationSeconds": 5}]}),
                           "NoExecute"),
    "toleration-empty-key": (variant("spec.pod", {"tolerations": [{"operator": "Equal", "value": "x"}]}),
                             "empty key"),
    "valuefrom-bogus": (variant("spec.engine.env", [{"name": "X", "valueFrom": {"bogus": {"a": 1}}}]), "valueFrom"),
    "valuefrom-two": (variant("spec.engine.env", [{"name": "X", "valueFrom": {
        "secretKeyRef": {"name": "s", "key": "k"}, "configMapKeyRef": {"name": "c", "key": "k"}}}]), "exactly one"),
    "valuefrom-fieldpath": (variant("spec.engine.env", [{"name": "X", "valueFrom": {
        "fieldRef": {"fieldPath": "spec.containers[0].image"}}}]), "fieldPath"),
    "version-shell": (variant("spec.engine.version", "1.2.3-$(reboot)"), "spec.engine.version"),
    "version-space": (variant("spec.engine.version", "0.11.0 rc"), "spec.engine.version"),
    "image-whitespace": (variant("spec.engine.image", " vllm/vllm-openai:v0.11.0 "), "spec.engine.image"),
    "image-shell": (variant("spec.engine.image", "vllm/vllm-openai:$(id)"), "spec.engine.image"),
    "cpu-1e30": (variant("spec.resources", {"cpu": "1e30"}), "resources.cpu"),
    "cpu-negative": (variant("spec.resources", {"cpu": "-1"}), "resources.cpu"),
    "gpu-product": (variant("spec.gpu.product", "NVIDIA H100 (80GB)"), "spec.gpu.product"),
    "annotation-huge": (variant("spec.pod", {"annotations": {"a": "x" * 300000}}), "spec.pod.annotations.a"),
    "memory-huge": (variant("spec.resources", {"memory": "1e30"}), "resources.memory"),
    # what the API server would refuse in the pod, refused at kubectl apply
    "subpath-backsteps": (variant("spec.model.cache", {"persistentVolumeClaim": {"claimName": "shared",
                                                                                   "subPath": "../../etc"}}),
                          "subPath"),
    "subpath-absolute": (variant("spec.model.cache", {"persistentVolumeClaim": {"claimName": "shared",
                                                                                  "subPath": "/etc"}}), "subPath"),
    "hostpath-backsteps": (variant("spec.model.cache", {"hostPath": {"path": "/models/../etc"}}), "hostPath"),
    "claim-name": (variant("spec.model.cache", {"persistentVolumeClaim": {"claimName": "Not_A_Claim"}}),
                   "claimName"),
    "token-secret-name": (variant("spec.model.tokenSecretRef", {"name": "Not_A_Secret"}), "tokenSecretRef"),
    "env-value-huge": (variant("spec.engine.env", [{"name": "X", "value": "x" * 40000}]), "spec.engine.env[0].value"),
    # class 4: tests/fixtures/operator-faults.md section 6 and variants in both spellings and both engines
    "args-section-6": (variant("spec.engine.args", ["--max-model-len", "1048576", "--port", "9999",
                                                    "--gpu-memory-utilization=0.99", "--host", "other"]),
                       "--max-model-len is set by ctxfit"),
    "args-port-equals": (variant("spec.engine.args", ["--port=9999"]), "use spec.serving.port"),
    "args-underscore": (variant("spec.engine.args", ["--gpu_memory_utilization", "0.99"]),
                        "spec.memory.gpuMemoryUtilization"),
    "args-abbreviated": (variant("spec.engine.args", ["--max-model", "1048576"]), "--max-model-len is set by ctxfit"),
    "args-tp-short": (variant("spec.engine.args", ["-tp", "2"]), "spec.parallelism.tensor"),
    "args-sglang": (variant("spec.engine", {"kind": "sglang", "args": ["--context-length=1000000"]}),
                    "--context-length is set by ctxfit"),
    "args-sglang-mem": (variant("spec.engine", {"kind": "sglang", "args": ["--mem-fraction-static", "0.95"]}),
                        "spec.memory.memFractionStatic"),
}


@pytest.mark.parametrize("case", list(REFUSED_AT_ADMISSION), ids=list(REFUSED_AT_ADMISSION))
def test_refused_at_admission_with_the_reason(api: ServerClient, case: str) -> None:
    """kubectl apply fails and the message names the field: nothing is stored, nothing retries."""
    obj, expected = REFUSED_AT_ADMISSION[case]
    result = api.kubectl_apply(obj)
    assert result.returncode != 0, f"{case} was accepted"
    assert expected in result.stderr, result.stderr
    assert not api.custom.list_namespaced_custom_object(GROUP, VERSION, api.namespace, PLURAL)["items"]


ACCEPTED = {
    "plain": base(),
    "secret-env": variant("spec.engine.env", [{"name": "TOKEN", "valueFrom": {"secretKeyRef": {"name": "hf",
                                                                                             "key": "token"}}}]),
    "field-env": variant("spec.engine.env", [{"name": "POD", "valueFrom": {"fieldRef": {
        "fieldPath": "metadata.labels['app.kubernetes.io/name']"}}}]),
    "image-digest": variant("spec.engine.image", "registry.example:5000/llm/vllm-openai:v0.11.0@sha256:" + "a" * 64),
    "cpu-millis": variant("spec.resources", {"cpu": "500m"}),
    "unmanaged-args": variant("spec.engine.args", ["--enable-prefix-caching", "--max-model-len-x", "--hostname"]),
    "tolerations": variant("spec.pod", {"tolerations": [{"operator": "Exists"},
                                                        {"key": "a/b", "operator": "Equal", "value": "v",
                                                         "effect": "NoExecute", "tolerationSeconds": 30}]}),
    "name-63": variant("metadata.name", "a" * 63, "a" * 63),
}


@pytest.mark.parametrize("case", list(ACCEPTED), ids=list(ACCEPTED))
def test_what_admission_accepts_renders_objects_kubernetes_accepts(op: OperatorProcess, api: ServerClient,
                                                                   case: str) -> None:
    """The other side of the line: accepted specs get their Deployment and Service (no refusal)."""
    obj = ACCEPTED[case]
    name = obj["metadata"]["name"]
    api.create(obj)
    api.wait(lambda: api.deployment(name, missing_ok=True), f"{name} Deployment")
    api.wait(lambda: api.service(name), f"{name} Service")
    server = api.wait_phase(name, "Ready")
    assert condition(server, "Ready")["status"] == "True"
    assert "ObjectsAccepted" not in {c["type"] for c in server["status"]["conditions"]}


def _quota(api: ServerClient, hard: dict[str, str]) -> None:
    api.core.create_namespaced_resource_quota(api.namespace, client.V1ResourceQuota(
        metadata=client.V1ObjectMeta(name="no-more"), spec=client.V1ResourceQuotaSpec(hard=hard)))
    # the quota controller must have computed usage before admission enforces it
    api.wait(lambda: (api.core.read_namespaced_resource_quota("no-more", api.namespace).status.used is not None),
             "quota status")


def _rejections(server: dict[str, Any]) -> dict[str, Any] | None:
    try:
        cond = condition(server, "ObjectsAccepted")
    except KeyError:
        return None
    return cond if cond["status"] == "False" else None


def test_service_refused_by_the_api_server_is_surfaced(op: OperatorProcess, api: ServerClient) -> None:
    """Section 1's `1abc` case (Deployment created, Service refused) through what admission cannot see: a
    ResourceQuota of zero Services. Never Ready with an endpoint; condition + Warning Event with the API
    server's message; retried with backoff, not every few seconds; recovers when the quota goes."""
    _quota(api, {"services": "0"})
    api.create(base())
    server = api.wait(lambda: _rejections(api.get("base")) and api.get("base"), "ObjectsAccepted=False")
    cond = _rejections(server)
    assert cond is not None and cond["reason"] == "ObjectRejected"
    assert "Service base" in cond["message"] and "exceeded quota" in cond["message"], cond
    warnings = api.wait(lambda: [e for e in api.events("base") if e["reason"] == "ObjectRejected"], "the Event")
    assert warnings and warnings[0]["type"] == "Warning" and "exceeded quota" in warnings[0]["message"]
    assert api.deployment("base") is not None  # the engine runs; only its Service is missing
    # the simulated engine becomes Ready: the server must still not claim to serve
    deadline = time.monotonic() + 12
    while time.monotonic() < deadline:
        status = api.get("base")["status"]
        assert status.get("phase") != "Ready" and condition(api.get("base"), "Ready")["status"] != "True", status
        assert "endpoint" not in status, status
        time.sleep(0.5)
    # backoff: 10 s, 20 s, ... -> at most 2 refusals in the first ~12 s (was one every ~5 s, forever)
    refusals = re.findall(r'ctxfit_reconcile_errors_total\{reason="rejected_403"\} (\d+)', op.scrape())
    assert refusals and 1 <= float(refusals[0]) <= 3, refusals
    assert len([e for e in api.events("base") if e["reason"] == "ObjectRejected"]) == 1
    assert "Traceback" not in op.log_path.read_text()
    api.core.delete_namespaced_resource_quota("no-more", api.namespace)
    server = api.wait_phase("base", "Ready", timeout=60)
    assert condition(server, "ObjectsAccepted")["status"] == "True"
    assert server["status"]["endpoint"].startswith("http://base.")
    assert api.service("base")


def test_deployment_refused_by_the_api_server_is_surfaced(op: OperatorProcess, api: ServerClient) -> None:
    """A quota of zero Deployments: condition + Warning Event naming the Deployment, never Ready."""
    _quota(api, {"count/deployments.apps": "0"})
    api.create(base())
    server = api.wait(lambda: _rejections(api.get("base")) and api.get("base"), "ObjectsAccepted=False")
    cond = _rejections(server)
    assert cond is not None and "Deployment base" in cond["message"] and "exceeded quota" in cond["message"]
    assert condition(server, "Ready")["status"] == "False"
    api.wait(lambda: any(e["reason"] == "ObjectRejected" and e["type"] == "Warning" for e in api.events("base")),
             "the Warning Event")
    assert api.deployment("base", missing_ok=True) is None


def _patch_status(api: ServerClient, name: str, mutate: Any) -> None:
    """Edit the stored status as a person with ``kubectl edit --subresource status`` would: read, change, replace
    with the read resourceVersion, and on 409 (the operator wrote in between, e.g. status.observed after Ready)
    read again and redo the edit, as kubectl does."""
    for _ in range(10):
        server = api.get(name)
        status = copy.deepcopy(server["status"])
        mutate(status)
        body = {"apiVersion": server["apiVersion"], "kind": server["kind"], "metadata": server["metadata"],
                "spec": server["spec"], "status": status}
        try:
            api.custom.replace_namespaced_custom_object_status(GROUP, VERSION, api.namespace, PLURAL, name, body)
            return
        except client.exceptions.ApiException as exc:
            if exc.status != 409:
                raise
            time.sleep(0.2)
    raise AssertionError(f"status of {name} kept changing: 10 conflicting edits")


def _set_context(value: int) -> Any:
    def mutate(status: dict[str, Any]) -> None:
        status["attempts"][-1]["effective"]["contextLength"] = value
        status["effective"]["contextLength"] = value
        status["contextLength"] = value
    return mutate


def _set_memory(value: str) -> Any:
    def mutate(status: dict[str, Any]) -> None:
        status["attempts"][-1]["effective"]["memoryLimit"] = value
    return mutate


def _set_started(value: str) -> Any:
    def mutate(status: dict[str, Any]) -> None:
        status["attempts"][-1]["startedAt"] = value
        status["attempts"][-1]["notBefore"] = value
    return mutate


def _set_product(value: str) -> Any:
    def mutate(status: dict[str, Any]) -> None:
        status["nodeProduct"] = value
    return mutate


STATUS_EDITS = {
    "context-minus-5": (_set_context(-5), "contextLength"),
    "context-huge": (_set_context(1 << 40), "contextLength"),
    "memory-unparsable": (_set_memory("lots"), "memoryLimit"),
    "not-before-garbage": (_set_started("yesterday"), "startedAt"),
    "product-not-a-label": (_set_product("x y; $(reboot)"), "nodeProduct"),
}


@pytest.mark.parametrize("case", list(STATUS_EDITS), ids=list(STATUS_EDITS))
def test_edited_status_is_validated_and_replanned(op: OperatorProcess, api: ServerClient, case: str) -> None:
    """Stored status is input: a bad value is never rendered; the server is re-planned from the spec."""
    mutate, field = STATUS_EDITS[case]
    api.create(base())
    api.wait_phase("base", "Ready")
    _patch_status(api, "base", mutate)
    api.wait(lambda: any(e["reason"] == "InvalidStatus" for e in api.events("base")), "InvalidStatus Event")
    event = next(e for e in api.events("base") if e["reason"] == "InvalidStatus")
    assert event["type"] == "Warning" and field in event["message"] and "planning again" in event["message"]
    server = api.wait(lambda: (api.get("base")["status"].get("phase") == "Ready"
                               and api.get("base")["status"].get("contextLength") == 32768 and api.get("base")),
                      "re-planned and Ready")
    assert server["status"]["attempts"][-1]["effective"]["contextLength"] == 32768
    assert server["status"].get("nodeProduct") == PRODUCT
    args = api.deployment("base")["spec"]["template"]["spec"]["containers"][0]["args"]
    assert args[args.index("--max-model-len") + 1] == "32768"
    assert "Traceback" not in op.log_path.read_text()


HOSTILE = ("\x1b]0;osc-title-payload\x07\x1b[31mValueError\x1b[0m: To serve at least one request with the models's "
           "max seq len (32768), (4.00 GiB KV cache is needed, which is larger than the available KV cache memory "
           "(1.00 GiB). Based on the available memory, the estimated maximum model length is 8192.\x1b[2J\x00")


def test_engine_output_is_sanitized(op: OperatorProcess, api: ServerClient) -> None:
    """Class 8: ANSI colours, an OSC title, NUL and BEL in a termination message reach neither status nor Events
    (C1 controls are covered by tests/unit/vocab/test_text.py: kwok cannot template them into a pod status)."""
    obj = with_sim(base(), "crash", message=HOSTILE, fail_if=("ctxfit.io/context-length", 8192))
    api.create(obj)
    api.wait(lambda: len(api.get("base")["status"].get("attempts", [])) >= 2, "a step-down")
    server = api.get("base")
    text = json.dumps(server["status"], ensure_ascii=False) + json.dumps(api.events("base"), ensure_ascii=False)
    # the OSC title's payload is a token no status field has ("owned" was one: status.model.ownedClaim)
    for bad in ("\x1b", "\x00", "\x07", "\x9b", "osc-title-payload"):
        assert bad not in text, (bad, text[:2000])
    assert "ValueError" in (server["status"]["attempts"][0].get("evidence") or ""), server["status"]["attempts"][0]
