"""Every test, bench or hack script a document names (``tests/unit/controller/test_x.py``, ``bench/y.py``) is a file
in this repository (the reviewer found docs/design naming tests and benches that had moved or never existed), and so
is every controller module it names by a short path (``converge/refusals.py``, ``controller/kube/client.py``)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
DOCS = sorted([REPO / "README.md", *(REPO / "docs").rglob("*.md"), *(REPO / "bench").glob("*.md")])
PATH = re.compile(r"(?<![\w./-])((?:tests|bench|hack)/[\w./-]*\.py)\b")
MODULE = re.compile(r"(?<![\w./-])((?:operator/)?(?:ctxfit/)?"
                    r"(?:controller|converge|kube|views|app|runtime|reconcile|telemetry)/[\w./-]*\.py)\b")
"""A controller module (or a test under tests/unit/controller) named by the tail of its path."""
FILES = sorted(str(p.relative_to(REPO)) for top in ("operator", "tests") for p in (REPO / top).rglob("*.py"))


@pytest.mark.parametrize("doc", DOCS, ids=[str(d.relative_to(REPO)) for d in DOCS])
def test_named_scripts_exist(doc: Path) -> None:
    missing = sorted({p for p in PATH.findall(doc.read_text()) if not (REPO / p).exists()})
    assert not missing, f"{doc.relative_to(REPO)} names files that do not exist: {missing}"


@pytest.mark.parametrize("doc", DOCS, ids=[str(d.relative_to(REPO)) for d in DOCS])
def test_named_modules_exist(doc: Path) -> None:
    missing = sorted({p for p in MODULE.findall(doc.read_text())
                      if not any(f == p or f.endswith("/" + p) for f in FILES)})
    assert not missing, f"{doc.relative_to(REPO)} names controller modules that do not exist: {missing}"


def test_a_moved_module_is_caught() -> None:
    text = "set in `controller/converge.py`, read in `converge/refusals.py` and tests/unit/controller/kube/x.py"
    missing = [p for p in MODULE.findall(text) if not any(f.endswith("/" + p) for f in FILES)]
    assert missing == ["controller/converge.py"]
