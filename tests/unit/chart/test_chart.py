"""The Helm chart charts/ctxfit: lint, render, values documentation and schema, and what it renders.

The RBAC rules are checked against the operator's needs in tests/e2e/test_chart_e2e.py (a real API
server, the operator impersonating the chart's ServiceAccount); here: their shape and scoping.
"""

from __future__ import annotations

import json
import os
import re
import shutil
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml

from tests.unit.chart.chartkit import (
    ALL_ON,
    CHART,
    NAMESPACE,
    RELEASE,
    helm,
    objects,
    one,
    render,
    render_fails,
    render_text,
    run,
)

VALUES = CHART / "values.yaml"
SCHEMA = json.loads((CHART / "values.schema.json").read_text())

# The labels the operator puts on engine pods (operator/ctxfit/render/labels.py, the contract).
ENGINE_POD_LABELS = {
    "app.kubernetes.io/managed-by": "ctxfit",
    "app.kubernetes.io/component": "inference-server",
    "app.kubernetes.io/name": "vllm",
    "app.kubernetes.io/instance": "kimi-k25",
    "ctxfit.io/server": "kimi-k25",
    "ctxfit.io/engine": "vllm",
}

VALUE_SETS = {
    "default": ([], {}),
    "all-on": ([ALL_ON], {}),
    "namespaced": ([], {"watchNamespaces": ["team-a", "team-b"]}),
    "replicas-2": ([], {"replicaCount": 2}),
    "monitoring-on": ([], {"metrics.serviceMonitor.enabled": True, "engineMonitoring.podMonitor.enabled": True,
                           "prometheusRule.enabled": True, "dashboards.enabled": True,
                           "grafanaAlerts.enabled": True}),
    "minimal": ([], {"crds.enabled": False, "metrics.enabled": False, "serviceAccount.create": False,
                     "serviceAccount.name": "existing", "rbac.create": False}),
}


@pytest.mark.parametrize("values_files", [[], [ALL_ON]], ids=["default", "all-on"])
def test_helm_lint_strict(values_files: list[Path]) -> None:
    args = [helm(), "lint", "--strict", str(CHART), "--namespace", NAMESPACE]
    for path in values_files:
        args += ["--values", str(path)]
    out = run(args).stdout
    assert "0 chart(s) failed" in out


EXPECTED_KINDS = {
    "default": {"CustomResourceDefinition": 1, "ServiceAccount": 1, "ClusterRole": 4, "ClusterRoleBinding": 2,
                "Role": 1, "RoleBinding": 1, "Deployment": 1, "Service": 1},
    "all-on": {"CustomResourceDefinition": 1, "ServiceAccount": 1, "ClusterRole": 3, "ClusterRoleBinding": 1,
               "Role": 4, "RoleBinding": 4, "Deployment": 1, "Service": 1, "ServiceMonitor": 1, "PodMonitor": 1,
               "PrometheusRule": 1, "ConfigMap": 3},
    "namespaced": {"CustomResourceDefinition": 1, "ServiceAccount": 1, "ClusterRole": 3, "ClusterRoleBinding": 1,
                   "Role": 3, "RoleBinding": 3, "Deployment": 1, "Service": 1},
    "replicas-2": {"CustomResourceDefinition": 1, "ServiceAccount": 1, "ClusterRole": 4, "ClusterRoleBinding": 2,
                   "Role": 2, "RoleBinding": 2, "Deployment": 1, "Service": 1},
    "monitoring-on": {"CustomResourceDefinition": 1, "ServiceAccount": 1, "ClusterRole": 4,
                      "ClusterRoleBinding": 2, "Role": 1, "RoleBinding": 1, "Deployment": 1, "Service": 1,
                      "ServiceMonitor": 1, "PodMonitor": 1, "PrometheusRule": 1, "ConfigMap": 3},
    "minimal": {"Deployment": 1},
}


