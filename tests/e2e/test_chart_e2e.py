"""The Helm chart against the real local control plane (tests/e2e/conftest.py `cluster`).

1. Every object the chart renders (default values, and every option on) passes `kubectl apply
   --dry-run=server --validate=strict`. prometheus-operator's CRDs are not part of the test cluster: the
   test installs minimal ServiceMonitor/PodMonitor/PrometheusRule CRDs of its own first (structural
   schemas of the fields the chart sets, typed; not the upstream CRDs), so those objects are validated
   by the API server against that schema rather than client-side.
2. `helm install` of the chart, then the operator (`python -m ctxfit.controller`, with the environment
   of the rendered Deployment) runs as the chart's ServiceAccount: it talks to a `kubectl proxy
   --as=system:serviceaccount:<ns>:<sa>` (impersonation; the proxy logs every API request and its
   status at -v=6), reconciles manifests/kimi-128k.yaml to Ready without a single 403, and every
   (verb, resource) it used is one the chart grants (`kubectl auth can-i --as`). The list of verbs used
   and the grants it never used go to the end-of-run summary.
3. While it runs, its /metrics exposes the per-server ctxfit_* series.

Both operator scopes run: cluster-wide (the default) and watchNamespaces with two replicas (leader
election on a Lease).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
import urllib.request
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

import ctxfit_cluster as cc
import pytest
import yaml

from .chart_kit import CHART, KIMI, REPO, container_env, helm

try:
    from .conftest import report
except ImportError:  # pragma: no cover - collected outside the package
    def report(line: str) -> None:
        print(line)

ALL_ON = CHART / "ci" / "all-on-values.yaml"

# Minimal prometheus-operator CRDs: the fields the chart sets, typed; the rest preserved unknown.
_STR = {"type": "string"}
_DURATION = {"type": "string", "pattern": "^(0|(([0-9]+)y)?(([0-9]+)w)?(([0-9]+)d)?(([0-9]+)h)?(([0-9]+)m)?"
                                          "(([0-9]+)s)?(([0-9]+)ms)?)$"}
_MAP = {"type": "object", "additionalProperties": {"type": "string"}}
_RELABELS = {"type": "array", "items": {"type": "object", "x-kubernetes-preserve-unknown-fields": True}}
_SELECTOR = {"type": "object", "properties": {
    "matchLabels": _MAP,
    "matchExpressions": {"type": "array", "items": {"type": "object", "required": ["key", "operator"],
                                                    "properties": {"key": _STR, "operator": _STR,
                                                                   "values": {"type": "array", "items": _STR}}}}}}
_NS_SELECTOR = {"type": "object", "properties": {"any": {"type": "boolean"},
                                                 "matchNames": {"type": "array", "items": _STR}}}
_ENDPOINT = {"type": "object", "x-kubernetes-preserve-unknown-fields": True, "properties": {
    "port": _STR, "path": _STR, "interval": _DURATION, "scrapeTimeout": _DURATION, "honorLabels": {"type": "boolean"},
    "relabelings": _RELABELS, "metricRelabelings": _RELABELS}}
_RULE = {"type": "object", "properties": {
    "alert": _STR, "record": _STR, "expr": {"x-kubernetes-int-or-string": True}, "for": _DURATION,
    "labels": _MAP, "annotations": _MAP}}
MONITORING_SPECS = {
    ("ServiceMonitor", "servicemonitors"): {"type": "object", "required": ["selector", "endpoints"], "properties": {
        "selector": _SELECTOR, "namespaceSelector": _NS_SELECTOR, "jobLabel": _STR,
        "endpoints": {"type": "array", "items": _ENDPOINT}}},
    ("PodMonitor", "podmonitors"): {"type": "object", "required": ["selector"], "properties": {
        "selector": _SELECTOR, "namespaceSelector": _NS_SELECTOR, "jobLabel": _STR,
        "podMetricsEndpoints": {"type": "array", "items": _ENDPOINT}}},
    ("PrometheusRule", "prometheusrules"): {"type": "object", "properties": {"groups": {"type": "array", "items": {
        "type": "object", "required": ["name", "rules"], "properties": {
            "name": _STR, "interval": _DURATION, "rules": {"type": "array", "items": _RULE}}}}}},
}


def monitoring_crd(kind: str, plural: str, spec_schema: dict[str, Any]) -> dict[str, Any]:
    return {
        "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
        "metadata": {"name": f"{plural}.monitoring.coreos.com", "labels": {"ctxfit.io/test": "minimal-copy"}},
        "spec": {"group": "monitoring.coreos.com", "scope": "Namespaced",
                 "names": {"kind": kind, "plural": plural, "singular": kind.lower(), "listKind": f"{kind}List"},
                 "versions": [{"name": "v1", "served": True, "storage": True, "schema": {"openAPIV3Schema": {
                     "type": "object", "properties": {"spec": spec_schema}}}}]},
    }


@pytest.fixture(scope="module")
def monitoring_crds(cluster: cc.Cluster) -> Iterator[None]:
    created = []
    for (kind, plural), schema in MONITORING_SPECS.items():
        name = f"{plural}.monitoring.coreos.com"
        if cluster.kubectl_proc("get", "crd", name).returncode != 0:
            cluster.apply(monitoring_crd(kind, plural, schema))
            created.append(name)
    for name in created:
        cluster.wait_established(name, timeout=60)
    yield
    for name in created:
        cluster.kubectl("delete", "crd", name, "--wait=false", check=False)


def ensure_namespaces(cluster: cc.Cluster, names: list[str]) -> list[str]:
    created = []
    for name in names:
        if cluster.kubectl_proc("get", "namespace", name).returncode != 0:
            cluster.create_namespace(name, wait_service_account=False)
            created.append(name)
    return created


@pytest.mark.parametrize("values_files", [[], [ALL_ON]], ids=["default", "all-on"])
def test_rendered_objects_pass_server_side_dry_run(cluster: cc.Cluster, monitoring_crds: None, tmp_path: Path,
                                                   values_files: list[Path]) -> None:
    release_ns = f"ctxfit-dry-{uuid.uuid4().hex[:6]}"
    values = [arg for path in values_files for arg in ("--values", str(path))]
    rendered = helm(cluster, "template", "ctxfit", str(CHART), "--namespace", release_ns, *values).stdout
    objs = [o for o in yaml.safe_load_all(rendered) if o]
    namespaces = sorted({o["metadata"]["namespace"] for o in objs if o["metadata"].get("namespace")})
    created = ensure_namespaces(cluster, namespaces)
    try:
        path = tmp_path / "rendered.yaml"
        path.write_text(rendered)
        out = cluster.kubectl("apply", "--dry-run=server", "--validate=strict", "-f", str(path))
        applied = [line for line in out.splitlines() if line.strip()]
        assert len(applied) == len(objs), out
        kinds = {o["kind"] for o in objs}
        if values_files:
            assert {"ServiceMonitor", "PodMonitor", "PrometheusRule", "Role", "ConfigMap"} <= kinds
    finally:
        for name in created:
            cluster.kubectl("delete", "namespace", name, "--wait=false", check=False)


def test_dry_run_catches_a_bad_monitoring_object(cluster: cc.Cluster, monitoring_crds: None, tmp_path: Path) -> None:
    """The minimal CRDs do validate: a PrometheusRule with a malformed `for` is rejected."""
    ns = ensure_namespaces(cluster, [f"ctxfit-dry-{uuid.uuid4().hex[:6]}"])[0]
    try:
        bad = {"apiVersion": "monitoring.coreos.com/v1", "kind": "PrometheusRule",
               "metadata": {"name": "bad", "namespace": ns},
               "spec": {"groups": [{"name": "g", "rules": [{"alert": "A", "expr": "up", "for": "ten minutes"}]}]}}
        proc = cluster.kubectl_proc("apply", "--dry-run=server", "-f", "-", input=json.dumps(bad))
        assert proc.returncode != 0 and "for" in proc.stderr, proc.stderr
    finally:
        cluster.kubectl("delete", "namespace", ns, "--wait=false", check=False)


# ------------------------------------------------------------------- install + operator as its ServiceAccount


@dataclass
class Request:
    method: str
    url: str
    status: int

    @property
    def parsed(self) -> tuple[str, str, str, str, str] | None:
        """(verb, group, resource[/subresource], namespace, name) or None for discovery/non-resource paths."""
        split = urlsplit(self.url)
        parts = [p for p in split.path.split("/") if p]
        if parts[:1] == ["api"] and len(parts) >= 2:
            group, rest = "", parts[2:]
        elif parts[:1] == ["apis"] and len(parts) >= 3:
            group, rest = parts[1], parts[3:]
        else:
            return None
        if not rest:
            return None
        namespace = ""
        if rest[0] == "namespaces" and len(rest) >= 3:
            namespace, rest = rest[1], rest[2:]
        resource, name, sub = rest[0], rest[1] if len(rest) > 1 else "", rest[2] if len(rest) > 2 else ""
        query = parse_qs(split.query)
        writes = {"POST": "create", "PUT": "update", "PATCH": "patch",
                  "DELETE": "delete" if name else "deletecollection"}
        verb = writes.get(self.method, "")
        if self.method == "GET":
            verb = "get" if name else ("watch" if query.get("watch", [""])[0] in ("true", "1") else "list")
        return verb, group, f"{resource}/{sub}" if sub else resource, namespace, name


RESPONSE_LINE = re.compile(r'"Response" verb="(\w+)" url="([^"]+)" status="(\d+)')


@dataclass
class OperatorRun:
    mode: str
    release: str
    release_ns: str
    server_ns: str
    service_account: str
    rendered: list[dict[str, Any]]
    requests: list[Request] = field(default_factory=list)
    metrics: str = ""
    server: dict[str, Any] = field(default_factory=dict)
    operator_log: str = ""
    operator_pid: int = 0
    event_instances: set[str] = field(default_factory=set)
    lease_holder: str = ""  # with peering (2 replicas)

    @property
    def pod_name(self) -> str:
        """The name the operator runs under: the downward API's metadata.name of a pod of the release."""
        return f"{self.release}-local"


