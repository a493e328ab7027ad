"""``ctxfit calibrate`` refuses a start-up log written by another engine version than the manifest names (its
sample would be filed under the manifest's calibration key); the version is read from vLLM's own lines in their
real wordings (tests/fixtures/calibrate: vLLM 0.4.2 from https://github.com/vllm-project/vllm/issues/5104,
0.19.0 from the llm-d planner sweep)."""

from __future__ import annotations

from pathlib import Path

import pytest
from ctxfit.api import EngineKind
from ctxfit.cli import main
from ctxfit.engines.startup import logged_version

FIX = Path(__file__).resolve().parents[2] / "fixtures" / "calibrate"


@pytest.mark.parametrize(("line", "version"), [
    # https://github.com/vllm-project/vllm/issues/5104 (0.4.2)
    ("INFO 05-29 10:26:04 llm_engine.py:100] Initializing an LLM engine (v0.4.2) with config: model='x'", (0, 4)),
    # https://github.com/vllm-project/vllm/pull/15960 (0.7.4 dev build, V1)
    ("INFO 04-07 06:05:43 [core.py:54] Initializing a V1 LLM engine (v0.7.4.dev713+gb4961126) with config: m", (0, 7)),
    # https://github.com/gpustack/gpustack/issues/2259 (0.8.5.post1)
    ("INFO 06-19 11:30:25 [api_server.py:1043] vLLM API server version 0.8.5.post1", (0, 8)),
    # the 0.19 banner (tests/fixtures/calibrate/vllm019-llama31-8b-h100-tp1.log)
    ("[entrypoints/utils.py:299]  \u2584\u2584 \u2584\u2588 \u2588     \u2588     \u2588 "
     "\u2580\u2584\u2580 \u2588  version 0.19.0", (0, 19)),
    ("INFO CUDA Version: 12.8, torch version 2.5.1", None),
    ("", None),
])
def test_logged_version(line: str, version: tuple[int, int] | None) -> None:
    assert logged_version(EngineKind.VLLM, line) == version
    assert logged_version(EngineKind.SGLANG, line) is None


def test_calibrate_refuses_a_log_of_another_version(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    save = tmp_path / "table.yaml"
    code = main(["calibrate", "-f", str(FIX / "llama31-8b-h100.yaml"), "--log",
                 str(FIX / "vllm042-opt125m-issue5104.log"), "--save", str(save)])
    err = capsys.readouterr().err
    assert code == 2 and not save.exists()
    assert err.count("\n") == 1 and "--log" in err and "0.4" in err and "spec.engine.version" in err


def test_calibrate_same_version_still_works(capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["calibrate", "-f", str(FIX / "llama31-8b-h100.yaml"), "--log",
                 str(FIX / "vllm019-llama31-8b-h100-tp1.log"), "-o", "json"])
    assert code == 0 and '"errorBytes"' in capsys.readouterr().out


def test_calibrate_unreadable_log_names_the_flag(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["calibrate", "-f", str(FIX / "llama31-8b-h100.yaml"), "--log", str(tmp_path / "missing.log")])
    err = capsys.readouterr().err
    assert code == 2 and err.startswith("ctxfit: error: --log: cannot read") and err.count("\n") == 1


def test_a_hand_edited_table_keeps_only_the_newest_samples() -> None:
    from ctxfit.budget.calibrate import KEEP_SAMPLES, CalibrationTable, correction

    old = [{"id": f"old{i}", "residualBytes": 2 * 1024**3} for i in range(100)]
    new = [{"id": f"new{i}", "residualBytes": -1024**3} for i in range(KEEP_SAMPLES)]
    table = CalibrationTable.from_wire({"entries": [{"engine": "vllm", "version": "0.19", "gpu": "G", "tp": 1,
                                                     "pp": 1, "count": 120, "samples": old + new}]})
    (entry,) = table.entries.values()
    assert [s.sample_id for s in entry.samples] == [s["id"] for s in new] and entry.count == 120
    assert correction(s.residual_bytes for s in entry.samples) < 0
