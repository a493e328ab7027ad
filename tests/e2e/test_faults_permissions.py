"""Who may do what, on the real local control plane, with impersonated users
(the harness admin's kubeconfig + ``kubectl --as``), as in tests/fixtures/operator-faults.md section 8.

- The chart's ``ctxfit-edit``/``ctxfit-view`` ClusterRoles aggregate into ``edit``/``admin``/``view``: whoever
  may create pods in a namespace may create InferenceServers there, a viewer may only read them.
- Operator policy (``CTXFIT_ALLOWED_IMAGE_PREFIXES``, ``CTXFIT_ALLOW_WILDCARD_TOLERATIONS=false``,
  ``CTXFIT_ALLOW_SECRET_ENV=false``, and by default a hostPath on a system directory and isolation-changing pod
  annotations) refuses what a user with only InferenceServer rights asks beyond it:
  the server is Failed with ``Admitted=False`` and a Warning Event, and no Deployment exists.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from .operator_kit import OperatorProcess, ServerClient, base, bind, can_i, condition, kubectl, variant

POLICY_ENV = {"CTXFIT_ALLOWED_IMAGE_PREFIXES": "vllm/,lmsysorg/", "CTXFIT_ALLOW_WILDCARD_TOLERATIONS": "false",
              "CTXFIT_ALLOW_SECRET_ENV": "false"}


@pytest.fixture
def strict_op(cluster: Any, crd: Path, namespace: str, tmp_path: Path) -> Iterator[OperatorProcess]:
    operator = OperatorProcess(Path(cluster.kubeconfig), namespace, tmp_path / "operator.log", **POLICY_ENV).start()
    yield operator
    operator.stop()
    print(f"--- operator log ---\n{operator.log_path.read_text()[-6000:]}")


def test_creating_a_server_needs_the_right_to_create_pods(cluster: Any, user_roles: None, api: ServerClient,
                                                          namespace: str) -> None:
    """edit (can create pods) gets InferenceServers through aggregation; view can only read them."""
    bind(cluster, namespace, "erin-editor", "edit")
    bind(cluster, namespace, "vic-viewer", "view")
    api.wait(lambda: can_i(cluster, "erin-editor", namespace, "create", "inferenceservers.ctxfit.io"),
             "aggregation of ctxfit-edit into edit")
    assert can_i(cluster, "erin-editor", namespace, "create", "pods")
    assert not can_i(cluster, "erin-editor", namespace, "update", "inferenceservers.ctxfit.io", "--subresource=status")
    api.wait(lambda: can_i(cluster, "vic-viewer", namespace, "list", "inferenceservers.ctxfit.io"),
             "aggregation of ctxfit-view into view")
    assert not can_i(cluster, "vic-viewer", namespace, "create", "inferenceservers.ctxfit.io")
    assert not can_i(cluster, "vic-viewer", namespace, "create", "pods")
    refused = kubectl(cluster, "apply", "-f", "-", user="vic-viewer", namespace=namespace, input=json.dumps(base()))
    assert refused.returncode != 0 and "forbidden" in refused.stderr.lower()
    created = kubectl(cluster, "apply", "-f", "-", user="erin-editor", namespace=namespace, input=json.dumps(base()))
    assert created.returncode == 0, created.stderr
    assert kubectl(cluster, "get", "infsrv", "base", user="vic-viewer", namespace=namespace).returncode == 0


def _servers_only_user(cluster: Any, namespace: str) -> str:
    """Section 8's user: a Role with create/get/list on inferenceservers only (no pods, no Secrets)."""
    role = {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role", "metadata": {"name": "servers-only"},
            "rules": [{"apiGroups": ["ctxfit.io"], "resources": ["inferenceservers"],
                       "verbs": ["create", "get", "list"]}]}
    out = kubectl(cluster, "apply", "-f", "-", namespace=namespace, input=json.dumps(role))
    assert out.returncode == 0, out.stderr
    bind(cluster, namespace, "sam", "servers-only", kind="Role")
    return "sam"


SECTION_8 = {
    "image": (variant("spec.engine.image", "registry.example/any:latest"), "not under an allowed prefix"),
    "secret": (variant("spec.engine.env", [{"name": "LOOT", "valueFrom": {"secretKeyRef": {
        "name": "db-pass", "key": "password"}}}]), "Secret references are not allowed"),
    "toleration": (variant("spec.pod", {"tolerations": [{"operator": "Exists"}]}), "without a key"),
    # the other ways a spec brings a Secret, a host path or a privilege into the pod
    "token-secret": (variant("spec.model.tokenSecretRef", {"name": "db-pass", "key": "password"}),
                     "model.tokenSecretRef: Secret references are not allowed"),
    "host-path-root": (variant("spec.model.cache", {"hostPath": {"path": "/"}}), "system directory"),
    "host-path-kubelet": (variant("spec.model.cache", {"hostPath": {"path": "/var/lib/kubelet/pods"}}),
                          "system directory"),
    "apparmor-unconfined": (variant("spec.pod", {"annotations": {
        "container.apparmor.security.beta.kubernetes.io/engine": "unconfined"}}), "isolation"),
}


@pytest.mark.parametrize("case", list(SECTION_8), ids=list(SECTION_8))
def test_policy_refuses_what_the_user_could_not_do_directly(cluster: Any, strict_op: OperatorProcess,
                                                            api: ServerClient, namespace: str, case: str) -> None:
    user = _servers_only_user(cluster, namespace)
    api.wait(lambda: can_i(cluster, user, namespace, "create", "inferenceservers.ctxfit.io"), "role binding")
    assert not can_i(cluster, user, namespace, "get", "secrets")
    assert not can_i(cluster, user, namespace, "create", "deployments.apps")
    obj, expected = SECTION_8[case]
    created = kubectl(cluster, "apply", "-f", "-", user=user, namespace=namespace, input=json.dumps(obj))
    assert created.returncode == 0, created.stderr
    server = api.wait_phase("base", "Failed")
    admitted = condition(server, "Admitted")
    assert admitted["status"] == "False" and admitted["reason"] == "RefusedByPolicy"
    assert expected in admitted["message"]
    assert condition(server, "Ready")["status"] == "False"
    assert "endpoint" not in server["status"]
    events = api.wait(lambda: [e for e in api.events("base") if e["reason"] == "RefusedByPolicy"], "the Event")
    assert events and events[0]["type"] == "Warning" and expected in events[0]["message"]
    strict_op.settle(2)
    assert api.deployment("base", missing_ok=True) is None


def test_policy_allows_the_default_image(cluster: Any, strict_op: OperatorProcess, api: ServerClient,
                                         namespace: str) -> None:
    """The same operator runs a server within the policy (official image, keyed toleration)."""
    obj = variant("spec.pod", {"tolerations": [{"key": "dedicated", "operator": "Equal", "value": "llm",
                                                "effect": "NoSchedule"}]})
    api.create(obj)
    server = api.wait_phase("base", "Ready")
    assert "Admitted" not in {c["type"] for c in server["status"]["conditions"]}
    image = api.deployment("base")["spec"]["template"]["spec"]["containers"][0]["image"]
    assert image.startswith("vllm/")