def test_calibration_configmap_is_configurable() -> None:
    objs = render((), {"operator.calibrationConfigMap": "cal"})
    role = next(o for o in objs if o["kind"] == "Role" and o["metadata"]["name"].endswith("-calibration"))
    assert [r.get("resourceNames") for r in role["rules"]] == [["cal"], None]
    env = one(objs, "Deployment")["spec"]["template"]["spec"]["containers"][0]["env"]
    assert {"name": "CTXFIT_CALIBRATION_CONFIGMAP", "value": "cal"} in env
    off = render((), {"operator.calibrationConfigMap": ""})
    assert not [o for o in off if o["kind"] == "Role" and o["metadata"]["name"].endswith("-calibration")]


@pytest.mark.parametrize("case", list(VALUE_SETS), ids=list(VALUE_SETS))
def test_template_renders_expected_kinds(case: str) -> None:
    files, sets = VALUE_SETS[case]
    objs = render(files, sets)
    kinds: dict[str, int] = {}
    for obj in objs:
        kinds[obj["kind"]] = kinds.get(obj["kind"], 0) + 1
        assert obj["metadata"]["labels"]["app.kubernetes.io/part-of"] == "ctxfit", obj["metadata"]["name"]
    assert kinds == EXPECTED_KINDS[case]


# ---------------------------------------------------------------------------------------------- values


def _value_keys(text: str) -> list[tuple[int, list[str], bool]]:
    """(line number, key path, commented) for every mapping key of values.yaml, from its indentation."""
    out: list[tuple[int, list[str], bool]] = []
    stack: list[tuple[int, str]] = []
    lines = text.splitlines()
    for number, line in enumerate(lines):
        match = re.match(r"^( *)([A-Za-z_][A-Za-z0-9_]*):(\s|$)", line)
        if not match:
            continue
        indent, key = len(match.group(1)), match.group(2)
        while stack and stack[-1][0] >= indent:
            stack.pop()
        stack.append((indent, key))
        above = lines[number - 1].strip() if number else ""
        out.append((number + 1, [k for _, k in stack], above.startswith("#")))
    return out


def _schema_at(path: list[str]) -> dict[str, Any] | None:
    node: dict[str, Any] = SCHEMA
    for key in path:
        props = node.get("properties")
        if props is None or key not in props:
            return None
        node = props[key]
    return node


def _free_form_parent(path: list[str]) -> bool:
    """True inside a value that is itself free-form (resources, securityContext, ...): no comment needed."""
    for depth in range(1, len(path)):
        node = _schema_at(path[:depth])
        if node is not None and "properties" not in node:
            return True
    return False


def test_every_values_key_is_commented_and_in_the_schema() -> None:
    keys = _value_keys(VALUES.read_text())
    assert len(keys) > 80
    uncommented = [f"line {n}: {'.'.join(p)}" for n, p, c in keys if not c and not _free_form_parent(p)]
    assert not uncommented, "values.yaml keys without a comment above them:\n" + "\n".join(uncommented)
    unknown = [".".join(p) for _, p, _ in keys if not _free_form_parent(p) and _schema_at(p) is None]
    assert not unknown, f"values.yaml keys missing from values.schema.json: {unknown}"


def test_every_schema_property_has_a_default_in_values() -> None:
    values = yaml.safe_load(VALUES.read_text())
    missing: list[str] = []

    def walk(node: dict[str, Any], value: Any, path: list[str]) -> None:
        for key, sub in node.get("properties", {}).items():
            if not isinstance(value, dict) or key not in value:
                missing.append(".".join([*path, key]))
            elif "properties" in sub:
                walk(sub, value[key], [*path, key])

    walk(SCHEMA, values, [])
    assert not missing, f"schema properties without a default in values.yaml: {missing}"


