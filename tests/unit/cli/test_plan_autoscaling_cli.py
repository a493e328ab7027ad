"""``ctxfit plan`` shows the autoscaling thresholds of a server with ``spec.autoscaling``.

The numbers are the operator's (``ctxfit.budget.autoscale.server_thresholds`` on the plan) and the rendered
ScaledObject carries the same ones.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from ctxfit.api import InferenceServer
from ctxfit.api.autoscaling import AutoscalingStatus
from ctxfit.budget.autoscale import server_thresholds
from ctxfit.budget.context import DEFAULT_HEADROOM
from ctxfit.budget.multinode import plan_group

ROOT = Path(__file__).resolve().parents[3]
MANIFEST = "manifests/llama31-8b-autoscaling.yaml"


def run_cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "ctxfit.cli", *args], capture_output=True, text=True, cwd=ROOT,
                          timeout=60)


def _expected() -> tuple[float, int, int]:
    server = InferenceServer.model_validate(yaml.safe_load((ROOT / MANIFEST).read_text()))
    result, _ = plan_group(server.spec)
    found = server_thresholds(server.spec, kv_pool_bytes=result.kv_pool_bytes,
                              kv_bytes_per_token=result.kv_bytes_per_token, context_length=result.context_length,
                              max_num_seqs=result.effective.max_num_seqs, headroom=DEFAULT_HEADROOM)
    return found.kv_usage_fraction, found.kv_usage_tokens, found.queue


def test_table_shows_the_rule() -> None:
    out = run_cli("plan", "-f", MANIFEST)
    assert out.returncode == 0, out.stderr
    kv, _, queue = _expected()
    line = next(x for x in out.stdout.splitlines() if x.startswith("autoscaling: "))
    assert f"scale out at {kv:.0%} KV = " in line
    assert f"or > {queue} waiting requests per replica; 1..4 replicas; cold start ~33 s loading weights" in line
    assert "one more 32,768-token request no longer fits above" in line


@pytest.mark.parametrize("fmt", ["json", "yaml"])
def test_machine_output(fmt: str) -> None:
    out = run_cli("plan", "-f", MANIFEST, "-o", fmt)
    assert out.returncode == 0, out.stderr
    doc = json.loads(out.stdout) if fmt == "json" else yaml.safe_load(out.stdout)
    scaling = doc["autoscaling"]
    kv, tokens, queue = _expected()
    assert (scaling["kvCacheUsageThreshold"], scaling["kvCacheTokensThreshold"], scaling["queueThreshold"]) == \
        (kv, tokens, queue)
    assert (scaling["minReplicas"], scaling["maxReplicas"], scaling["capacitySource"]) == (1, 4, "planned")
    assert scaling["kvCacheUsageThreshold"] < scaling["kvCacheFullFraction"] < 1
    assert scaling["kvCacheTokensThreshold"] < scaling["kvCacheFullTokens"] < scaling["kvCacheTokens"]
    assert scaling["coldStartSeconds"] == 33 and scaling["scaledObject"] == "llama31-8b-autoscaled"
    assert scaling["warnings"] == [] and scaling["rule"].startswith("scale out at")


PLAN_ONLY_KEYS = {"kvCacheFullFraction", "kvCacheFullTokens", "warnings"}
"""The documented extras of ``-o json``'s ``autoscaling`` (``cli.plan.plan_autoscaling``)."""


def _status_keys() -> set[str]:
    return {field.alias or name for name, field in AutoscalingStatus.model_fields.items()}


@pytest.mark.parametrize("fits", [True, False], ids=["fits", "does-not-fit"])
def test_json_keys_are_status_autoscaling_names(tmp_path: Path, fits: bool) -> None:
    body = yaml.safe_load((ROOT / MANIFEST).read_text())
    if not fits:
        body["spec"]["model"]["weightsPerGPU"] = "200Gi"
    path = tmp_path / "server.yaml"
    path.write_text(yaml.safe_dump(body))
    out = run_cli("plan", "-f", str(path), "-o", "json")
    assert out.returncode == (0 if fits else 3), out.stderr
    scaling = json.loads(out.stdout)["autoscaling"]
    assert set(scaling) <= _status_keys() | PLAN_ONLY_KEYS, set(scaling) - _status_keys() - PLAN_ONLY_KEYS
    assert (scaling["minReplicas"], scaling["maxReplicas"]) == (1, 4)
    if not fits:
        assert "kvCacheUsageThreshold" not in scaling and scaling["warnings"] == ["no thresholds: nothing fits"]


def test_no_autoscaling_key_without_spec_autoscaling() -> None:
    doc = json.loads(run_cli("plan", "-f", "manifests/llama31-8b-h100.yaml", "-o", "json").stdout)
    assert "autoscaling" not in doc
    assert not [x for x in run_cli("plan", "-f", "manifests/llama31-8b-h100.yaml").stdout.splitlines()
                if x.startswith("autoscaling:")]


def test_override_warning_is_shown(tmp_path: Path) -> None:
    body = yaml.safe_load((ROOT / MANIFEST).read_text())
    body["spec"]["autoscaling"]["kvCacheUsageTarget"] = 0.99
    path = tmp_path / "server.yaml"
    path.write_text(yaml.safe_dump(body))
    out = run_cli("plan", "-f", str(path))
    assert out.returncode == 0, out.stderr
    assert "scale out at 99% KV" in out.stdout and "(planned; kvCacheUsageTarget)" in out.stdout
    assert "- autoscaling: autoscaling.kvCacheUsageTarget 0.99: KEDA adds a replica only above" in out.stdout
    doc = json.loads(run_cli("plan", "-f", str(path), "-o", "json").stdout)
    assert doc["autoscaling"]["kvCacheUsageThreshold"] == 0.99 and doc["autoscaling"]["warnings"]


def test_invalid_autoscaling_is_one_line_exit_2(tmp_path: Path) -> None:
    body = yaml.safe_load((ROOT / MANIFEST).read_text())
    body["spec"]["autoscaling"]["minReplicas"] = 0
    path = tmp_path / "server.yaml"
    path.write_text(yaml.safe_dump(body))
    out = run_cli("plan", "-f", str(path))
    assert out.returncode == 2
    assert "scaleToZero" in out.stderr and len(out.stderr.strip().splitlines()) == 1


def test_readme_shows_the_real_rule() -> None:
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    shown = readme.split(f"$ ctxfit plan -f {MANIFEST}\n", 1)[1].split("```", 1)[0]
    shown_line = next(x for x in shown.splitlines() if x.startswith("autoscaling: "))
    out = run_cli("plan", "-f", MANIFEST)
    assert shown_line in out.stdout.splitlines()
