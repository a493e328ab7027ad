"""Shared helpers for the chart, alert and dashboard tests: helm/promtool lookup and chart rendering.

helm is built alone by `bash hack/k8s-bins.sh helm` (about a minute cold; a no-op when cached; it prints its
directory on the last line, `CTXFIT_K8S_BIN_DIR` overrides); promtool from Debian's `prometheus` package. A
missing tool fails the test with the command that installs it: these tests never skip. The tests that call
them carry the ``tools`` marker (``make test-unit`` leaves them out, ``make test-tools`` runs them).
"""

from __future__ import annotations

import functools
import json
import os
import re
import shutil
import subprocess
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import pytest
import yaml

REPO = Path(__file__).resolve().parents[3]
CHART = REPO / "charts" / "ctxfit"
ALL_ON = CHART / "ci" / "all-on-values.yaml"
DASHBOARDS = CHART / "dashboards"
RELEASE = "ctxfit"
NAMESPACE = "ctxfit-system"


@functools.cache
def bin_dir() -> Path:
    """The harness' binary dir, with helm in it (only helm is built here, not the control plane)."""
    override = os.environ.get("CTXFIT_K8S_BIN_DIR")
    if override:
        return Path(override)
    proc = subprocess.run(["bash", str(REPO / "hack" / "k8s-bins.sh"), "helm"], capture_output=True, text=True,
                          cwd=REPO, check=False)
    lines = proc.stdout.strip().splitlines()
    if proc.returncode != 0 or not lines:
        pytest.fail(f"bash hack/k8s-bins.sh failed ({proc.returncode}): {proc.stderr[-2000:]}")
    return Path(lines[-1])


def helm() -> str:
    path = bin_dir() / "helm"
    if not path.is_file():
        pytest.fail(f"helm not found at {path}: run `bash hack/k8s-bins.sh helm`")
    return str(path)


def promtool() -> str:
    path = shutil.which("promtool")
    if path is None:
        pytest.fail("promtool not found: `apt-get install prometheus` (Debian) provides it")
    return path


def run(cmd: list[str], *, cwd: Path | None = None, check: bool = True) -> subprocess.CompletedProcess[str]:
    proc = subprocess.run(cmd, capture_output=True, text=True, cwd=cwd, check=False)
    if check and proc.returncode != 0:
        pytest.fail(f"`{' '.join(cmd)}` exited {proc.returncode}\nstdout:\n{proc.stdout[-4000:]}\n"
                    f"stderr:\n{proc.stderr[-4000:]}")
    return proc


def template_args(values_files: Iterable[Path] = (), set_values: Mapping[str, Any] | None = None,
                  *, release: str = RELEASE, namespace: str = NAMESPACE) -> list[str]:
    args = [helm(), "template", release, str(CHART), "--namespace", namespace]
    for path in values_files:
        args += ["--values", str(path)]
    for key, value in (set_values or {}).items():
        args += ["--set-json", f"{key}={json.dumps(value)}"]
    return args


@functools.cache
def _render_text(values_files: tuple[Path, ...], set_items: tuple[tuple[str, str], ...]) -> str:
    set_values = {k: json.loads(v) for k, v in set_items}
    return run(template_args(values_files, set_values)).stdout


def render_text(values_files: Iterable[Path] = (), set_values: Mapping[str, Any] | None = None) -> str:
    """`helm template` output (cached per values)."""
    items = tuple(sorted((k, json.dumps(v)) for k, v in (set_values or {}).items()))
    return _render_text(tuple(values_files), items)


def render(values_files: Iterable[Path] = (), set_values: Mapping[str, Any] | None = None) -> list[dict[str, Any]]:
    """The rendered objects (fresh copies)."""
    return [doc for doc in yaml.safe_load_all(render_text(values_files, set_values)) if doc]


def render_fails(set_values: Mapping[str, Any]) -> str:
    """stderr of a `helm template` that must fail."""
    proc = run(template_args((), set_values), check=False)
    assert proc.returncode != 0, f"helm template accepted {set_values}"
    return proc.stderr


def objects(objs: list[dict[str, Any]], kind: str) -> list[dict[str, Any]]:
    return [o for o in objs if o["kind"] == kind]


def one(objs: list[dict[str, Any]], kind: str, name: str | None = None) -> dict[str, Any]:
    found = [o for o in objects(objs, kind) if name is None or o["metadata"]["name"] == name]
    assert len(found) == 1, f"expected one {kind} {name or ''}, got {[o['metadata']['name'] for o in found]}"
    return found[0]


def prometheus_rule_groups(values_files: Iterable[Path] = (), set_values: Mapping[str, Any] | None = None
                           ) -> list[dict[str, Any]]:
    """The `spec.groups` of the rendered PrometheusRule (prometheusRule.enabled forced on)."""
    merged = {"prometheusRule.enabled": True, **(set_values or {})}
    return one(render(values_files, merged), "PrometheusRule")["spec"]["groups"]


def alert_rules(groups: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    return {rule["alert"]: rule for group in groups for rule in group["rules"] if "alert" in rule}


def dashboards() -> dict[str, dict[str, Any]]:
    return {path.name: json.loads(path.read_text()) for path in sorted(DASHBOARDS.glob("*.json"))}


def dashboard_targets(dashboard: dict[str, Any]) -> list[tuple[str, str]]:
    """(panel title, expr) of every PromQL query: panels (rows included), annotations, variables."""
    out: list[tuple[str, str]] = []

    def walk(panels: list[dict[str, Any]]) -> None:
        for panel in panels:
            for target in panel.get("targets", []):
                if target.get("expr"):
                    out.append((panel.get("title", "?"), target["expr"]))
            walk(panel.get("panels", []))

    walk(dashboard.get("panels", []))
    for annotation in dashboard.get("annotations", {}).get("list", []):
        if annotation.get("expr"):
            out.append((f"annotation {annotation['name']}", annotation["expr"]))
    for variable in dashboard.get("templating", {}).get("list", []):
        query = variable.get("query")
        text = query.get("query") if isinstance(query, dict) else None
        if variable.get("type") == "query" and text:
            match = re.fullmatch(r"label_values\((.*),\s*\w+\)", text, re.S)
            if match:  # label_values(<series selector>, label): the selector is PromQL
                out.append((f"variable {variable['name']}", match.group(1)))
    return out


GRAFANA_VARIABLES = {
    "$__rate_interval": "5m", "$__interval": "1m", "$__range": "6h",
    "$namespace": "ns", "$server": "srv",
}


def grafana_to_promql(expr: str) -> str:
    """Replace Grafana's template variables by literals of the same type (durations, label values)."""
    for var, value in sorted(GRAFANA_VARIABLES.items(), key=lambda kv: -len(kv[0])):
        expr = expr.replace(var, value)
    assert "$" not in expr, f"unknown Grafana variable in {expr!r}"
    return expr


METRIC_NAME = re.compile(r"\b((?:vllm|sglang):[a-zA-Z_][a-zA-Z0-9_:]*|ctxfit_[a-zA-Z0-9_]+)")


def metric_names(expr: str) -> set[str]:
    """ctxfit_*, vllm:* and sglang:* metric names an expression reads (label names never match)."""
    return set(METRIC_NAME.findall(expr))
