"""Tests mirror the packages; no test module imports another.

Names that several test modules share (data, builders, fakes, helpers) live in a non-test module next to
them (``builders.py``, ``fakeapi.py``, ``kit.py``...) or, for pytest fixtures, in ``conftest.py``. A test
module importing another runs the other's module body, couples their collection, and hides where a shared
builder lives. Checked with ``ast``: every ``import``/``from ... import`` of a test module, absolute or
relative, names included (``from tests.unit.x import test_y``).
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
TESTS = ROOT / "tests"


def module_name(path: Path, root: Path) -> str:
    """Dotted module name of ``path`` relative to ``root`` (``tests/unit/a.py`` -> ``tests.unit.a``)."""
    parts = list(path.relative_to(root).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def is_test_module(dotted: str) -> bool:
    return dotted.rsplit(".", 1)[-1].startswith("test_")


def imported_test_modules(path: Path, root: Path) -> list[str]:
    """Every test module ``path`` imports, as ``line: dotted.name``; relative imports resolved against ``root``."""
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    package = module_name(path, root).rsplit(".", 1)[0] if path.name != "__init__.py" else module_name(path, root)
    found: list[str] = []
    for node in ast.walk(tree):
        targets: list[str] = []
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")
                anchor = anchor[: len(anchor) - (node.level - 1)] if node.level > 1 else anchor
                base = ".".join([*anchor, base]) if base else ".".join(anchor)
            targets = [base, *(f"{base}.{alias.name}" for alias in node.names)]
        for target in targets:
            if target.startswith("tests.") and any(is_test_module(p) for p in target.split(".")):
                found.append(f"{node.lineno}: {target}")
                break
    return found


def _test_modules() -> list[Path]:
    return sorted(TESTS.rglob("*.py"))


@pytest.mark.parametrize("path", _test_modules(), ids=lambda p: str(p.relative_to(TESTS)))
def test_no_test_module_imports_another(path: Path) -> None:
    offenders = imported_test_modules(path, ROOT)
    assert not offenders, (
        f"{path.relative_to(ROOT)} imports test modules {offenders}: move the shared names to a builders.py "
        "(or conftest.py for fixtures) next to them"
    )


@pytest.mark.parametrize(
    "source",
    [
        "from tests.unit.controller.test_reconcile import RTX\n",
        "from .test_plan_cli import ROOT\n",
        "from ..test_plan_cli import ROOT\n",
        "from tests.unit.recovery import test_failure_cases as cases\n",
        "import tests.unit.chart.test_readme_install\n",
        "from . import test_engine_flags\n",
        "def f():\n    from tests.e2e.test_chart_e2e import (\n        CHART,\n        helm,\n    )\n",
    ],
    ids=["absolute", "relative", "parent-relative", "module-from-package", "plain-import", "dot-import",
         "nested-multiline"],
)
def test_guard_catches_a_test_importing_a_test(tmp_path: Path, source: str) -> None:
    bad = tmp_path / "tests" / "unit" / "cli" / "sub" / "test_bad.py"
    bad.parent.mkdir(parents=True)
    bad.write_text(source, encoding="utf-8")
    assert imported_test_modules(bad, tmp_path), source


@pytest.mark.parametrize(
    "source",
    [
        "from tests.unit.controller.builders import RTX\n",
        "from .builders import ROOT\n",
        "from tests.unit.controller.kube import fakeapi\n",
        "import pytest\nfrom ctxfit.api import testing\n",
        "from tests.e2e.conftest import CHART\n",
    ],
    ids=["builders", "relative-builders", "helper-module", "outside-tests", "conftest"],
)
def test_guard_passes_shared_modules(tmp_path: Path, source: str) -> None:
    ok = tmp_path / "tests" / "unit" / "cli" / "test_ok.py"
    ok.parent.mkdir(parents=True)
    ok.write_text(source, encoding="utf-8")
    assert imported_test_modules(ok, tmp_path) == []
