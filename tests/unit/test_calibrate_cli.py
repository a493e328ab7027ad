"""``ctxfit calibrate`` on a real start-up log (tests/fixtures/calibrate, from the handed cases) and
``ctxfit plan --calibration`` with the table it saves."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from ctxfit.cli import main

FIX = Path(__file__).resolve().parents[1] / "fixtures" / "calibrate"
SERVER = str(FIX / "llama31-8b-h100.yaml")
LOG = str(FIX / "vllm019-llama31-8b-h100-tp1.log")


def test_json_keys_and_values(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["calibrate", "-f", SERVER, "--log", LOG, "-o", "json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert {"observed", "predicted", "errorBytes", "calibration"} <= set(doc)
    obs = doc["observed"]
    assert {"kvCacheBytes", "kvCacheTokens", "maxConcurrency", "servedContextLength", "weightsBytes",
            "loadSeconds"} <= set(obs)
    assert obs["kvCacheTokens"] == 476016 and obs["servedContextLength"] == 8192 and obs["maxConcurrency"] == 58.11
    assert doc["errorBytes"] == obs["kvCacheBytes"] - doc["predicted"]["kvCacheBytes"]
    assert abs(doc["errorBytes"]) < 0.25 * (1 << 30), "the planner is fit on this sweep"
    assert doc["calibration"]["key"] == "vllm/0.19/NVIDIA-H100-80GB-HBM3/tp1/pp1"
    assert doc["calibration"]["entry"]["count"] == 1


def test_save_then_plan_with_the_table(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    table = tmp_path / "cal.yaml"
    assert main(["calibrate", "-f", SERVER, "--log", LOG, "--save", str(table)]) == 0
    assert main(["calibrate", "-f", SERVER, "--log", LOG, "--calibration", str(table), "--save", str(table)]) == 0
    saved = yaml.safe_load(table.read_text())
    assert saved["entries"][0]["count"] == 1, "the same log is the same sample"
    capsys.readouterr()
    assert main(["plan", "-f", SERVER, "--calibration", str(table), "-o", "json"]) == 0
    plan = json.loads(capsys.readouterr().out)
    assert plan["reasons"][0].startswith("calibrated from 1 start-up of vLLM 0.19 on NVIDIA-H100-80GB-HBM3")
    assert plan["calibration"]["kvCacheOffsetBytes"] == saved["entries"][0]["correctionBytes"]
    configmap = tmp_path / "cm.yaml"
    configmap.write_text(yaml.safe_dump({"kind": "ConfigMap", "data": {"calibration.yaml": table.read_text()}}))
    assert main(["plan", "-f", SERVER, "--calibration", str(configmap), "-o", "json"]) == 0
    assert json.loads(capsys.readouterr().out)["calibration"] == plan["calibration"]


def test_unknown_log_is_not_observed(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    log = tmp_path / "other.log"
    log.write_text("hello\nworld\n")
    assert main(["calibrate", "-f", SERVER, "--log", str(log), "-o", "json"]) == 1
    out = capsys.readouterr()
    doc = json.loads(out.out)
    assert doc["observed"]["kvCacheBytes"] is None and doc["errorBytes"] is None and doc["calibration"] is None
    assert "not observed" in out.err


def test_invalid_inputs_exit_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text("- a\n- b\n")
    assert main(["calibrate", "-f", SERVER, "--log", LOG, "--calibration", str(bad)]) == 2
    assert main(["calibrate", "-f", SERVER, "--log", str(tmp_path / "missing.log")]) == 2
    assert main(["plan", "-f", SERVER, "--calibration", str(bad)]) == 2
    assert capsys.readouterr().err.count("ctxfit: error:") == 3
