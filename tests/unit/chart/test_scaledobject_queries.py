"""The ScaledObject's trigger queries, evaluated by Prometheus' own engine (``promtool test rules``).

Synthetic engine series as the chart's PodMonitor labels them (``namespace``, ``server``, ``pod``; vLLM's
``engine`` index): vLLM with only the newer KV metric (>= 0.12), only the older one (<= 0.9.1), both (0.9.2 to
0.10, where they carry the same value), a rollout mixing versions, two data-parallel engines per pod, SGLang;
other servers' series must not count. The KV query sums replicas (each counts up to 1) and the waiting query
sums queues, as the HPA's ``AverageValue`` rule expects.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml
from ctxfit.api import EngineKind
from ctxfit.render.scaledobject import kv_usage_query, waiting_query

from tests.unit.chart.chartkit import promtool, run

NS, NAME = "inference", "llm"


def _series(metric: str, pod: str, value: float, *, server: str = NAME, engine: str | None = None) -> dict[str, str]:
    labels = {"namespace": NS, "server": server, "pod": pod, "job": "engines"}
    if engine is not None:
        labels["engine"] = engine
    text = ",".join(f'{k}="{v}"' for k, v in labels.items())
    return {"series": f"{metric}{{{text}}}", "values": f"{value}x5"}


NEW, OLD = "vllm:kv_cache_usage_perc", "vllm:gpu_cache_usage_perc"
WAITING = "vllm:num_requests_waiting"
OTHER = [_series(NEW, "other-0", 0.99, server="other", engine="0"), _series(WAITING, "other-0", 50, server="other",
                                                                             engine="0")]

CASES: dict[str, tuple[EngineKind, int, list[dict[str, str]], float, float]] = {
    # name: (engine, data parallel, series, expected KV query, expected waiting query)
    "vllm-new-name": (EngineKind.VLLM, 1, [
        _series(NEW, "a", 0.5, engine="0"), _series(NEW, "b", 0.75, engine="0"),
        _series(WAITING, "a", 2, engine="0"), _series(WAITING, "b", 3, engine="0")], 1.25, 5),
    "vllm-old-name": (EngineKind.VLLM, 1, [
        _series(OLD, "a", 0.5, engine="0"), _series(OLD, "b", 0.25, engine="0"),
        _series(WAITING, "a", 0, engine="0"), _series(WAITING, "b", 7, engine="0")], 0.75, 7),
    "vllm-both-names": (EngineKind.VLLM, 1, [
        _series(NEW, "a", 0.6, engine="0"), _series(OLD, "a", 0.6, engine="0"),
        _series(NEW, "b", 0.2, engine="0"), _series(OLD, "b", 0.2, engine="0"),
        _series(WAITING, "a", 1, engine="0"), _series(WAITING, "b", 1, engine="0")], 0.8, 2),
    "vllm-mixed-rollout": (EngineKind.VLLM, 1, [
        _series(NEW, "a", 0.9, engine="0"), _series(OLD, "b", 0.3, engine="0"),
        _series(WAITING, "a", 4, engine="0"), _series(WAITING, "b", 0, engine="0")], 1.2, 4),
    "vllm-dp2": (EngineKind.VLLM, 2, [
        _series(NEW, "a", 0.75, engine="0"), _series(NEW, "a", 0.25, engine="1"),
        _series(WAITING, "a", 3, engine="0"), _series(WAITING, "a", 1, engine="1")], 0.5, 4),
    "sglang": (EngineKind.SGLANG, 1, [
        _series("sglang:token_usage", "a", 0.3), _series("sglang:token_usage", "b", 0.9),
        _series("sglang:num_queue_reqs", "a", 6), _series("sglang:num_queue_reqs", "b", 2)], 1.2, 8),
}


def _expr_test(query: str, value: float) -> dict[str, Any]:
    return {"expr": query, "eval_time": "2m", "exp_samples": [{"labels": "{}", "value": value}]}


@pytest.mark.parametrize("case", list(CASES), ids=list(CASES))
def test_queries_evaluated_by_prometheus(tmp_path: Path, case: str) -> None:
    engine, dp, series, kv, waiting = CASES[case]
    test = {"rule_files": [], "evaluation_interval": "1m", "tests": [{
        "interval": "1m",
        "input_series": [*series, *OTHER],
        "promql_expr_test": [_expr_test(kv_usage_query(engine, NS, NAME, dp), kv),
                             _expr_test(waiting_query(engine, NS, NAME), waiting)],
    }]}
    (tmp_path / "test.yaml").write_text(yaml.safe_dump(test, sort_keys=False))
    proc = run([promtool(), "test", "rules", "test.yaml"], cwd=tmp_path, check=False)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_no_series_is_an_empty_result(tmp_path: Path) -> None:
    """Zero replicas export nothing: the query is empty (KEDA's ignoreNullValues default reads it as 0)."""
    test = {"rule_files": [], "evaluation_interval": "1m", "tests": [{
        "interval": "1m", "input_series": OTHER,
        "promql_expr_test": [{"expr": kv_usage_query(EngineKind.VLLM, NS, NAME), "eval_time": "2m",
                              "exp_samples": []}],
    }]}
    (tmp_path / "test.yaml").write_text(yaml.safe_dump(test, sort_keys=False))
    proc = run([promtool(), "test", "rules", "test.yaml"], cwd=tmp_path, check=False)
    assert proc.returncode == 0, proc.stdout + proc.stderr
