"""Grafana dashboards (charts/ctxfit/dashboards/*.json): valid JSON with the structure the Grafana sidecar
loads, every PromQL expression in them and in the alert rules parses (promtool), they show the metrics
the alerts use, and they only name metrics ctxfit and the engines export.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.unit.chart.chartkit import (
    ALL_ON,
    DASHBOARDS,
    alert_rules,
    dashboard_targets,
    dashboards,
    grafana_to_promql,
    metric_names,
    prometheus_rule_groups,
    promtool,
    render,
    run,
)

BOARDS = dashboards()
BOARD_IDS = list(BOARDS)

# The metrics ctxfit exports (operator/ctxfit/controller/telemetry/metrics.py; histogram/counter sample names).
CTXFIT_METRICS = {
    "ctxfit_server_context_length_tokens", "ctxfit_server_target_context_length_tokens",
    "ctxfit_server_planned_context_length_tokens",
    "ctxfit_server_predicted_max_context_length_tokens", "ctxfit_server_kv_bytes_per_token",
    "ctxfit_server_kv_pool_bytes", "ctxfit_server_headroom_ratio", "ctxfit_server_phase",
    "ctxfit_server_memory_limit_bytes", "ctxfit_attempts_total", "ctxfit_step_downs_total",
    "ctxfit_reconcile_duration_seconds_bucket", "ctxfit_reconcile_duration_seconds_count",
    "ctxfit_reconcile_duration_seconds_sum", "ctxfit_reconcile_errors_total",
    "ctxfit_kv_cache_tokens", "ctxfit_prediction_error_bytes", "ctxfit_context_clamped",
    "ctxfit_workqueue_wait_seconds_bucket", "ctxfit_workqueue_wait_seconds_count", "ctxfit_workqueue_wait_seconds_sum",
    "ctxfit_api_requests_total", "ctxfit_api_request_duration_seconds_bucket",
    "ctxfit_api_request_duration_seconds_count", "ctxfit_api_request_duration_seconds_sum",
    "ctxfit_server_pool_info", "ctxfit_server_pool_context_length_tokens",
    "ctxfit_server_pool_target_context_length_tokens",
    "ctxfit_model_resolution_duration_seconds_bucket", "ctxfit_model_resolution_duration_seconds_count",
    "ctxfit_model_resolution_duration_seconds_sum", "ctxfit_model_resolution_end_timestamp_seconds",
}
# Engine metrics (docs docs/engine-memory.md A.4: vLLM 0.11-0.33, B.3: SGLang 0.5.4-0.5.23).
ENGINE_METRICS = {
    "vllm:kv_cache_usage_perc", "vllm:gpu_cache_usage_perc", "vllm:num_requests_waiting",
    "vllm:num_requests_running", "vllm:num_preemptions_total", "sglang:token_usage", "sglang:num_queue_reqs",
    "sglang:num_running_reqs",
}


def test_dashboards_exist() -> None:
    assert set(BOARDS) == {"ctxfit-fleet.json", "ctxfit-server.json"}


@pytest.mark.parametrize("name", BOARD_IDS, ids=BOARD_IDS)
def test_dashboard_structure(name: str) -> None:
    board = BOARDS[name]
    assert board["uid"] == Path(name).stem and board["title"].startswith("ctxfit / ")
    assert "id" not in board  # Grafana assigns it; a fixed id clashes on import
    assert "ctxfit" in board["tags"]
    variables = {v["name"]: v for v in board["templating"]["list"]}
    assert variables["datasource"]["type"] == "datasource" and variables["datasource"]["query"] == "prometheus"
    ids: set[int] = set()
    cells: set[tuple[int, int]] = set()
    for panel in board["panels"]:
        assert panel["id"] not in ids, f"duplicate panel id {panel['id']}"
        ids.add(panel["id"])
        pos = panel["gridPos"]
        assert pos["x"] >= 0 and pos["x"] + pos["w"] <= 24, panel["title"]
        for x in range(pos["x"], pos["x"] + pos["w"]):
            for y in range(pos["y"], pos["y"] + pos["h"]):
                assert (x, y) not in cells, f"panel {panel['title']!r} overlaps another"
                cells.add((x, y))
        if panel["type"] == "row":
            continue
        assert panel.get("description"), f"panel {panel['title']!r} has no description"
        assert panel["datasource"] == {"type": "prometheus", "uid": "${datasource}"}
        assert panel["targets"], panel["title"]
        refs = [t["refId"] for t in panel["targets"]]
        assert len(refs) == len(set(refs)), panel["title"]
        for target in panel["targets"]:
            assert target["datasource"] == panel["datasource"] and target["expr"].strip()


def _all_exprs() -> list[tuple[str, str]]:
    """(where, PromQL) for every dashboard query and every alert rule (default and all-on values)."""
    out = [(f"{name}: {title}", grafana_to_promql(expr)) for name, board in BOARDS.items()
           for title, expr in dashboard_targets(board)]
    for label, files in (("default", []), ("all-on", [ALL_ON])):
        out += [(f"alert {alert} ({label})", rule["expr"])
                for alert, rule in alert_rules(prometheus_rule_groups(files)).items()]
    return out


def test_every_promql_expression_parses(tmp_path: Path) -> None:
    # This promtool (2.42, Debian) has no `promql` subcommand: parse each expression as a recording rule
    # in its own group, so a failure names the panel or alert it came from.
    exprs = _all_exprs()
    assert len(exprs) > 60
    groups = [{"name": f"{i:03d} {where}", "rules": [{"record": f"ctxfit:parse_check_{i}", "expr": expr}]}
              for i, (where, expr) in enumerate(exprs)]
    path = tmp_path / "exprs.yaml"
    path.write_text(yaml.safe_dump({"groups": groups}, sort_keys=False))
    proc = run([promtool(), "check", "rules", str(path)], check=False)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert f"SUCCESS: {len(exprs)} rules found" in proc.stdout


def test_a_broken_expression_is_caught(tmp_path: Path) -> None:
    path = tmp_path / "broken.yaml"
    path.write_text(yaml.safe_dump({"groups": [{"name": "g", "rules": [
        {"record": "x", "expr": grafana_to_promql('sum(rate(vllm:num_preemptions_total[$__rate_interval])')}]}]}))
    assert run([promtool(), "check", "rules", str(path)], check=False).returncode != 0


@pytest.mark.parametrize("name", BOARD_IDS, ids=BOARD_IDS)
def test_dashboards_show_every_metric_the_alerts_use(name: str) -> None:
    alert_metrics = set().union(*(metric_names(rule["expr"])
                                  for rule in alert_rules(prometheus_rule_groups()).values()))
    assert len(alert_metrics) == 15
    shown = set().union(*(metric_names(expr) for _, expr in dashboard_targets(BOARDS[name])))
    assert alert_metrics <= shown, f"{name} lacks {sorted(alert_metrics - shown)}"


def test_fleet_kv_panel_is_the_alert_expression() -> None:
    alert = alert_rules(prometheus_rule_groups())["CtxfitKVCacheHigh"]["expr"].rpartition(">")[0].strip()
    panel_exprs = [expr for title, expr in dashboard_targets(BOARDS["ctxfit-fleet.json"])
                   if title == "KV cache usage per server"]
    assert panel_exprs == [alert.replace('{server!=""}', '{server!="", namespace=~"$namespace"}')]


@pytest.mark.parametrize("name", BOARD_IDS, ids=BOARD_IDS)
def test_dashboards_name_only_exported_metrics(name: str) -> None:
    shown = set().union(*(metric_names(expr) for _, expr in dashboard_targets(BOARDS[name])))
    assert shown <= CTXFIT_METRICS | ENGINE_METRICS, sorted(shown - CTXFIT_METRICS - ENGINE_METRICS)


def test_exported_metric_names_match_the_operator() -> None:
    from ctxfit.controller.telemetry.metrics import Metrics

    registry = Metrics().registry
    exported = {sample for family in registry.collect()
                for sample in ([f"{family.name}_total"] if family.type == "counter" else
                               [f"{family.name}_{s}" for s in ("bucket", "count", "sum")]
                               if family.type == "histogram" else [family.name])}
    assert exported == CTXFIT_METRICS


def _configmap_dashboards(values: dict[str, Any]) -> dict[str, Any]:
    objs = render((), {"dashboards.enabled": True, **values})
    return {key: json.loads(text) for o in objs if o["kind"] == "ConfigMap" for key, text in o["data"].items()}


def test_configmaps_carry_the_dashboards_unchanged() -> None:
    assert _configmap_dashboards({}) == {p.name: json.loads(p.read_text()) for p in DASHBOARDS.glob("*.json")}
