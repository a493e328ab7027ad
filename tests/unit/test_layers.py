"""The pure core touches the kubernetes package only for quantities (``kubernetes.utils``).

import-linter (``make lint``) holds the internal layers and forbids kopf; this test holds the finer rule
that import-linter cannot express for an external package's subpackages.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[2] / "operator" / "ctxfit"
CORE = ["api", "catalog", "budget", "engines", "recovery", "render"]


def core_files() -> list[Path]:
    return sorted(p for layer in CORE for p in (PACKAGE / layer).rglob("*.py"))


def imported_modules(path: Path) -> list[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    names: list[str] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.extend(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.append(node.module)
    return names


@pytest.mark.parametrize("path", core_files(), ids=lambda p: str(p.relative_to(PACKAGE)))
def test_core_imports_only_kubernetes_utils(path: Path) -> None:
    for name in imported_modules(path):
        if name == "kubernetes" or name.startswith("kubernetes."):
            assert name.startswith("kubernetes.utils"), f"{path.name} imports {name}"
        assert not (name == "kopf" or name.startswith("kopf.")), f"{path.name} imports {name}"
        assert not name.startswith("huggingface_hub"), f"{path.name} fetches from a hub: that I/O is the CLI's"


def type_checking_imports(source: str) -> list[str]:
    """Modules imported under ``if TYPE_CHECKING:`` in ``source`` (the way an import cycle hides from Python)."""
    found: list[str] = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            for inner in node.body:
                if isinstance(inner, ast.ImportFrom):
                    found.append("." * inner.level + (inner.module or ""))
                elif isinstance(inner, ast.Import):
                    found.extend(alias.name for alias in inner.names)
    return found


@pytest.mark.parametrize("path", sorted((PACKAGE / "controller").rglob("*.py")),
                         ids=lambda p: str(p.relative_to(PACKAGE)))
def test_controller_has_no_type_checking_imports(path: Path) -> None:
    # the controller's modules import each other at run time or not at all: an import needed only for a type
    # hint is a cycle the package layout should not have (views/pod_wait.py holds what needs PodView)
    assert type_checking_imports(path.read_text(encoding="utf-8")) == [], path


def test_type_checking_guard_sees_a_hidden_import() -> None:
    source = "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from .pods import PodView\n"
    assert type_checking_imports(source) == [".pods"]
    assert type_checking_imports("import typing\nif typing.TYPE_CHECKING:\n    import a.b\n") == ["a.b"]
    assert type_checking_imports("from .pods import PodView\n") == []