def _free_port() -> int:
    return cc.free_ports(1)[0]


def _scrape(port: int) -> str:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=3) as response:
        return str(response.read().decode())


def _stop(proc: subprocess.Popen[Any], timeout: float = 20) -> None:
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


MODES = {
    "cluster-wide": lambda ns: ["--set", "replicaCount=1"],
    "namespaced-2-replicas": lambda ns: ["--set-json", f'watchNamespaces=["{ns}"]', "--set", "replicaCount=2"],
}


@pytest.fixture(scope="module", params=list(MODES), ids=list(MODES))
def operator_run(request: pytest.FixtureRequest, cluster: cc.Cluster, tmp_path_factory: pytest.TempPathFactory
                 ) -> Iterator[OperatorRun]:
    mode = request.param
    suffix = uuid.uuid4().hex[:6]
    release, release_ns, server_ns = f"ctxfit-{suffix}", f"ctxfit-system-{suffix}", f"e2e-chart-{suffix}"
    work = tmp_path_factory.mktemp(f"operator-{mode}")
    cluster.create_namespace(server_ns)
    health, metrics = _free_port(), _free_port()
    args = ["--namespace", release_ns, *MODES[mode](server_ns), "--set", f"metrics.port={metrics}",
            "--set", f"operator.healthPort={health}"]
    rendered = [o for o in yaml.safe_load_all(helm(cluster, "template", release, str(CHART), *args).stdout) if o]
    run = OperatorRun(mode, release, release_ns, server_ns, "", rendered)
    processes: list[subprocess.Popen[Any]] = []
    try:
        helm(cluster, "install", release, str(CHART), *args, "--create-namespace", "--take-ownership",
             "--wait", "--timeout", "90s")
        deployment = next(o for o in rendered if o["kind"] == "Deployment")
        pod = deployment["spec"]["template"]["spec"]
        run.service_account = pod["serviceAccountName"]
        container = pod["containers"][0]

        # kubectl proxy as the ServiceAccount (impersonation); -v=6 logs each request's verb, URL, status
        proxy_log = work / "proxy.log"
        with proxy_log.open("w") as out:
            proxy = subprocess.Popen(
                [str(cluster.bin_dir / "kubectl"), "--kubeconfig", str(cluster.kubeconfig), "proxy", "--port=0",
                 f"--as=system:serviceaccount:{release_ns}:{run.service_account}", "-v=6"],
                stdout=out, stderr=subprocess.STDOUT, start_new_session=True, preexec_fn=cc._set_pdeathsig)
        processes.append(proxy)
        port = cc.wait_until(lambda: (m := re.search(r"Starting to serve on 127\.0\.0\.1:(\d+)", proxy_log.read_text()))
                             and int(m.group(1)), 15, "kubectl proxy")
        kubeconfig = work / "kubeconfig"
        kubeconfig.write_text(json.dumps({
            "apiVersion": "v1", "kind": "Config", "current-context": "sa",
            "clusters": [{"name": "proxy", "cluster": {"server": f"http://127.0.0.1:{port}"}}],
            "users": [{"name": "sa", "user": {}}],
            "contexts": [{"name": "sa", "context": {"cluster": "proxy", "user": "sa", "namespace": release_ns}}]}))

        # the operator with the rendered container's command and environment (the downward API's fields as the
        # kubelet would fill them for a pod of this name)
        env = {k: v for k, v in os.environ.items() if not k.startswith(("CTXFIT_", "POD_"))}
        env.update(container_env(container, run.pod_name, release_ns))
        env.update(KUBECONFIG=str(kubeconfig), PYTHONPATH=str(REPO / "operator"))
        command = [sys.executable if c == "python" else c for c in container["command"]] + container.get("args", [])
        operator_log = work / "operator.log"
        with operator_log.open("w") as out:
            operator = subprocess.Popen(command, cwd=work, env=env, stdout=out, stderr=subprocess.STDOUT,
                                        start_new_session=True, preexec_fn=cc._set_pdeathsig)
        processes.append(operator)

        def operator_alive() -> bool:
            if operator.poll() is not None:
                pytest.fail(f"the operator exited {operator.returncode}:\n{operator_log.read_text()[-5000:]}")
            return True

        cc.wait_until(lambda: operator_alive() and _scrape(metrics), 30, "operator /metrics")
        cluster.kubectl("-n", server_ns, "apply", "-f", str(KIMI))
        name = yaml.safe_load(KIMI.read_text())["metadata"]["name"]

        def ready() -> dict[str, Any] | None:
            operator_alive()
            obj: dict[str, Any] = cluster.kubectl_json("-n", server_ns, "get", "inferenceserver", name)
            return obj if obj.get("status", {}).get("phase") == "Ready" else None

        try:
            run.server = cc.wait_until(ready, 120, f"InferenceServer {server_ns}/{name} Ready")
        except cc.HarnessError:
            status = cluster.kubectl("-n", server_ns, "get", "inferenceserver", name, "-o", "yaml", check=False)
            pytest.fail(f"not Ready:\n{status}\noperator log:\n{operator_log.read_text()[-5000:]}")
        run.operator_pid = operator.pid
        run.event_instances = {e.get("reportingInstance", "") for e in cluster.kubectl_json(
            "-n", server_ns, "get", "events")["items"] if e.get("reportingComponent") == "ctxfit-operator"}
        peering = next((i["value"] for i in container["env"] if i["name"] == "CTXFIT_PEERING"), "")
        if peering:
            run.lease_holder = cluster.kubectl_json("-n", release_ns, "get", "lease", peering)["spec"]["holderIdentity"]
        time.sleep(2)  # one more round of the gauges
        run.metrics = _scrape(metrics)
        cluster.kubectl("-n", server_ns, "delete", "-f", str(KIMI), "--wait=true", "--timeout=60s")
        time.sleep(2)  # the deletion is observed and handled, through the proxy too
        _stop(operator)
        _stop(proxy)
        run.operator_log = operator_log.read_text()
        run.requests = [Request(m.group(1), m.group(2), int(m.group(3)))
                        for m in RESPONSE_LINE.finditer(proxy_log.read_text())]
        yield run
    finally:
        for proc in reversed(processes):
            _stop(proc)
        helm(cluster, "uninstall", release, "--namespace", release_ns, "--wait", check=False)
        for ns in (server_ns, release_ns):
            cluster.kubectl("delete", "namespace", ns, "--wait=false", "--ignore-not-found", check=False)
        shutil.rmtree(work, ignore_errors=True)