@pytest.mark.parametrize("path", [VALUES, ALL_ON], ids=["default", "all-on"])
def test_values_files_validate_against_schema(path: Path) -> None:
    values = yaml.safe_load(path.read_text())
    if path != VALUES:  # an overrides file: validate the merged result, as helm does
        merged = yaml.safe_load(VALUES.read_text())

        def merge(base: dict[str, Any], over: dict[str, Any]) -> None:
            for key, value in over.items():
                if isinstance(value, dict) and isinstance(base.get(key), dict):
                    merge(base[key], value)
                else:
                    base[key] = value

        merge(merged, values)
        values = merged
    jsonschema.validate(values, SCHEMA)


BAD_VALUES = {
    "negative-replicas": ({"replicaCount": -1}, "replicaCount"),
    "typo-in-threshold-block": ({"prometheusRule.kvCachePressure.warning.treshold": 0.9}, "treshold"),
    "threshold-above-one": ({"prometheusRule.kvCachePressure.critical.threshold": 97}, "threshold"),
    "bad-duration": ({"prometheusRule.kvCachePressure.warning.for": "10 minutes"}, "for"),
    "bad-pull-policy": ({"image.pullPolicy": "Sometimes"}, "pullPolicy"),
    "bad-namespace-name": ({"watchNamespaces": ["Team_A"]}, "watchNamespaces"),
    "port-out-of-range": ({"metrics.port": 70000}, "port"),
    "unknown-top-level-key": ({"replicas": 2}, "replicas"),
    "sa-name-required": ({"serviceAccount.create": False}, "serviceAccount.name is required"),
    "headroom-not-a-fraction": ({"operator.defaultHeadroom": "25%"}, "defaultHeadroom"),
    "headroom-one": ({"operator.defaultHeadroom": 1}, "defaultHeadroom"),
    "too-many-attempts": ({"operator.maxAttempts": 50}, "maxAttempts"),
    "no-group-restarts": ({"operator.groupRestartBudget": 0}, "groupRestartBudget"),
    "keda-without-prometheus": ({"autoscaling.keda.enabled": True}, "prometheusAddress"),
    "prometheus-not-a-url": ({"autoscaling.keda.enabled": True, "autoscaling.prometheusAddress": "prometheus:9090"},
                             "prometheusAddress"),
}


@pytest.mark.parametrize("sets,needle", list(BAD_VALUES.values()), ids=list(BAD_VALUES))
def test_bad_values_are_rejected(sets: dict[str, Any], needle: str) -> None:
    assert needle in render_fails(sets)


# ------------------------------------------------------------------------------------------ deployment


def _env(objs: list[dict[str, Any]]) -> dict[str, Any]:
    container = one(objs, "Deployment")["spec"]["template"]["spec"]["containers"][0]
    return {e["name"]: e.get("value", e.get("valueFrom")) for e in container["env"]}


