"""The meaning of an API error answer is read in one place (``kube/answers.py``): no other controller module
compares an ``ApiException``'s ``status`` with a literal code."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest
from ctxfit.controller.kube.answers import (
    conflict,
    invalid,
    not_found,
    object_gone,
    resource_missing,
    server_error,
    succeeded,
)
from kubernetes.client.exceptions import ApiException

from tests.unit.controller.fakekube import NO_OBJECT, NO_RESOURCE, api_error

CONTROLLER = Path(__file__).resolve().parents[4] / "operator" / "ctxfit" / "controller"


def literal_status_checks(source: str) -> list[str]:
    """``x.status == 404``, ``x.status in (404, 409)``, ``x.status != 409`` ... in ``source``."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if not isinstance(node, ast.Compare):
            continue
        sides = [node.left, *node.comparators]
        if not any(isinstance(s, ast.Attribute) and s.attr == "status" for s in sides):
            continue
        literals = [c for s in sides for c in ast.walk(s)
                    if isinstance(c, ast.Constant) and isinstance(c.value, int) and 100 <= c.value <= 599]
        if literals:
            found.append(ast.unparse(node))
    return found


@pytest.mark.parametrize("path", sorted(p for p in CONTROLLER.rglob("*.py") if p.name != "answers.py"),
                         ids=lambda p: str(p.relative_to(CONTROLLER)))
def test_no_module_reads_status_codes_itself(path: Path) -> None:
    assert literal_status_checks(path.read_text(encoding="utf-8")) == [], path


def test_the_guard_sees_each_shape() -> None:
    assert literal_status_checks("if exc.status == 404: pass") == ["exc.status == 404"]
    assert literal_status_checks("ok = e.status in (404, 409)") == ["e.status in (404, 409)"]
    assert literal_status_checks("ok = 200 <= response.status <= 299") == ["200 <= response.status <= 299"]
    assert literal_status_checks("ok = exc.status not in REJECTED") == []
    assert literal_status_checks("ok = st.phase == 1") == []


def test_answers() -> None:
    gone, missing = api_error(404, NO_OBJECT), api_error(404, NO_RESOURCE)
    taken, bad = api_error(409, {"reason": "Conflict"}), api_error(422, {"reason": "Invalid"})
    assert not_found(gone) and not_found(missing) and not not_found(taken)
    assert object_gone(gone) and not object_gone(missing) and not object_gone(taken)
    assert resource_missing(missing) and not resource_missing(gone) and not resource_missing(bad)
    assert conflict(taken) and not conflict(gone) and not conflict(bad)
    assert invalid(bad) and not invalid(taken)
    assert server_error(api_error(503, {})) and server_error(ApiException(reason="connection refused"))
    assert not server_error(taken) and not server_error(gone)
    assert succeeded(200) and succeeded(201) and not succeeded(404) and not succeeded(302)
