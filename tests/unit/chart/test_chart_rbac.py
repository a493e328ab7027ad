"""The chart's RBAC equals what the operator's code asks the API server for: no less (a 403 waiting to
happen), no more (least privilege). Read statically from operator/ctxfit/controller, in one dialect:

- every ``rest.call(VERB, RESOURCE, ...)`` / ``rest.call_json(...)`` / ``rest.read(RESOURCE, ...)`` /
  ``rest.list(RESOURCE, ...)`` / ``rest.watch(RESOURCE, ...)`` (list, watch) with a
  ``Resource`` of controller/kube/rest.py's table, and every call of a helper that hands its ``resource`` parameter
  to those (controller/kube/objects.py: ``create_or_replace(rest, LEADER_WORKER_SETS, ...)`` counts the helper's
  verbs for LeaderWorkerSets); any other API call (a generated ``kubernetes`` client method, a raw request with a
  computed path) cannot be mapped and fails the test;
- every kopf ``index``/``on.event`` resource (kopf lists and watches it), plus what kopf itself needs:
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
from ctxfit.controller.kube import rest

from tests.unit.chart.chartkit import NAMESPACE, REPO, render

CONTROLLER = REPO / "operator" / "ctxfit" / "controller"

# resources the chart grants only when a value turns the feature on (templates/rbac.yaml): without it the
# operator must not be allowed them, with it exactly what the code uses
OPTIONAL = {("keda.sh", "scaledobjects"): "autoscaling.keda.enabled",
            ("inference.networking.k8s.io", "inferencepools"): "gateway.enabled",
            ("apps", "replicasets"): "gateway.enabled", ("apps", "statefulsets"): "gateway.enabled"}
# verbs of an always-granted resource that only a feature uses: granted only when its value is on
OPTIONAL_VERBS = {("", "pods"): ({"patch"}, "gateway.enabled")}
# the generated client (``read_namespaced_pod``, ``api.list_node``, ``client.CoreV1Api``): not the dialect
GENERATED_CALL = re.compile(r"^(read|get|list|create|replace|patch|delete)_(namespaced|cluster)_\w+$")
GENERATED_METHOD = re.compile(r"^(read|list|create|replace|patch|delete)_\w+$")
GENERATED_RECEIVER = re.compile(r"\b(core|apps|custom|coordination|api)$")
GENERATED_API = re.compile(r"^(\w+V\d\w*Api|CustomObjectsApi)$")
# kopf's own needs (kopf 1.45 _core/reactor/observation.py, _core/engines/posting.py)
KOPF = {("apiextensions.k8s.io", "customresourcedefinitions"): {"list", "watch"}}
KOPF_NAMESPACED = {("", "namespaces"): {"list", "watch"}}
CLUSTER_SCOPED = {"nodes", "namespaces", "customresourcedefinitions", "storageclasses"}
KOPF_RESOURCES = {"pods": "", "nodes": "", "services": "", "events": "", "namespaces": "", "deployments": "apps",
                  "persistentvolumeclaims": ""}
HTTP_VERBS = {"POST": "create", "PUT": "update", "PATCH": "patch", "DELETE": "delete"}
REST_METHODS = ("call", "call_json", "read", "list", "watch")

Needs = dict[tuple[str, str], set[str]]


def _add(needs: Needs, key: tuple[str, str], *verbs: str) -> None:
    needs.setdefault(key, set()).update(verbs)


def _resource(node: ast.expr) -> rest.Resource | None:
    """The ``Resource`` of rest.py's table a name refers to (None: not one)."""
    found = getattr(rest, node.id, None) if isinstance(node, ast.Name) else None
    return found if isinstance(found, rest.Resource) else None


def _callee(call: ast.Call) -> str:
    return call.func.attr if isinstance(call.func, ast.Attribute) else ast.unparse(call.func)


def _is_rest_call(call: ast.Call) -> bool:
    func = call.func
    return isinstance(func, ast.Attribute) and bool(re.search(r"\brest$", ast.unparse(func.value)))


def _functions(tree: ast.Module) -> list[ast.FunctionDef | ast.AsyncFunctionDef]:
    """Module-level functions and methods (a nested function counts as part of the one that encloses it)."""
    out: list[ast.FunctionDef | ast.AsyncFunctionDef] = []
    for node in tree.body:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            out.append(node)
        elif isinstance(node, ast.ClassDef):
            out += [n for n in node.body if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef)]
    return out