ENV_CASES = {
    "default": ({}, {"CTXFIT_WATCH_NAMESPACES": "", "CTXFIT_METRICS_PORT": "9090", "CTXFIT_HEALTH_PORT": "8080"},
                ["CTXFIT_PEERING", "CTXFIT_DEFAULT_HEADROOM", "CTXFIT_VLLM_IMAGE", "CTXFIT_SGLANG_IMAGE",
                 "CTXFIT_MAX_ATTEMPTS", "CTXFIT_KEDA_ENABLED", "CTXFIT_PROMETHEUS_ADDRESS",
                 "CTXFIT_GROUP_RESTART_BUDGET"]),
    "keda": ({"autoscaling.keda.enabled": True, "autoscaling.prometheusAddress": "http://prom.monitoring.svc:9090"},
             {"CTXFIT_KEDA_ENABLED": "true", "CTXFIT_PROMETHEUS_ADDRESS": "http://prom.monitoring.svc:9090"}, []),
    "prometheus-without-keda": ({"autoscaling.prometheusAddress": "http://prom:9090"}, {},
                                ["CTXFIT_KEDA_ENABLED", "CTXFIT_PROMETHEUS_ADDRESS"]),
    "namespaces": ({"watchNamespaces": ["a", "b"]}, {"CTXFIT_WATCH_NAMESPACES": "a,b"}, []),
    "ports": ({"metrics.port": 9191, "operator.healthPort": 8181},
              {"CTXFIT_METRICS_PORT": "9191", "CTXFIT_HEALTH_PORT": "8181"}, []),
    "replicas-2-peering": ({"replicaCount": 2}, {"CTXFIT_PEERING": "ctxfit-operator",
                                                 "CTXFIT_PEERING_NAMESPACE": NAMESPACE}, []),
    "peering-forced-off": ({"replicaCount": 2, "peering.enabled": False}, {}, ["CTXFIT_PEERING"]),
    "peering-forced-on": ({"peering.enabled": True, "peering.name": "lead"}, {"CTXFIT_PEERING": "lead"}, []),
    "operator-defaults": ({"operator.defaultHeadroom": "0.2", "operator.vllmImage": "v:1",
                           "operator.sglangImage": "s:1", "operator.maxAttempts": 3,
                           "operator.groupRestartBudget": 4},
                          {"CTXFIT_DEFAULT_HEADROOM": "0.2", "CTXFIT_VLLM_IMAGE": "v:1", "CTXFIT_SGLANG_IMAGE": "s:1",
                           "CTXFIT_MAX_ATTEMPTS": "3", "CTXFIT_GROUP_RESTART_BUDGET": "4"}, []),
    "extra-env": ({"operator.extraEnv": [{"name": "X", "value": "1"}]}, {"X": "1"}, []),
    "metrics-off": ({"metrics.enabled": False}, {"CTXFIT_METRICS_PORT": "0"}, []),
}


@pytest.mark.parametrize("sets,present,absent", list(ENV_CASES.values()), ids=list(ENV_CASES))
def test_operator_environment(sets: dict[str, Any], present: dict[str, str], absent: list[str]) -> None:
    env = _env(render((), sets))
    for key, value in present.items():
        assert env.get(key) == value, key
    for key in absent:
        assert key not in env, key
    assert env["POD_NAME"] == {"fieldRef": {"fieldPath": "metadata.name"}}
    assert env["POD_NAMESPACE"] == {"fieldRef": {"fieldPath": "metadata.namespace"}}


def test_every_variable_the_chart_sets_is_one_the_operator_reads(monkeypatch: pytest.MonkeyPatch) -> None:
    """The operator's Settings, built from the environment the chart gives its container (downward API fields
    resolved as the kubelet does), hold what the chart meant: each ``CTXFIT_*`` name is a Settings field, the pod's
    name and namespace reach the Lease/Event identity and the Lease/calibration namespaces (the chart once set
    kopf's ``POD_ID``, which nothing read: kopf runs standalone here)."""
    from ctxfit.controller.settings import Settings

    deployment = one(render([ALL_ON], {"replicaCount": 2, "operator.extraEnv": []}), "Deployment")
    container = deployment["spec"]["template"]["spec"]["containers"][0]
    downward = {"metadata.name": "ctxfit-7d9f-abcde", "metadata.namespace": NAMESPACE}
    for name in [k for k in os.environ if k.startswith(("CTXFIT_", "POD_"))]:
        monkeypatch.delenv(name)
    for item in container["env"]:
        value = item.get("value")
        if value is None:
            value = downward[item["valueFrom"]["fieldRef"]["fieldPath"]]
        monkeypatch.setenv(item["name"], value)
        if item["name"].startswith("CTXFIT_"):
            assert item["name"].removeprefix("CTXFIT_").lower() in Settings.model_fields, item["name"]
        else:
            assert item["name"] in {"POD_NAME", "POD_NAMESPACE"}, f"{item['name']}: not read by the operator"
    cfg = Settings()
    assert cfg.pod_name == "ctxfit-7d9f-abcde"
    assert cfg.peering and cfg.peering_namespace == NAMESPACE
    assert cfg.calibration_namespace == NAMESPACE  # from POD_NAMESPACE (else "default")


