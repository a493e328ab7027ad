"""The chart's gateway switch: off by default (no RBAC on inferencepools, no pod patch, no env), on: exactly those
rules in the namespaced rules (ClusterRole, or a Role per watched namespace) and CTXFIT_GATEWAY_ENABLED; the engine
PodMonitor scrapes every rank port and labels series with the pod's pool."""

from __future__ import annotations

from typing import Any

from tests.unit.chart.chartkit import objects, one, render

POOLS = ("inference.networking.k8s.io", "inferencepools")


def _rules(objs: list[dict[str, Any]]) -> list[tuple[str, str, frozenset[str]]]:
    out = []
    for role in objects(objs, "ClusterRole") + objects(objs, "Role"):
        for rule in role.get("rules") or []:
            for group in rule.get("apiGroups", []):
                for resource in rule.get("resources", []):
                    out.append((group, resource, frozenset(rule.get("verbs", []))))
    return out


def _env(objs: list[dict[str, Any]]) -> dict[str, Any]:
    deployment = one(objs, "Deployment")
    return {e["name"]: e.get("value") for e in deployment["spec"]["template"]["spec"]["containers"][0]["env"]}


def test_off_by_default() -> None:
    objs = render()
    rules = _rules(objs)
    assert not [r for r in rules if (r[0], r[1]) == POOLS]
    assert not [r for r in rules if (r[0], r[1]) == ("", "pods") and "patch" in r[2]]
    assert "CTXFIT_GATEWAY_ENABLED" not in _env(objs)


def test_on_grants_pools_and_pod_labels() -> None:
    objs = render(set_values={"gateway.enabled": True})
    rules = _rules(objs)
    (pools,) = [r for r in rules if (r[0], r[1]) == POOLS]
    assert pools[2] == {"get", "list", "watch", "create", "patch", "delete"}
    assert [r for r in rules if (r[0], r[1]) == ("", "pods") and r[2] == {"patch"}]
    assert _env(objs)["CTXFIT_GATEWAY_ENABLED"] == "true"
    cluster = [o for o in objects(objs, "ClusterRole") if o["metadata"]["name"].endswith("-cluster")]
    assert not [r for r in _rules(cluster) if (r[0], r[1]) == POOLS]  # namespaced, never cluster-wide


def test_on_with_watched_namespaces_is_per_namespace() -> None:
    objs = render(set_values={"gateway.enabled": True, "watchNamespaces": ["a", "b"]})
    roles = [r for r in objects(objs, "Role") if any((g, res) == POOLS for g, res, _ in _rules([r]))]
    assert sorted(r["metadata"]["namespace"] for r in roles) == ["a", "b"]


def test_pod_monitor_scrapes_every_rank_and_labels_the_pool() -> None:
    objs = render(set_values={"engineMonitoring.podMonitor.enabled": True})
    endpoints = one(objs, "PodMonitor")["spec"]["podMetricsEndpoints"]
    assert [e["port"] for e in endpoints] == ["http", *(f"http-rank{i}" for i in range(1, 8))]
    for endpoint in endpoints:
        pool = [r for r in endpoint["relabelings"] if r.get("targetLabel") == "pool"]
        assert pool == [{"sourceLabels": ["__meta_kubernetes_pod_label_ctxfit_io_inference_pool"],
                         "targetLabel": "pool"}]
