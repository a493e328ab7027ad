"""Monitoring with kube-prometheus-stack: every monitor and rule carries its `release` label; Grafana-managed
alerts state their prerequisite (the alerts sidecar)."""

from __future__ import annotations

from typing import Any

import pytest
import yaml

from tests.unit.chart.chartkit import ALL_ON, CHART, render

KPS_VALUES = CHART / "ci" / "kube-prometheus-stack-values.yaml"
MONITOR_KINDS = ("ServiceMonitor", "PodMonitor", "PrometheusRule")


def _monitors(objs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [o for o in objs if o["kind"] in MONITOR_KINDS]


def test_kube_prometheus_stack_values_label_every_monitor_and_rule() -> None:
    monitors = _monitors(render([KPS_VALUES]))
    assert sorted(o["kind"] for o in monitors) == sorted(MONITOR_KINDS)
    unlabelled = [f"{o['kind']}/{o['metadata']['name']}" for o in monitors
                  if o["metadata"]["labels"].get("release") != "kube-prometheus-stack"]
    assert not unlabelled


@pytest.mark.parametrize("release", ["kube-prometheus-stack", "monitoring"])
def test_one_value_labels_all_three(release: str) -> None:
    objs = render((), {"monitoring.labels": {"release": release}, "metrics.serviceMonitor.enabled": True,
                       "engineMonitoring.podMonitor.enabled": True, "prometheusRule.enabled": True})
    assert {o["metadata"]["labels"]["release"] for o in _monitors(objs)} == {release}
    assert len(_monitors(objs)) == 3


def test_an_objects_own_labels_win_and_chart_labels_stay() -> None:
    objs = render((), {"monitoring.labels": {"release": "kps", "team": "ml"}, "prometheusRule.enabled": True,
                       "prometheusRule.labels": {"release": "other"}, "metrics.serviceMonitor.enabled": True})
    by_kind = {o["kind"]: o["metadata"]["labels"] for o in _monitors(objs)}
    assert by_kind["PrometheusRule"]["release"] == "other" and by_kind["PrometheusRule"]["team"] == "ml"
    assert by_kind["ServiceMonitor"]["release"] == "kps"
    assert all(labels["app.kubernetes.io/name"] == "ctxfit" for labels in by_kind.values())


def test_no_monitoring_labels_by_default() -> None:
    objs = render((), {"metrics.serviceMonitor.enabled": True, "prometheusRule.enabled": True})
    assert all("release" not in o["metadata"]["labels"] for o in _monitors(objs))


def test_all_on_values_still_label_their_monitors() -> None:
    assert {o["metadata"]["labels"].get("release") for o in _monitors(render([ALL_ON]))} == {"kube-prometheus-stack"}


def test_grafana_alerts_state_the_alerts_sidecar_prerequisite() -> None:
    values_text = (CHART / "values.yaml").read_text()
    block = values_text[values_text.index("# Grafana-managed alert rules"):]
    assert "grafana.sidecar.alerts.enabled=true" in block.split("datasourceUid")[0]
    assert "grafana.sidecar.alerts.enabled=true" in (CHART / "templates" / "grafana-alerts.yaml").read_text()
    assert "grafana.sidecar.alerts.enabled=true" in (CHART / "templates" / "NOTES.txt").read_text()
    assert yaml.safe_load(values_text)["grafanaAlerts"]["enabled"] is False
