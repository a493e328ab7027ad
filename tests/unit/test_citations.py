"""Every document cited in code, manifests, the chart, the CRD and docs is a file in this repository.

A citation is a token ending in ``.md`` (``docs/engine-memory.md A.2``, ``hack/README.md``) outside a URL;
it must resolve against the repository root or the citing file's directory. Sources outside the repository
are cited by public URL instead.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

SELF = Path(__file__).resolve()
REPO = SELF.parents[2]
SCANNED = ("operator", "charts", "manifests", "crds", "hack", "bench", "tests", "docs")
TOP_LEVEL = ("README.md", "Dockerfile", "Makefile", "pyproject.toml")
SUFFIXES = {".py", ".yaml", ".yml", ".json", ".tpl", ".txt", ".md", ".sh", ".toml", ".csv", ""}
URL = re.compile(r"https?://\S+")
CITATION = re.compile(r"(?<![\w./-])([\w][\w./-]*\.md)\b")
OUTSIDE = re.compile(r"\bshared/(?:cases|docs)\b")
"""The team's working folders outside the repository (their cases are copied into tests/fixtures)."""


def _files() -> list[Path]:
    found = [REPO / name for name in TOP_LEVEL if (REPO / name).exists()]
    for top in SCANNED:
        for path in sorted((REPO / top).rglob("*")):
            if path.is_file() and path.suffix in SUFFIXES and "__pycache__" not in path.parts and path != SELF:
                found.append(path)
    return found


def citations(text: str) -> list[str]:
    """The ``*.md`` names cited in ``text``, URLs removed first."""
    return CITATION.findall(URL.sub(" ", text))


def _resolves(name: str, citing: Path) -> bool:
    return (REPO / name).is_file() or (citing.parent / name).is_file()


def test_every_cited_document_is_in_the_repository() -> None:
    missing = [
        f"{path.relative_to(REPO)}: {name}"
        for path in _files()
        for name in sorted(set(citations(path.read_text(errors="replace"))))
        if not _resolves(name, path)
    ]
    assert not missing, "cite a public URL or a file in this repository:\n" + "\n".join(missing)


def test_no_citation_of_folders_outside_the_repository() -> None:
    outside = [str(p.relative_to(REPO)) for p in _files() if OUTSIDE.search(p.read_text(errors="replace"))]
    assert not outside, f"cite tests/fixtures or a public URL instead of the team's shared folders: {outside}"


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("(field-notes.md deployment 1: 25%)", ["field-notes.md"]),
        ("see docs/engine-memory.md A.2", ["docs/engine-memory.md"]),
        ("https://github.com/x/y/blob/main/README.md is a URL", []),
        ("`hack/README.md`, and notes.md.", ["hack/README.md", "notes.md"]),
    ],
    ids=["bare", "path", "url", "several"],
)
def test_citation_finder(text: str, expected: list[str]) -> None:
    assert citations(text) == expected


def test_a_citation_of_a_missing_file_is_caught(tmp_path: Path) -> None:
    citing = REPO / "operator" / "ctxfit" / "api" / "spec.py"
    assert not _resolves("field-notes.md", citing)
    assert _resolves("docs/field-reports.md", citing)