def test_operator_reconciles_kimi_to_ready(operator_run: OperatorRun) -> None:
    status = operator_run.server["status"]
    assert status["phase"] == "Ready"
    assert status["contextLength"] == 131072
    conditions = {c["type"]: c["status"] for c in status.get("conditions", [])}
    assert conditions.get("Ready") == "True"


def test_operator_identity_is_its_pod_name(operator_run: OperatorRun) -> None:
    """The pod name the chart hands the operator (POD_NAME, downward API) is its identity: the Events it posts
    name it as reportingInstance, and with 2 replicas it holds the Lease under it (the host name here is the
    machine's, so a variable the operator does not read would show)."""
    identity = f"{operator_run.pod_name}-{operator_run.operator_pid}"
    assert operator_run.event_instances == {identity}
    if operator_run.mode == "namespaced-2-replicas":
        assert operator_run.lease_holder == identity


def test_operator_gets_no_403(operator_run: OperatorRun) -> None:
    assert len(operator_run.requests) > 10, "the proxy saw (almost) no requests: is the operator using it?"
    denied = [f"{r.method} {r.url}" for r in operator_run.requests if r.status == 403]
    assert not denied, "403 Forbidden for the chart's ServiceAccount:\n" + "\n".join(denied)
    # the proxy's -v=6 lines carry the status ("... 403 Forbidden in 3 milliseconds"); a bare "403" also
    # matches timestamps such as 12:48:26,403
    assert not re.search(r"\b403 Forbidden\b|\bForbidden\b", operator_run.operator_log)


