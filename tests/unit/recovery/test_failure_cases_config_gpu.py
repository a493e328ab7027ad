"""Real reports (tests/fixtures/failures-config-gpu.yaml): a bare configuration check, a GPU
whose compute capability cannot run the model, the FP8 type the GPU does have, a download cut in the Xet path.

Each case runs through the library (classify -> decide), through ``ctxfit diagnose -o json`` and through the
operator's policy (``reconcile.diagnose`` -> ``stepping.record_failure``), with the harnesses of the handed cases
(recovery/casekit.py, controller/converge/diagnosiskit.py).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml
from ctxfit.vocab.kinds import DOWNLOAD_KINDS, PERMANENT_KINDS, FailureKind

from tests.unit.controller.converge.diagnosiskit import check_through_the_operator_policy
from tests.unit.recovery.casekit import check_cli_json, check_engine_unknown, check_library

FIXTURE = Path(__file__).resolve().parents[2] / "fixtures" / "failures-config-gpu.yaml"
CASES: list[dict[str, Any]] = yaml.safe_load(FIXTURE.read_text(encoding="utf-8"))
IDS = [c["id"] for c in CASES]


def test_fixture_cites_public_reports_of_every_class() -> None:
    assert len(set(IDS)) == len(IDS)
    kinds = {c["expect"]["failure"] for c in CASES}
    assert {"InvalidParallelism", "UnsupportedGPU", "KVCacheDtypeUnsupported", "DownloadInterrupted"} <= kinds
    for case in CASES:
        assert case["source"].startswith(("https://github.com/vllm-project/", "https://github.com/sgl-project/"))
        assert case.get("note"), case["id"]
        kind = FailureKind(case["expect"]["failure"])
        assert bool(case["expect"].get("permanent")) == (kind in PERMANENT_KINDS and kind not in DOWNLOAD_KINDS)
    engines = {c["server"]["engine"]["kind"] for c in CASES if c["expect"]["failure"] == "UnsupportedGPU"}
    assert engines == {"vllm", "sglang"}


@pytest.mark.parametrize("case", CASES, ids=IDS)
def test_case_library(case: dict[str, Any]) -> None:
    check_library(case)


@pytest.mark.parametrize("case", CASES, ids=IDS)
def test_case_engine_unknown(case: dict[str, Any]) -> None:
    check_engine_unknown(case)


@pytest.mark.parametrize("case", CASES, ids=IDS)
def test_case_cli_json(case: dict[str, Any], tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    check_cli_json(case, tmp_path, capsys)


@pytest.mark.parametrize("case", CASES, ids=IDS)
def test_case_through_the_operator_policy(case: dict[str, Any]) -> None:
    check_through_the_operator_policy(case)
