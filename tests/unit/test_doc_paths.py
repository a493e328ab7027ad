"""Every test, bench or hack script a document names (``tests/unit/controller/test_x.py``, ``bench/y.py``) is a file
in this repository (the reviewer found docs/design naming tests and benches that had moved or never existed)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
DOCS = sorted([REPO / "README.md", *(REPO / "docs").rglob("*.md"), *(REPO / "bench").glob("*.md")])
PATH = re.compile(r"(?<![\w./-])((?:tests|bench|hack)/[\w./-]*\.py)\b")


@pytest.mark.parametrize("doc", DOCS, ids=[str(d.relative_to(REPO)) for d in DOCS])
def test_named_scripts_exist(doc: Path) -> None:
    missing = sorted({p for p in PATH.findall(doc.read_text()) if not (REPO / p).exists()})
    assert not missing, f"{doc.relative_to(REPO)} names files that do not exist: {missing}"