def test_deployment_runs_the_operator_non_root_with_kopf_health_probes() -> None:
    deployment = one(render(), "Deployment")
    pod = deployment["spec"]["template"]["spec"]
    container = pod["containers"][0]
    assert container["command"] == ["python", "-m", "ctxfit.controller"]
    assert container["image"] == "ghcr.io/ctxfit/ctxfit:0.1.0"  # appVersion
    ports = {p["name"]: p["containerPort"] for p in container["ports"]}
    assert ports == {"health": 8080, "metrics": 9090}
    for probe in ("livenessProbe", "readinessProbe"):
        assert container[probe]["httpGet"] == {"path": "/healthz", "port": "health"}
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert pod["securityContext"]["runAsUser"] != 0
    assert container["securityContext"]["allowPrivilegeEscalation"] is False
    assert container["securityContext"]["readOnlyRootFilesystem"] is True
    assert container["securityContext"]["capabilities"]["drop"] == ["ALL"]
    assert {"name": "tmp", "mountPath": "/tmp"} in container["volumeMounts"]
    assert pod["serviceAccountName"] == RELEASE
    assert deployment["spec"]["strategy"] == {"type": "Recreate"}  # one replica, no leader election
    assert deployment["spec"]["selector"]["matchLabels"] == {
        "app.kubernetes.io/name": "ctxfit", "app.kubernetes.io/instance": RELEASE,
        "app.kubernetes.io/component": "operator"}


IMAGE_CASES = {
    "tag": ({"image.tag": "1.2.3"}, "ghcr.io/ctxfit/ctxfit:1.2.3"),
    "digest-wins": ({"image.tag": "1.2.3", "image.digest": "sha256:" + "a" * 64},
                    "ghcr.io/ctxfit/ctxfit@sha256:" + "a" * 64),
    "repository": ({"image.repository": "r.example/c"}, "r.example/c:0.1.0"),
}


@pytest.mark.parametrize("sets,image", list(IMAGE_CASES.values()), ids=list(IMAGE_CASES))
def test_image_reference(sets: dict[str, Any], image: str) -> None:
    assert one(render((), sets), "Deployment")["spec"]["template"]["spec"]["containers"][0]["image"] == image


def test_leader_election_allows_rolling_updates() -> None:
    assert "strategy" not in one(render((), {"replicaCount": 2}), "Deployment")["spec"]


# ------------------------------------------------------------------------------------------------ RBAC


def _rules(obj: dict[str, Any]) -> dict[tuple[str, str], set[str]]:
    out: dict[tuple[str, str], set[str]] = {}
    for rule in obj["rules"]:
        for group in rule["apiGroups"]:
            for resource in rule["resources"]:
                out.setdefault((group, resource), set()).update(rule["verbs"])
    return out


NAMESPACED_RULES = {
    ("ctxfit.io", "inferenceservers"): {"get", "list", "watch"},
    ("ctxfit.io", "inferenceservers/status"): {"update"},
    ("apps", "deployments"): {"get", "list", "watch", "create", "patch"},
    ("leaderworkerset.x-k8s.io", "leaderworkersets"): {"get", "list", "watch", "create", "patch"},
    ("", "services"): {"get", "list", "watch", "create", "patch"},
    ("", "pods"): {"get", "list", "watch", "create", "delete"},  # + the resolver pods (controller/kube/resolution.py)
    ("", "pods/log"): {"get"},
    ("", "events"): {"create", "list"},
    ("", "persistentvolumeclaims"): {"get", "list", "watch", "create", "patch", "delete"},
}
CLUSTER_RULES = {
    ("", "nodes"): {"list", "watch"},
    ("apiextensions.k8s.io", "customresourcedefinitions"): {"list", "watch"},
    ("storage.k8s.io", "storageclasses"): {"list"},
}
NAMESPACES_RULE = {("", "namespaces"): {"list", "watch"}}
CALIBRATION_ROLE = {("Role", NAMESPACE, f"{RELEASE}-calibration"): {("", "configmaps"): {"get", "update", "create"}}}
KEDA_RULES = {("keda.sh", "scaledobjects"): {"get", "list", "watch", "create", "patch", "delete"}}
KEDA_ON = {"autoscaling.keda.enabled": True, "autoscaling.prometheusAddress": "http://prom.monitoring.svc:9090"}