def _can_i(cluster: cc.Cluster, run: OperatorRun, verb: str, group: str, resource: str, namespace: str,
           name: str) -> bool:
    """The API server's own answer for the ServiceAccount: a SubjectAccessReview, as its authorizer sees the
    request. Not ``kubectl auth can-i``: it resolves the resource through discovery first and answers "no" for a
    kind not served now (the operator lists an add-on's kind, e.g. LeaderWorkerSets, to see when it is back)."""
    base, _, sub = resource.partition("/")
    attributes = {"verb": verb, "group": group, "resource": base, "subresource": sub, "name": name,
                  "namespace": namespace}
    review = {"apiVersion": "authorization.k8s.io/v1", "kind": "SubjectAccessReview", "spec": {
        "user": f"system:serviceaccount:{run.release_ns}:{run.service_account}",
        "groups": ["system:serviceaccounts", f"system:serviceaccounts:{run.release_ns}", "system:authenticated"],
        "resourceAttributes": {k: v for k, v in attributes.items() if v}}}
    answer = cluster.kubectl_proc("create", "-f", "-", "-o", "json", input=json.dumps(review))
    assert answer.returncode == 0, answer.stderr
    return bool(json.loads(answer.stdout).get("status", {}).get("allowed"))


def _granted(run: OperatorRun) -> set[tuple[str, str, str, str]]:
    """(verb, group, resource, namespace-or-'*') the chart's RBAC grants the ServiceAccount."""
    out = set()
    for role in run.rendered:
        if role["kind"] not in ("Role", "ClusterRole"):
            continue
        if role["metadata"].get("labels", {}).get("ctxfit.io/role-for") == "users":
            continue  # ctxfit-edit/ctxfit-view are bound to people, not to the operator's ServiceAccount
        ns = role["metadata"].get("namespace", "*")
        for rule in role["rules"]:
            for group in rule["apiGroups"]:
                for resource in rule["resources"]:
                    for verb in rule["verbs"]:
                        out.add((verb, group, resource, ns))
    return out


