"""The chart's alerts: promtool checks the rendered rules, promtool unit tests (tests/fixtures/promtool)
show each alert firing and staying quiet on synthetic series, thresholds come from values, every alert
carries runbook text, and the Grafana-managed rules match the Prometheus ones.
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.unit.chart.chartkit import (
    ALL_ON,
    REPO,
    alert_rules,
    one,
    prometheus_rule_groups,
    promtool,
    render,
    run,
)

FIXTURES = REPO / "tests" / "fixtures" / "promtool"
FIXTURE_FILES = sorted(p for p in FIXTURES.glob("*.yaml"))
ALERTS = {
    "CtxfitKVCacheHigh", "CtxfitKVCacheCritical", "CtxfitEnginePreempting", "CtxfitRequestsQueued",
    "CtxfitBelowTargetContext", "CtxfitSteppedDown", "CtxfitServerFailed", "CtxfitContextClamped",
    "CtxfitPredictionDrift", "CtxfitPoolContextBelowTarget",
}


def _write_rules(path: Path, groups: list[dict[str, Any]]) -> Path:
    path.write_text(yaml.safe_dump({"groups": groups}, sort_keys=False))
    return path


@pytest.mark.parametrize("values_files", [[], [ALL_ON]], ids=["default", "all-on"])
def test_promtool_check_rules(tmp_path: Path, values_files: list[Path]) -> None:
    rules = _write_rules(tmp_path / "rules.yaml", prometheus_rule_groups(values_files))
    out = run([promtool(), "check", "rules", str(rules)]).stdout
    assert f"SUCCESS: {len(ALERTS)} rules found" in out
    assert set(alert_rules(prometheus_rule_groups(values_files))) == ALERTS


@pytest.mark.parametrize("fixture", FIXTURE_FILES, ids=[p.stem for p in FIXTURE_FILES])
def test_promtool_unit_tests(tmp_path: Path, fixture: Path) -> None:
    groups = prometheus_rule_groups()
    for group in groups:  # the cases check `summary`; runbook and description are checked below
        for rule in group["rules"]:
            rule["annotations"] = {"summary": rule["annotations"]["summary"]}
    _write_rules(tmp_path / "rules.yaml", groups)
    shutil.copy(fixture, tmp_path / fixture.name)
    proc = run([promtool(), "test", "rules", fixture.name], cwd=tmp_path, check=False)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "SUCCESS" in proc.stdout


def test_every_alert_has_a_firing_and_a_quiet_case() -> None:
    firing: set[str] = set()
    quiet: set[str] = set()
    for fixture in FIXTURE_FILES:
        for case in yaml.safe_load(fixture.read_text())["tests"]:
            for check in case.get("alert_rule_test", []):
                (firing if check.get("exp_alerts") else quiet).add(check["alertname"])
    assert firing == ALERTS, f"alerts never shown firing: {ALERTS - firing}"
    assert quiet == ALERTS, f"alerts never shown quiet: {ALERTS - quiet}"


THRESHOLDS = {
    "kv-warning": ({"prometheusRule.kvCachePressure.warning": {"threshold": 0.8, "for": "20m", "severity": "page"}},
                   "CtxfitKVCacheHigh", "> 0.8", "20m", "page"),
    "kv-critical": ({"prometheusRule.kvCachePressure.critical": {"threshold": 0.99, "for": "2m",
                                                                 "severity": "critical"}},
                    "CtxfitKVCacheCritical", "> 0.99", "2m", "critical"),
    "preemptions": ({"prometheusRule.preemptions": {"threshold": 0.5, "window": "10m", "for": "30m",
                                                    "severity": "warning"}},
                    "CtxfitEnginePreempting", "[10m]))\n> 0.5", "30m", "warning"),
    "requests-waiting": ({"prometheusRule.requestsWaiting": {"threshold": 50, "for": "5m", "severity": "info"}},
                         "CtxfitRequestsQueued", "> 50", "5m", "info"),
    "below-target": ({"prometheusRule.belowTargetContext": {"for": "1h", "severity": "warning"}},
                     "CtxfitBelowTargetContext", "ctxfit_server_target_context_length_tokens", "1h", "warning"),
    "step-down-window": ({"prometheusRule.stepDown": {"window": "6h", "severity": "info"}},
                         "CtxfitSteppedDown", "offset 6h", None, "info"),
    "failed": ({"prometheusRule.failed": {"for": "10m", "severity": "page"}},
               "CtxfitServerFailed", 'phase="Failed"', "10m", "page"),
    "clamped": ({"prometheusRule.contextClamped": {"for": "3m", "severity": "page"}},
                "CtxfitContextClamped", "ctxfit_context_clamped", "3m", "page"),
    "pool-context": ({"prometheusRule.poolContext": {"for": "30m", "severity": "page"}},
                     "CtxfitPoolContextBelowTarget", "ctxfit_server_pool_target_context_length_tokens", "30m", "page"),
    "drift": ({"prometheusRule.predictionDrift": {"thresholdBytes": 536870912, "for": "1h", "severity": "warning"}},
              "CtxfitPredictionDrift", "> 536870912", "1h", "warning"),
}


@pytest.mark.parametrize("sets,alert,in_expr,for_,severity", list(THRESHOLDS.values()), ids=list(THRESHOLDS))
def test_thresholds_come_from_values(sets: dict[str, Any], alert: str, in_expr: str, for_: str | None,
                                     severity: str) -> None:
    rule = alert_rules(prometheus_rule_groups((), sets))[alert]
    assert in_expr in rule["expr"]
    assert rule.get("for") == for_
    assert rule["labels"]["severity"] == severity


DEFAULTS = {
    "CtxfitKVCacheHigh": ("> 0.9", "10m"), "CtxfitKVCacheCritical": ("> 0.97", "5m"),
    "CtxfitEnginePreempting": ("[5m]))\n> 0", "15m"), "CtxfitRequestsQueued": ("> 10", "10m"),
    "CtxfitBelowTargetContext": ("<", "15m"), "CtxfitSteppedDown": ("[1h]", None),
    "CtxfitServerFailed": ("== 1", "1m"), "CtxfitContextClamped": ("== 1", "1m"),
    "CtxfitPredictionDrift": ("abs(ctxfit_prediction_error_bytes)) > 1073741824", "5m"),
    "CtxfitPoolContextBelowTarget": ("max by (namespace, pool)", "10m"),
}


@pytest.mark.parametrize("alert", sorted(DEFAULTS), ids=sorted(DEFAULTS))
def test_default_thresholds(alert: str) -> None:
    rule = alert_rules(prometheus_rule_groups())[alert]
    in_expr, for_ = DEFAULTS[alert]
    assert in_expr in rule["expr"]
    assert rule.get("for") == for_


def test_kv_expression_prefers_the_new_vllm_name_and_covers_sglang() -> None:
    expr = alert_rules(prometheus_rule_groups())["CtxfitKVCacheHigh"]["expr"]
    new, old, sglang = (expr.index(m) for m in ("vllm:kv_cache_usage_perc", "vllm:gpu_cache_usage_perc",
                                                 "sglang:token_usage"))
    assert new < old < sglang and expr.count(" or ") == 2
    assert "max by (namespace, server)" in expr


@pytest.mark.parametrize("values_files", [[], [ALL_ON]], ids=["default", "all-on"])
def test_every_alert_has_summary_description_and_runbook(values_files: list[Path]) -> None:
    extra = yaml.safe_load(ALL_ON.read_text())["prometheusRule"]["additionalAlertLabels"] if values_files else {}
    for name, rule in alert_rules(prometheus_rule_groups(values_files)).items():
        annotations = rule["annotations"]
        assert {"summary", "description", "runbook"} <= set(annotations), name
        assert len(annotations["runbook"]) > 200 and "1)" in annotations["runbook"], name
        assert "kubectl" in annotations["runbook"] or "Ctxfit" in annotations["runbook"], name
        assert rule["labels"]["severity"], name
        assert extra.items() <= rule["labels"].items(), name
        if values_files:
            assert annotations["runbook_url"] == f"https://example.com/runbooks/ctxfit#{name.lower()}"
        else:
            assert "runbook_url" not in annotations


# ----------------------------------------------------------------------------- Grafana-managed alerts


def _grafana_groups(values_files: list[Path]) -> list[dict[str, Any]]:
    objs = render(values_files, {"grafanaAlerts.enabled": True})
    config_map = one(objs, "ConfigMap", next(o["metadata"]["name"] for o in objs
                                         if o["metadata"]["name"].endswith("-grafana-alerts")))
    assert config_map["metadata"]["labels"]["grafana_alert"] == "1"
    ((_, text),) = config_map["data"].items()
    provisioning = yaml.safe_load(text)
    assert provisioning["apiVersion"] == 1
    groups: list[dict[str, Any]] = provisioning["groups"]
    return groups


def test_grafana_alerts_are_off_by_default() -> None:
    assert not [o for o in render() if o["metadata"]["name"].endswith("-grafana-alerts")]


@pytest.mark.parametrize("values_files", [[], [ALL_ON]], ids=["default", "all-on"])
def test_grafana_alerts_match_the_prometheus_kv_alerts(values_files: list[Path]) -> None:
    values = yaml.safe_load(ALL_ON.read_text()) if values_files else {}
    prom = alert_rules(prometheus_rule_groups(values_files))
    (group,) = _grafana_groups(values_files)
    assert group["folder"] and group["interval"] and group["orgId"] >= 1
    rules = {rule["title"]: rule for rule in group["rules"]}
    assert set(rules) == {"CtxfitKVCacheHigh", "CtxfitKVCacheCritical"}
    for title, rule in rules.items():
        assert len(rule["uid"]) <= 40
        refs = {d["refId"]: d for d in rule["data"]}
        assert rule["condition"] in refs
        query, condition = refs["A"], refs[rule["condition"]]
        assert condition["datasourceUid"] == "__expr__"
        assert condition["model"]["type"] == "threshold" and condition["model"]["expression"] == "A"
        threshold = condition["model"]["conditions"][0]["evaluator"]
        expr, _, number = prom[title]["expr"].rpartition(">")
        assert query["model"]["expr"].strip() == expr.strip()  # the same PromQL as the Prometheus alert
        assert threshold == {"type": "gt", "params": [float(number)]}
        assert rule["for"] == prom[title]["for"]
        assert rule["labels"]["severity"] == prom[title]["labels"]["severity"]
        if values:
            assert query["datasourceUid"] == values["grafanaAlerts"]["datasourceUid"]
        assert {"summary", "description", "runbook"} <= set(rule["annotations"])