class Reader:
    """One walk over the controller: verbs by (group, resource), per-helper verbs on its ``resource`` parameter,
    and what could not be mapped."""

    def __init__(self) -> None:
        self.needs: Needs = {}
        self.unknown: list[str] = []
        self.helper_verbs: dict[str, set[str]] = {}  # helper -> verbs it uses on its ``resource`` parameter
        self.hands_to: dict[str, set[str]] = {}  # helper -> helpers it hands its ``resource`` parameter to
        self.resource_calls: list[tuple[str, rest.Resource, str]] = []  # (helper, resource passed, where)

    def rest_call(self, where: str, call: ast.Call, helper: str, params: set[str]) -> None:
        func = call.func
        assert isinstance(func, ast.Attribute)
        if func.attr not in REST_METHODS:
            self.unknown.append(where)
            return
        args = list(call.args)
        verb = "GET"
        if func.attr not in ("read", "list", "watch"):
            if not args or not isinstance(args[0], ast.Constant) or not isinstance(args[0].value, str):
                self.unknown.append(where)
                return
            verb = args.pop(0).value
        resource = _resource(args[0]) if args else None
        generic = bool(args) and isinstance(args[0], ast.Name) and args[0].id in params and resource is None
        if resource is None and not generic:
            self.unknown.append(where)
            return
        namespaced = resource.namespaced if resource is not None else True
        named = len(args) - 1 >= (2 if namespaced else 1) or any(k.arg == "name" for k in call.keywords)
        rbac_verbs = {"list", "watch"} if func.attr == "watch" else {"list"} if func.attr == "list" else \
            {HTTP_VERBS.get(verb) or ("get" if named else "list")}
        if resource is not None:
            _add(self.needs, (resource.group, resource.rbac), *rbac_verbs)
        else:
            self.helper_verbs.setdefault(helper, set()).update(rbac_verbs)

    def function(self, path: Path, func: ast.FunctionDef | ast.AsyncFunctionDef) -> None:
        params = {a.arg for a in (*func.args.posonlyargs, *func.args.args, *func.args.kwonlyargs)}
        for node in ast.walk(func):
            if isinstance(node, ast.Attribute) and (
                    GENERATED_CALL.match(node.attr) or GENERATED_API.match(node.attr)
                    or (GENERATED_METHOD.match(node.attr) and GENERATED_RECEIVER.search(ast.unparse(node.value)))):
                self.unknown.append(f"{path.name}:{node.lineno} {node.attr}: use rest.call with a Resource")
            if not isinstance(node, ast.Call):
                continue
            where = f"{path.name}:{node.lineno} {ast.unparse(node)[:80]}"
            if _is_rest_call(node):
                self.rest_call(where, node, func.name, params)
                continue
            for arg in node.args:
                resource = _resource(arg)
                if resource is not None:
                    self.resource_calls.append((_callee(node), resource, where))
                elif isinstance(arg, ast.Name) and arg.id in params and arg.id == "resource":
                    self.hands_to.setdefault(func.name, set()).add(_callee(node))

    def kopf(self, path: Path, call: ast.Call) -> None:
        if ast.unparse(call.func) not in ("kopf.index", "kopf.on.event") or not call.args:
            return
        first = call.args[0]
        if isinstance(first, ast.Constant) and first.value in KOPF_RESOURCES and len(call.args) == 1:
            _add(self.needs, (KOPF_RESOURCES[first.value], first.value), "list", "watch")
        elif ast.unparse(first) == "API_GROUP":
            _add(self.needs, ("ctxfit.io", "inferenceservers"), "list", "watch")
        else:
            self.unknown.append(f"{path.name}:{call.lineno} {ast.unparse(call)}")

    def resolve(self) -> None:
        """Each helper's verbs include those of the helpers it hands its resource to; each call of a helper with a
        table resource counts them for that resource."""
        changed = True
        while changed:
            changed = False
            for helper, callees in self.hands_to.items():
                verbs = set().union(*(self.helper_verbs.get(c, set()) for c in callees))
                if not verbs <= self.helper_verbs.get(helper, set()):
                    self.helper_verbs.setdefault(helper, set()).update(verbs)
                    changed = True
        for helper, resource, where in self.resource_calls:
            if helper not in self.helper_verbs:
                self.unknown.append(f"{where}: {helper} is no helper over rest.call")
                continue
            if not resource.namespaced:
                self.unknown.append(f"{where}: a cluster-scoped resource through a namespaced helper")
            _add(self.needs, (resource.group, resource.rbac), *self.helper_verbs[helper])


def code_needs() -> tuple[Needs, list[str]]:
    """(group, resource) -> verbs the controller code uses, and a list of calls it could not map."""
    reader = Reader()
    for path in sorted(CONTROLLER.rglob("*.py")):
        tree = ast.parse(path.read_text())
        for func in _functions(tree):
            reader.function(path, func)
        for call in [n for n in ast.walk(tree) if isinstance(n, ast.Call)]:
            reader.kopf(path, call)
    reader.resolve()
    return reader.needs, reader.unknown


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
    assert not unknown, f"API calls this test cannot map to RBAC (call rest.call with a Resource of rest.py): {unknown}"
    assert ("apps", "deployments") in needs and ("ctxfit.io", "inferenceservers/status") in needs
    assert needs[("leaderworkerset.x-k8s.io", "leaderworkersets")] >= {"get", "create", "patch"}
    assert needs[("keda.sh", "scaledobjects")] >= {"get", "create", "patch", "delete"}
    assert needs[("coordination.k8s.io", "leases")] == {"get", "create", "update"}


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
