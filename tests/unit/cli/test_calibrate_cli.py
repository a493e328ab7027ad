"""``ctxfit calibrate`` on a real start-up log (tests/fixtures/calibrate, from the handed cases) and
``ctxfit plan --calibration`` with the table it saves."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from ctxfit.cli import main

FIX = Path(__file__).resolve().parents[2] / "fixtures" / "calibrate"
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


BAD_TABLES = {
    "empty.yaml": b"",
    "manifest.yaml": (FIX / "llama31-8b-h100.yaml").read_bytes(),
    "scalar.yaml": b"just a string\n",
    "entries-int.yaml": b"entries: 5\n",
    "entries-junk.yaml": b"entries:\n- 1\n- foo\n",
    "configmap-junk.yaml": b"data: {x: '[1,2'}\n",
    "configmap-bad.yaml": b"data:\n  calibration.yaml: '[1,2'\n",
    "infinite.yaml": (b"entries:\n- {engine: vllm, version: '0.19', gpu: NVIDIA-H100-80GB-HBM3, tp: 1, pp: 1,\n"
                      b"   samples: [{id: a, residualBytes: 1e999}]}\n"),
    "binary.yaml": b"\xff\xfe\x00garbage",
    "invalid.yaml": b"entries: [1, 2\n",
}


@pytest.mark.parametrize("name", sorted(BAD_TABLES))
def test_plan_refuses_a_calibration_file_that_is_not_a_table(name: str, tmp_path: Path,
                                                              capsys: pytest.CaptureFixture[str]) -> None:
    """A named table that cannot be used is an error line naming the option, never a plan made without it."""
    path = tmp_path / name
    path.write_bytes(BAD_TABLES[name])
    assert main(["plan", "-f", SERVER, "--calibration", str(path)]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("ctxfit: error: --calibration: ") and "\n" not in err and "Error:" not in err, err


def test_plan_calibration_file_missing(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["plan", "-f", SERVER, "--calibration", str(tmp_path / "nope.yaml")]) == 2
    err = capsys.readouterr().err.strip()
    assert err == f"ctxfit: error: --calibration: cannot read {tmp_path / 'nope.yaml'}: No such file or directory"


def test_save_to_a_directory_or_a_missing_folder_is_an_error_line(tmp_path: Path,
                                                                  capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["calibrate", "-f", SERVER, "--log", LOG, "--save", str(tmp_path)]) == 2
    assert capsys.readouterr().err.strip() == f"ctxfit: error: --save: {tmp_path} is a directory"
    missing = tmp_path / "no" / "cal.yaml"
    assert main(["calibrate", "-f", SERVER, "--log", LOG, "--save", str(missing)]) == 2
    assert capsys.readouterr().err.strip() == \
        f"ctxfit: error: --save: cannot write {missing}: No such file or directory"


def test_save_keeps_a_file_that_is_not_a_table(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    precious = tmp_path / "server.yaml"
    precious.write_bytes((FIX / "llama31-8b-h100.yaml").read_bytes())
    assert main(["calibrate", "-f", SERVER, "--log", LOG, "--save", str(precious)]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith(f"ctxfit: error: --save: {precious} is not a calibration table"), err
    assert precious.read_bytes() == (FIX / "llama31-8b-h100.yaml").read_bytes(), "the user's file is kept"


@pytest.mark.parametrize(("content", "why"), [(None, "cannot read"), (b"\xff\x00", "is not UTF-8 text"),
                                              (b"{not json", "is not valid JSON"), (b"[1, 2]", "not a JSON object")])
def test_hf_config_errors_name_the_option(content: bytes | None, why: str, tmp_path: Path,
                                          capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "config.json"
    if content is not None:
        path.write_bytes(content)
    assert main(["plan", "-f", SERVER, "--hf-config", str(path)]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("ctxfit: error: --hf-config: ") and why in err and "Error" not in err, err


def test_readme_shows_the_real_calibrate_output() -> None:
    """README's ``ctxfit calibrate`` example is this command's output (its first lines, up to the ``...``)."""
    import subprocess
    import sys

    root = Path(__file__).resolve().parents[3]
    command = ("$ ctxfit calibrate -f tests/fixtures/calibrate/llama31-8b-h100.yaml "
               "--log tests/fixtures/calibrate/vllm019-llama31-8b-h100-tp1.log\n")
    shown = (root / "README.md").read_text(encoding="utf-8").split(command, 1)[1].split("  ...\n", 1)[0]
    out = subprocess.run([sys.executable, "-m", "ctxfit.cli", *command[2:].split()[1:]], cwd=root, text=True,
                         capture_output=True, env={"COLUMNS": "120", "PATH": "/usr/bin:/bin",
                                                   "PYTHONPATH": str(root / "operator")}, check=False)
    assert out.returncode == 0, out.stderr
    real = [line.rstrip() for line in out.stdout.strip().splitlines()]
    lines = [line.rstrip() for line in shown.strip().splitlines()]
    assert lines == real[:len(lines)] and len(lines) >= 15
