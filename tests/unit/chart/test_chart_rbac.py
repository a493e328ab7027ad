"""The chart's RBAC equals what the operator's code asks the API server for: no less (a 403 waiting to
happen), no more (least privilege). Read statically from operator/ctxfit/controller:

- every `kubernetes` client method `<verb>_[namespaced_]<kind>[_<subresource>]`, called or referenced,
  with server-side apply (a patch in a function that uses the apply content type) also needing `create`;
- every kopf `index`/`on.event` resource (kopf lists and watches it), plus what kopf itself needs:
  CRDs (list, watch) and, when limited to namespaces, namespaces (list, watch); Events it posts;
- Leases (leader election) belong to the release namespace.

tests/e2e/test_chart_e2e.py shows the same from the other side: the operator running as the chart's
ServiceAccount, and the verbs it really used.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path
from typing import Any

import pytest

from tests.unit.chart.chartkit import NAMESPACE, REPO, render

CONTROLLER = REPO / "operator" / "ctxfit" / "controller"

CLIENT_VERBS = {"read": "get", "get": "get", "list": "list", "create": "create", "replace": "update",
                "patch": "patch", "delete": "delete"}
# `kubernetes` client kind (snake case) -> (API group, resource); custom objects are InferenceServers.
KINDS = {
    "deployment": ("apps", "deployments"), "deployment_scale": ("apps", "deployments/scale"),
    "service": ("", "services"), "pod": ("", "pods"), "pod_log": ("", "pods/log"), "event": ("", "events"),
    "node": ("", "nodes"), "namespace": ("", "namespaces"), "lease": ("coordination.k8s.io", "leases"),
    "custom_object": ("ctxfit.io", "inferenceservers"),
    "custom_object_status": ("ctxfit.io", "inferenceservers/status"),
    "config_map": ("", "configmaps"),
    "persistent_volume_claim": ("", "persistentvolumeclaims"),
    "storage_class": ("storage.k8s.io", "storageclasses"),
}
# custom-object calls whose first argument names another API group (controller/kube/groups.py; KEDA's
# ScaledObjects for spec.autoscaling)
CUSTOM_GROUPS = {"LWS_GROUP": ("leaderworkerset.x-k8s.io", "leaderworkersets"),
                 "KEDA_GROUP": ("keda.sh", "scaledobjects")}
# controller/kube/custom.py's helpers call the custom-object API with the ``group`` of a ``CustomResource``
# argument: their verbs count for the resource each caller passes (``apply_custom_object(kube, LWS, ...)``)
GENERIC_GROUP = "group"
CUSTOM_RESOURCES = {"LWS": CUSTOM_GROUPS["LWS_GROUP"], "KEDA": CUSTOM_GROUPS["KEDA_GROUP"]}
# resources the chart grants only when a value turns the feature on (templates/rbac.yaml): without it the
# operator must not be allowed them, with it exactly what the code uses
OPTIONAL = {("keda.sh", "scaledobjects"): "autoscaling.keda.enabled",
            ("inference.networking.k8s.io", "inferencepools"): "gateway.enabled",
            ("apps", "replicasets"): "gateway.enabled", ("apps", "statefulsets"): "gateway.enabled"}
# verbs of an always-granted resource that only a feature uses: granted only when its value is on
OPTIONAL_VERBS = {("", "pods"): ({"patch"}, "gateway.enabled")}
# kopf watches whose first argument names another API group (controller/app/routing.py: InferencePools)
KOPF_GROUPS = {"POOL_GROUP": ("inference.networking.k8s.io", "inferencepools")}
CLIENT_CALL = re.compile(r"^(read|get|list|create|replace|patch|delete)_(?:namespaced_|cluster_)?(\w+)$")
# kopf's own needs (kopf 1.45 _core/reactor/observation.py, _core/engines/posting.py)
KOPF = {("apiextensions.k8s.io", "customresourcedefinitions"): {"list", "watch"}}
KOPF_NAMESPACED = {("", "namespaces"): {"list", "watch"}}
CLUSTER_SCOPED = {"nodes", "namespaces", "customresourcedefinitions", "storageclasses"}
KOPF_RESOURCES = {"pods": "", "nodes": "", "services": "", "events": "", "namespaces": "", "deployments": "apps",
                  "persistentvolumeclaims": ""}

Needs = dict[tuple[str, str], set[str]]


def _add(needs: Needs, key: tuple[str, str], *verbs: str) -> None:
    needs.setdefault(key, set()).update(verbs)


# Raw JSON calls (controller/kube/rest.py): ``rest.call(VERB, RESOURCE, namespace, name, ...)``, ``rest.call_json(...)``
# and ``rest.read(RESOURCE, namespace, name)`` with a ``Resource`` declared in rest.py; any other raw request of
# the controller (``rest.request``/``json``/``get`` with a computed path) cannot be mapped and fails the test.
HTTP_VERBS = {"POST": "create", "PUT": "update", "PATCH": "patch", "DELETE": "delete"}


def _raw_call(path: Path, call: ast.Call, needs: Needs, unknown: list[str]) -> None:
    from ctxfit.controller.kube import rest

    func = call.func
    if not isinstance(func, ast.Attribute) or not re.search(r"\brest$", ast.unparse(func.value)):
        return
    where = f"{path.name}:{call.lineno} {ast.unparse(call)[:80]}"
    if func.attr not in ("call", "call_json", "read"):
        unknown.append(where)
        return
    args = list(call.args)
    verb = "GET"
    if func.attr != "read":
        if not args or not isinstance(args[0], ast.Constant) or not isinstance(args[0].value, str):
            unknown.append(where)
            return
        verb = args.pop(0).value
    resource = getattr(rest, ast.unparse(args[0]), None) if args and isinstance(args[0], ast.Name) else None
    if not isinstance(resource, rest.Resource):
        unknown.append(where)
        return
    named = len(args) - 1 >= (2 if resource.namespaced else 1) or any(k.arg == "name" for k in call.keywords)
    rbac_verb = HTTP_VERBS.get(verb) or ("get" if named else "list")
    _add(needs, (resource.group, resource.rbac), rbac_verb)


def code_needs() -> tuple[Needs, list[str]]:  # noqa: C901 - one AST walk; goes with one client dialect
    """(group, resource) -> verbs the controller code uses, and a list of calls it could not map."""
    needs: Needs = {}
    unknown: list[str] = []
    generic: dict[str, set[str]] = {}  # helper function -> verbs it uses on the resource it is given
    resource_calls: list[tuple[str, str, str]] = []  # (helper called, resource argument, where)
    for path in sorted(CONTROLLER.rglob("*.py")):
        tree = ast.parse(path.read_text())
        for func in [n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef)]:
            applies = any(isinstance(n, ast.Name) and n.id == "APPLY" for n in ast.walk(func))
            first_arg = {id(n.func): ast.unparse(n.args[0]) for n in ast.walk(func)
                         if isinstance(n, ast.Call) and n.args}
            # calls and bare references alike (`create = self.apps.create_namespaced_deployment`)
            for attr in [n for n in ast.walk(func) if isinstance(n, ast.Attribute)]:
                match = CLIENT_CALL.match(attr.attr)
                receiver = ast.unparse(attr.value)
                if not match or not re.search(r"\b(core|apps|custom|coordination|api)$", receiver):
                    continue
                verb, kind = CLIENT_VERBS[match.group(1)], match.group(2)
                if kind not in KINDS:
                    unknown.append(f"{path.name}:{attr.lineno} {attr.attr}")
                    continue
                key = KINDS[kind]
                if kind == "custom_object" and first_arg.get(id(attr)) == GENERIC_GROUP:
                    generic.setdefault(func.name, set()).add(verb)
                    continue
                if kind == "custom_object" and first_arg.get(id(attr)) in CUSTOM_GROUPS:
                    key = CUSTOM_GROUPS[first_arg[id(attr)]]
                _add(needs, key, verb)
                if verb == "patch" and applies:  # server-side apply creates missing objects
                    _add(needs, key, "create")
        for call in [n for n in ast.walk(tree) if isinstance(n, ast.Call)]:
            _raw_call(path, call, needs, unknown)
            if len(call.args) > 1 and isinstance(call.args[1], ast.Name) and call.args[1].id in CUSTOM_RESOURCES:
                resource_calls.append((ast.unparse(call.func), call.args[1].id, f"{path.name}:{call.lineno}"))
            name = ast.unparse(call.func)
            if name in ("kopf.index", "kopf.on.event") and call.args:
                first = call.args[0]
                if isinstance(first, ast.Constant) and first.value in KOPF_RESOURCES and len(call.args) == 1:
                    _add(needs, (KOPF_RESOURCES[first.value], first.value), "list", "watch")
                elif ast.unparse(first) == "API_GROUP":
                    _add(needs, ("ctxfit.io", "inferenceservers"), "list", "watch")
                elif ast.unparse(first) in CUSTOM_GROUPS:  # the operator's LeaderWorkerSets, ScaledObjects
                    _add(needs, CUSTOM_GROUPS[ast.unparse(first)], "list", "watch")
                elif ast.unparse(first) in KOPF_GROUPS:
                    _add(needs, KOPF_GROUPS[ast.unparse(first)], "list", "watch")
                else:
                    unknown.append(f"{path.name}:{call.lineno} {ast.unparse(call)}")
    for helper, resource, where in resource_calls:
        if helper not in generic:
            unknown.append(f"{where} {helper}(..., {resource}, ...): not a custom-object helper")
            continue
        _add(needs, CUSTOM_RESOURCES[resource], *generic[helper])
    return needs, unknown


def _granted(objs: list[dict[str, Any]]) -> dict[str, Needs]:
    """Rules by scope: 'cluster' (ClusterRoles), or the Role's namespace."""
    out: dict[str, Needs] = {}
    for role in objs:
        if role["kind"] not in ("Role", "ClusterRole"):
            continue
        if role["metadata"].get("labels", {}).get("ctxfit.io/role-for") == "users":
            continue  # the aggregated ctxfit-edit/ctxfit-view roles are for people, not the operator
        scope = role["metadata"].get("namespace", "cluster")
        for rule in role["rules"]:
            for group in rule["apiGroups"]:
                for resource in rule["resources"]:
                    _add(out.setdefault(scope, {}), (group, resource), *rule["verbs"])
    return out