def _group(group: str) -> str:
    return group or "core"


def test_every_verb_the_operator_used_is_granted_and_listed(cluster: cc.Cluster, operator_run: OperatorRun) -> None:
    used: dict[tuple[str, str, str, str], int] = {}
    named: set[tuple[str, str, str, str, str]] = set()
    for req in operator_run.requests:
        parsed = req.parsed
        if parsed is None:
            continue
        named.add(parsed)
        verb, group, resource, namespace, _ = parsed
        used[(verb, group, resource, namespace)] = used.get((verb, group, resource, namespace), 0) + 1
    assert used, "no resource requests seen"
    not_allowed = [key for key in sorted(named) if not _can_i(cluster, operator_run, *key)]
    assert not not_allowed, f"used but not granted: {not_allowed}"
    granted = _granted(operator_run)
    used_plain = {(v, g, r) for v, g, r, _ in used}
    # a server-side apply that creates its object is a PATCH the API server also authorizes as create
    applied = {("create", g, r) for v, g, r in used_plain if v == "patch"}
    unused = sorted({(v, g, r) for v, g, r, _ in granted} - used_plain - applied)
    lines = [f"ctxfit chart e2e ({operator_run.mode}): verbs the operator used as its ServiceAccount "
             f"(verb group/resource namespace: requests):"]
    lines += [f"  {v:6} {_group(g)}/{r} {ns or '(cluster)'}: {n}" for (v, g, r, ns), n in sorted(used.items())]
    never = ", ".join(f"{v} {_group(g)}/{r}" for v, g, r in unused) or "none"
    lines.append(f"  granted but not used in this scenario: {never}")
    for line in lines:
        report(line)
    # every namespaced request stayed in the namespaces the chart scopes the operator to
    if operator_run.mode.startswith("namespaced"):
        allowed_ns = {operator_run.server_ns, operator_run.release_ns, ""}
        assert {ns for _, _, _, ns in used} <= allowed_ns


