"""Every real case in tests/fixtures/failures.yaml (real cases reported by users): kind, numbers, next config.

Each case runs twice: through the library (classify -> fallback current -> decide) and through
``ctxfit diagnose -o json`` (which uses the planner's initial configuration when it can plan).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.unit.recovery.casekit import CASES, IDS, check_cli_json, check_engine_unknown, check_library


@pytest.mark.parametrize("case", CASES, ids=IDS)
def test_case_library(case: dict[str, Any]) -> None:
    check_library(case)


@pytest.mark.parametrize("case", CASES, ids=IDS)
def test_case_engine_unknown(case: dict[str, Any]) -> None:
    """The same texts are recognized without knowing the engine."""
    check_engine_unknown(case)


@pytest.mark.parametrize("case", CASES, ids=IDS)
def test_case_cli_json(case: dict[str, Any], tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    check_cli_json(case, tmp_path, capsys)


def test_fixture_is_the_shared_data() -> None:
    """The repo copy keeps every case id (the tests never read ../shared)."""
    assert len(CASES) >= 13
    assert len(set(IDS)) == len(IDS)
    for case in CASES:
        assert {"id", "server", "observed", "expect"} <= set(case)