RBAC_CASES = {
    "cluster-wide": ({}, {("ClusterRole", None, f"{RELEASE}-cluster"): CLUSTER_RULES,
                          ("ClusterRole", None, RELEASE): NAMESPACED_RULES, **CALIBRATION_ROLE}),
    "namespaced": ({"watchNamespaces": ["team-a", "team-b"]},
                   {("ClusterRole", None, f"{RELEASE}-cluster"): {**CLUSTER_RULES, **NAMESPACES_RULE},
                    ("Role", "team-a", RELEASE): NAMESPACED_RULES,
                    ("Role", "team-b", RELEASE): NAMESPACED_RULES, **CALIBRATION_ROLE}),
    "leader-election": ({"replicaCount": 3},
                        {("ClusterRole", None, f"{RELEASE}-cluster"): CLUSTER_RULES,
                         ("ClusterRole", None, RELEASE): NAMESPACED_RULES,
                         ("Role", NAMESPACE, f"{RELEASE}-leader-election"): {
                             ("coordination.k8s.io", "leases"): {"get", "update", "create"}}, **CALIBRATION_ROLE}),
    # ScaledObjects only when KEDA autoscaling is on, in every scope the InferenceServers live in
    "keda": (KEDA_ON, {("ClusterRole", None, f"{RELEASE}-cluster"): CLUSTER_RULES,
                       ("ClusterRole", None, RELEASE): {**NAMESPACED_RULES, **KEDA_RULES}, **CALIBRATION_ROLE}),
    "keda-namespaced": ({**KEDA_ON, "watchNamespaces": ["team-a"]},
                        {("ClusterRole", None, f"{RELEASE}-cluster"): {**CLUSTER_RULES, **NAMESPACES_RULE},
                         ("Role", "team-a", RELEASE): {**NAMESPACED_RULES, **KEDA_RULES}, **CALIBRATION_ROLE}),
}


@pytest.mark.parametrize("sets,expected", list(RBAC_CASES.values()), ids=list(RBAC_CASES))
def test_rbac_rules_per_scope(sets: dict[str, Any], expected: dict[tuple[str, str | None, str], Any]) -> None:
    objs = render((), sets)
    roles = {(o["kind"], o["metadata"].get("namespace"), o["metadata"]["name"]): _rules(o)
             for o in objs if o["kind"] in ("Role", "ClusterRole")
             and o["metadata"]["labels"].get("ctxfit.io/role-for") != "users"}  # test_chart_rbac.py checks those
    assert roles == expected
    bindings = [o for o in objs if o["kind"] in ("RoleBinding", "ClusterRoleBinding")]
    assert len(bindings) == len(roles)
    for binding in bindings:
        meta = binding["metadata"]
        ref = binding["roleRef"]
        assert (ref["kind"], meta.get("namespace"), ref["name"]) in roles
        assert binding["subjects"] == [{"kind": "ServiceAccount", "name": RELEASE, "namespace": NAMESPACE}]


def test_leader_election_lease_is_named() -> None:
    role = next(o for o in render((), {"replicaCount": 2, "peering.name": "lead"})
                if o["kind"] == "Role" and o["metadata"]["name"].endswith("-leader-election"))
    by_verbs = {tuple(r["verbs"]): r.get("resourceNames") for r in role["rules"]}
    assert by_verbs == {("get", "update"): ["lead"], ("create",): None}