EXPECTED_SERIES = [
    "ctxfit_server_context_length_tokens", "ctxfit_server_target_context_length_tokens",
    "ctxfit_server_predicted_max_context_length_tokens", "ctxfit_server_kv_bytes_per_token",
    "ctxfit_server_kv_pool_bytes", "ctxfit_server_headroom_ratio", "ctxfit_server_phase",
    "ctxfit_attempts_total",
]


LABEL = re.compile(r'(\w+)="((?:[^"\\]|\\.)*)"')


def _samples(text: str, metric: str) -> list[tuple[dict[str, str], float]]:
    """(labels, value) of every sample of `metric` in a Prometheus text exposition."""
    out = []
    for line in text.splitlines():
        if line.startswith(metric + "{"):
            labels, _, value = line.rpartition(" ")
            out.append((dict(LABEL.findall(labels[len(metric):])), float(value)))
    return out


def test_metrics_endpoint_exposes_the_server_series(operator_run: OperatorRun) -> None:
    text = operator_run.metrics
    server = {"namespace": operator_run.server_ns, "name": "kimi-k25", "engine": "vllm"}

    def of_server(metric: str) -> list[tuple[dict[str, str], float]]:
        return [(labels, value) for labels, value in _samples(text, metric) if server.items() <= labels.items()]

    for metric in EXPECTED_SERIES:
        assert of_server(metric), f"{metric} has no series for {server}:\n{_samples(text, metric)}"
    assert [v for _, v in of_server("ctxfit_server_context_length_tokens")] == [131072.0]
    assert [v for _, v in of_server("ctxfit_server_target_context_length_tokens")] == [131072.0]
    assert next(v for _, v in of_server("ctxfit_server_predicted_max_context_length_tokens")) >= 131072
    phases = {labels["phase"]: value for labels, value in of_server("ctxfit_server_phase")}
    assert phases["Ready"] == 1.0 and sum(phases.values()) == 1.0
    outcomes = {labels["outcome"]: value for labels, value in of_server("ctxfit_attempts_total")}
    assert sum(outcomes.values()) >= 1
    assert "ctxfit_reconcile_duration_seconds_count" in text