def test_the_controller_calls_are_all_understood() -> None:
    needs, unknown = code_needs()
    assert not unknown, f"API calls this test cannot map to RBAC (extend KINDS): {unknown}"
    assert ("apps", "deployments") in needs and ("ctxfit.io", "inferenceservers/status") in needs


MODES = {
    "cluster-wide": ({}, ["cluster"]),
    "namespaced": ({"watchNamespaces": ["team-a", "team-b"]}, ["team-a", "team-b"]),
    "leader-election": ({"replicaCount": 2}, ["cluster"]),
    "gateway": ({"gateway.enabled": True}, ["cluster"]),
    "gateway-namespaced": ({"gateway.enabled": True, "watchNamespaces": ["team-a"]}, ["team-a"]),
}


@pytest.mark.parametrize("sets,namespaced_scopes", list(MODES.values()), ids=list(MODES))
def test_rbac_grants_exactly_what_the_code_uses(sets: dict[str, Any], namespaced_scopes: list[str]) -> None:
    needs, _ = code_needs()
    leases = {k: v for k, v in needs.items() if k[1] == "leases"}
    own = {k: v for k, v in needs.items() if k[1] == "configmaps"}  # the calibration ConfigMap, release namespace
    cluster = {k: v for k, v in needs.items() if k[1] in CLUSTER_SCOPED} | KOPF
    off = {k for k, value in OPTIONAL.items() if not sets.get(value)}
    namespaced = {k: v for k, v in needs.items()
                  if k not in cluster and k not in leases and k not in own and k not in off}
    for key, (verbs, value) in OPTIONAL_VERBS.items():
        if key in namespaced and not sets.get(value):
            namespaced[key] = namespaced[key] - verbs
    namespaced_mode = namespaced_scopes != ["cluster"]
    if namespaced_mode:
        cluster |= KOPF_NAMESPACED
    expected: dict[str, Needs] = {}
    for scope in namespaced_scopes:
        for key, verbs in namespaced.items():
            _add(expected.setdefault(scope, {}), key, *verbs)
    for key, verbs in cluster.items():
        _add(expected.setdefault("cluster", {}), key, *verbs)
    for key, verbs in own.items():
        _add(expected.setdefault(NAMESPACE, {}), key, *verbs)
    if sets.get("replicaCount", 1) > 1:
        for key, verbs in leases.items():
            _add(expected.setdefault(NAMESPACE, {}), key, *verbs)
    granted = _granted(render((), sets))
    assert granted == expected, _diff(granted, expected)