@pytest.mark.parametrize("case", ["default", "all-on", "replicas-2"], ids=["default", "all-on", "replicas-2"])
def test_rbac_is_least_privilege(case: str) -> None:
    files, sets = VALUE_SETS[case]
    for role in [o for o in render(files, sets) if o["kind"] in ("Role", "ClusterRole")]:
        for rule in role["rules"]:
            assert "*" not in rule["verbs"] + rule["resources"] + rule["apiGroups"], rule
            if rule["resources"] == ["configmaps"] and role["metadata"]["name"].endswith("-calibration"):
                # the one calibration ConfigMap: get/update only by name, create (cannot be limited by name)
                assert rule.get("resourceNames") == ["ctxfit-calibration"] or rule["verbs"] == ["create"], rule
                assert role["kind"] == "Role" and role["metadata"]["namespace"] == NAMESPACE, role
                continue
            assert not {"secrets", "configmaps", "roles", "rolebindings", "clusterroles",
                        "clusterrolebindings", "serviceaccounts", "pods/exec"} & set(rule["resources"]), rule
            if rule["resources"] in (["nodes"], ["customresourcedefinitions"], ["namespaces"]):
                assert set(rule["verbs"]) <= {"get", "list", "watch"}, rule
            if rule["resources"] == ["pods"]:
                # create/delete for the resolver pods only (docs/design/model-resolution.md): no more power than
                # the Deployments the operator already creates (their pods mount the token Secret too); never
                # update/patch (a running pod is not rewritten), never exec
                assert set(rule["verbs"]) <= {"get", "list", "watch", "create", "delete"}, rule
            if role["kind"] == "ClusterRole" and role["metadata"]["name"].endswith("-cluster"):
                assert set(rule["verbs"]) <= {"get", "list", "watch"}, rule


@pytest.mark.parametrize("case", ["default", "all-on", "replicas-2"], ids=["default", "all-on", "replicas-2"])
def test_every_rbac_rule_is_commented(case: str) -> None:
    files, sets = VALUE_SETS[case]
    text = render_text(files, sets)
    for doc in text.split("\n---\n"):
        if not re.search(r"^kind: (Cluster)?Role$", doc, re.M):
            continue
        lines = doc.splitlines()
        for number, line in enumerate(lines):
            if line.strip().startswith("- apiGroups:"):
                assert lines[number - 1].strip().startswith("#"), f"uncommented rule: {line!r} in\n{doc}"


# ------------------------------------------------------------------------------------------------- CRD


def test_crd_keep_policy_and_labels() -> None:
    crd = one(render(), "CustomResourceDefinition")
    assert crd["metadata"]["name"] == "inferenceservers.ctxfit.io"
    assert crd["metadata"]["annotations"] == {"helm.sh/resource-policy": "keep"}
    assert crd["metadata"]["labels"]["app.kubernetes.io/managed-by"] == "Helm"
    crd = one(render((), {"crds.keep": False}), "CustomResourceDefinition")
    assert "helm.sh/resource-policy" not in crd["metadata"].get("annotations", {})
    assert not objects(render((), {"crds.enabled": False}), "CustomResourceDefinition")


# ---------------------------------------------------------------------------------------- monitoring


def test_service_monitor_keeps_the_servers_namespace_label() -> None:
    objs = render((), {"metrics.serviceMonitor.enabled": True})
    monitor = one(objs, "ServiceMonitor")
    service = one(objs, "Service")
    endpoint = monitor["spec"]["endpoints"][0]
    assert endpoint["honorLabels"] is True  # ctxfit_* carry namespace=<the InferenceServer's>
    assert endpoint["port"] == service["spec"]["ports"][0]["name"] == "metrics"
    assert monitor["spec"]["selector"]["matchLabels"].items() <= service["metadata"]["labels"].items()
    pod_labels = one(objs, "Deployment")["spec"]["template"]["metadata"]["labels"]
    assert service["spec"]["selector"].items() <= pod_labels.items()
    assert monitor["spec"]["namespaceSelector"] == {"matchNames": [NAMESPACE]}


