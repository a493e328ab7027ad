"""README's Monitoring section, checked against the chart and the dashboards like the plan output is: its
helm command labels every monitor and rule for kube-prometheus-stack, its panel table and pictures are what
hack/dashboard_picture.py draws from the dashboard JSON (sample data, captioned as such)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "hack"))
import dashboard_picture

from tests.unit.chart.chartkit import CHART, REPO, render
from tests.unit.chart.readmekit import README, commands, section

MONITORING = section(README, "## Monitoring")
KINDS = ("ServiceMonitor", "PodMonitor", "PrometheusRule")


def _helm_sets() -> dict[str, object]:
    (upgrade,) = [c for c in commands(MONITORING, "helm") if c[1] == "upgrade"]
    sets = dict(upgrade[i + 1].split("=", 1) for i, a in enumerate(upgrade) if a == "--set")
    return {k: {"true": True, "false": False}.get(v, v) for k, v in sets.items()}


def test_readme_command_labels_every_monitor_and_rule_for_kube_prometheus_stack() -> None:
    objs = [o for o in render((), _helm_sets()) if o["kind"] in KINDS]
    assert sorted(o["kind"] for o in objs) == sorted(KINDS)
    assert {o["metadata"]["labels"].get("release") for o in objs} == {"kube-prometheus-stack"}


def test_readme_command_equals_the_values_file_it_names() -> None:
    values = CHART / "ci" / "kube-prometheus-stack-values.yaml"
    assert str(values.relative_to(REPO)) in MONITORING
    assert render([values]) == render((), _helm_sets())


def test_readme_states_the_grafana_alerts_prerequisite() -> None:
    assert "grafana.sidecar.alerts.enabled=true" in MONITORING and "grafanaAlerts.enabled" in MONITORING


def test_readme_panel_table_is_drawn_from_the_dashboards() -> None:
    table = dashboard_picture.panel_table()
    assert table in MONITORING, "regenerate: python3 hack/dashboard_picture.py --table"


def test_pictures_are_current_and_say_they_show_sample_data() -> None:
    for path, text in dashboard_picture.pictures().items():
        assert path.read_text() == text, f"{path.name} is stale: run python3 hack/dashboard_picture.py"
        assert "SAMPLE DATA" in text and "not a screenshot" in text
        assert str(path.relative_to(REPO)) in MONITORING
    assert "sample data" in MONITORING and "not a screenshot" in MONITORING


def test_every_dashboard_panel_is_in_the_picture() -> None:
    for path in sorted(dashboard_picture.DASHBOARDS.glob("*.json")):
        board = json.loads(path.read_text())
        svg = (dashboard_picture.IMAGES / f"{path.stem}.svg").read_text()
        for panel in board["panels"]:
            assert f">{panel['title'].replace('&', '&amp;')}<" in svg, panel["title"]