def _diff(granted: dict[str, Needs], expected: dict[str, Needs]) -> str:
    lines = []
    for scope in sorted(set(granted) | set(expected)):
        for key in sorted(set(granted.get(scope, {})) | set(expected.get(scope, {}))):
            have, want = granted.get(scope, {}).get(key, set()), expected.get(scope, {}).get(key, set())
            if have - want:
                lines.append(f"{scope} {key}: granted but unused {sorted(have - want)}")
            if want - have:
                lines.append(f"{scope} {key}: used but not granted {sorted(want - have)}")
    return "chart RBAC differs from the controller's API calls:\n" + "\n".join(lines)


def test_user_roles_aggregate_into_edit_admin_and_view() -> None:
    """Creating an InferenceServer == creating pods: only edit/admin (who may create pods) get it."""
    roles = {o["metadata"]["name"]: o for o in render((), {}) if o["kind"] == "ClusterRole"}
    edit, view = roles["ctxfit-edit"], roles["ctxfit-view"]
    assert edit["metadata"]["labels"]["rbac.authorization.k8s.io/aggregate-to-edit"] == "true"
    assert edit["metadata"]["labels"]["rbac.authorization.k8s.io/aggregate-to-admin"] == "true"
    assert "rbac.authorization.k8s.io/aggregate-to-view" not in edit["metadata"]["labels"]
    assert view["metadata"]["labels"]["rbac.authorization.k8s.io/aggregate-to-view"] == "true"
    assert {"create", "update", "patch", "delete"} <= set(edit["rules"][0]["verbs"])
    assert all(set(r["verbs"]) <= {"get", "list", "watch"} for r in view["rules"])
    assert all("inferenceservers/status" not in r["resources"] for r in edit["rules"])
    assert not any(o["metadata"]["name"] in ("ctxfit-edit", "ctxfit-view")
                   for o in render((), {"rbac.userRoles": False}))