PODMONITOR_NAMESPACES = {
    "all": ({}, {"any": True}),
    "watch-namespaces": ({"watchNamespaces": ["a"]}, {"matchNames": ["a"]}),
    "own-list-wins": ({"watchNamespaces": ["a"], "engineMonitoring.podMonitor.namespaces": ["b"]},
                      {"matchNames": ["b"]}),
}


@pytest.mark.parametrize("sets,selector", list(PODMONITOR_NAMESPACES.values()), ids=list(PODMONITOR_NAMESPACES))
def test_engine_pod_monitor_selects_the_operators_engine_pods(sets: dict[str, Any], selector: dict[str, Any]) -> None:
    monitor = one(render((), {"engineMonitoring.podMonitor.enabled": True, **sets}), "PodMonitor")
    spec = monitor["spec"]
    assert spec["namespaceSelector"] == selector
    assert spec["selector"]["matchLabels"].items() <= ENGINE_POD_LABELS.items()
    for expression in spec["selector"]["matchExpressions"]:
        assert expression["operator"] == "Exists" and expression["key"] in ENGINE_POD_LABELS
    endpoint = spec["podMetricsEndpoints"][0]
    assert endpoint["port"] == "http" and endpoint["path"] == "/metrics"
    targets = {r["targetLabel"]: r["sourceLabels"] for r in endpoint["relabelings"]}
    assert targets == {"server": ["__meta_kubernetes_pod_label_ctxfit_io_server"],
                       "engine_kind": ["__meta_kubernetes_pod_label_ctxfit_io_engine"],
                       "pool": ["__meta_kubernetes_pod_label_ctxfit_io_inference_pool"]}


def test_engine_pod_monitor_matches_what_the_operator_renders() -> None:
    from ctxfit.api import EngineKind
    from ctxfit.render.deployment import PORT_NAME
    from ctxfit.render.labels import common_labels

    assert common_labels("kimi-k25", EngineKind.VLLM) == ENGINE_POD_LABELS
    assert PORT_NAME == "http"


def test_dashboard_configmaps_carry_the_sidecar_label_and_the_json() -> None:
    objs = render((), {"dashboards.enabled": True})
    maps = objects(objs, "ConfigMap")
    files = sorted((CHART / "dashboards").glob("*.json"))
    assert len(maps) == len(files) == 2
    for config_map in maps:
        assert config_map["metadata"]["labels"]["grafana_dashboard"] == "1"
        ((key, text),) = config_map["data"].items()
        assert text.strip() == (CHART / "dashboards" / key).read_text().strip()
    namespaced = objects(render((), {"dashboards.enabled": True, "dashboards.namespace": "monitoring"}), "ConfigMap")
    assert {m["metadata"]["namespace"] for m in namespaced} == {"monitoring"}


def test_notes_render(tmp_path: Path) -> None:
    # `helm template` skips NOTES.txt and `helm install --dry-run` needs a cluster: render a copy of the
    # chart in which NOTES.txt is an ordinary template.
    chart = tmp_path / "ctxfit"
    shutil.copytree(CHART, chart)
    notes = chart / "templates" / "NOTES.txt"
    (chart / "templates" / "_notes.tpl").write_text('{{- define "notes" -}}\n' + notes.read_text() + "{{- end }}\n")
    (chart / "templates" / "notes.yaml").write_text('notes: {{ include "notes" . | toJson }}\n')
    notes.unlink()

    def render_notes(*values: str) -> str:
        out = run([helm(), "template", RELEASE, str(chart), "--namespace", NAMESPACE, *values,
                   "--show-only", "templates/notes.yaml"]).stdout
        text: str = yaml.safe_load(out)["notes"]
        return text

    out = render_notes("--values", str(ALL_ON))
    assert "the namespaces team-a, team-b" in out
    assert "Lease ctxfit-system/ctxfit-ci-leader" in out
    assert "kubectl apply -n <namespace> -f manifests/kimi-128k.yaml" in out
    assert "{{" not in out
    default = render_notes()
    assert "every namespace" in default and "Lease" not in default
