"""Code, tests, their docstrings and docs/design/*.md cite no issue of this project ("issue 28", "(issue 9, item 4)"):
the number means nothing to a newcomer. State the reason, or cite docs/design/*.md. An upstream project's issue is a
source and stays, named by its project right before it on the same line ("vLLM issue 1284", "SGLang issues 4205
and 6033"); a continuation line repeats the project's name.

Every module of operator/ctxfit/controller has a module docstring of a few lines (at most ``MAX_MODULE_DOC_LINES``):
what the module is for and what a newcomer looks for there; the reasoning and figures live in docs/design/*.md.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

SELF = Path(__file__).resolve()
REPO = SELF.parents[2]
SCANNED = (REPO / "operator", REPO / "tests")
SUFFIXES = {".py", ".yaml", ".yml"}
DESIGN_DOCS = REPO / "docs" / "design"
"""Scanned too (``*.md``): the design notes say what a thing is, not which issue asked for it."""
ISSUE = re.compile(r"\bissues?\s+#?\d+", re.IGNORECASE)
UPSTREAM = re.compile(r"\b(?:vllm|sglang|flashinfer|xet-core)\b", re.IGNORECASE)
"""The upstream projects whose issues operator/, tests/ and docs/design cite."""
CONTROLLER = REPO / "operator" / "ctxfit" / "controller"
MAX_MODULE_DOC_LINES = 6
"""Lines of a controller module's docstring (``ast.get_docstring``); the longer story goes to docs/design/*.md."""
WINDOW = 40
"""How many characters before "issue" may hold the project's name ("vLLM's Ray executor, issues 1160")."""


def own_issue_references(text: str) -> list[tuple[int, str]]:
    """``(line number, reference)`` of every issue reference in ``text`` not named as an upstream project's."""
    found: list[tuple[int, str]] = []
    for number, line in enumerate(text.splitlines(), start=1):
        for match in ISSUE.finditer(line):
            if not UPSTREAM.search(line[max(0, match.start() - WINDOW):match.start()]):
                found.append((number, match.group()))
    return found


def _files() -> list[Path]:
    return [
        path
        for top in SCANNED
        for path in sorted(top.rglob("*"))
        if path.is_file() and path.suffix in SUFFIXES and "__pycache__" not in path.parts and path != SELF
    ] + sorted(DESIGN_DOCS.glob("*.md"))


def test_design_docs_are_scanned() -> None:
    design = set(DESIGN_DOCS.glob("*.md"))
    assert design and design <= set(_files())


def test_no_issue_of_this_project_is_cited() -> None:
    bad = [
        f"{path.relative_to(REPO)}:{number}: {reference!r}"
        for path in _files()
        for number, reference in own_issue_references(path.read_text(encoding="utf-8", errors="replace"))
    ]
    assert not bad, (
        "state the reason (or cite docs/design/*.md) instead of this project's issue; an upstream issue is "
        "named by its project right before it (vLLM issue N):\n" + "\n".join(bad)
    )


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("bounded in bytes (issue 28).", [(1, "issue 28")]),
        ("first line\nIssue 9, item 6: the rule", [(2, "Issue 9")]),
        ("see issues 2 and 3", [(1, "issues 2")]),
        ("vLLM 0.10 config/model.py, a long way before the end of the line (issue 28)", [(1, "issue 28")]),
        ("'below 7.0 are not supported.' (vLLM issue 1284)", []),
        ("vLLM's Ray executor, issues 1160, 2669, 15102", []),
        ("SGLang issues 4205 and 6033; flashinfer issue #5290; vllm-project/vllm issue #5635", []),
        ("no reference here, only tissue 3 and issues", []),
        ("# The inference gateway (issue 26)\n\nBefore issue 28 the operator", [(1, "issue 26"), (3, "issue 28")]),
    ],
)
def test_own_issue_references(text: str, expected: list[tuple[int, str]]) -> None:
    assert own_issue_references(text) == expected


def module_doc_problem(source: str) -> str | None:
    """Why the module ``source`` breaks the docstring rule (none, or over ``MAX_MODULE_DOC_LINES`` lines), else None."""
    doc = ast.get_docstring(ast.parse(source))
    if not doc:
        return "no module docstring"
    lines = len(doc.splitlines())
    if lines > MAX_MODULE_DOC_LINES:
        return f"module docstring of {lines} lines (at most {MAX_MODULE_DOC_LINES})"
    return None


def test_controller_module_docstrings_are_short() -> None:
    modules = sorted(p for p in CONTROLLER.rglob("*.py") if "__pycache__" not in p.parts)
    assert modules
    bad = [
        f"{path.relative_to(REPO)}: {problem}"
        for path in modules
        if (problem := module_doc_problem(path.read_text(encoding="utf-8"))) is not None
    ]
    assert not bad, (
        "a controller module's docstring says in a few lines what the module is for and links "
        "docs/design/*.md for the reasoning and figures (move the rest there, under a heading naming the module):\n"
        + "\n".join(bad)
    )


@pytest.mark.parametrize(
    ("source", "expected"),
    [
        ('"""One line."""\n', None),
        ('"""' + "\n".join(f"line {n}" for n in range(6)) + '\n"""\nX = 1\n', None),
        ('"""' + "\n".join(f"line {n}" for n in range(7)) + '\n"""\nX = 1\n',
         "module docstring of 7 lines (at most 6)"),
        ("X = 1\n", "no module docstring"),
    ],
    ids=["one", "six", "seven", "none"],
)
def test_module_doc_problem(source: str, expected: str | None) -> None:
    assert module_doc_problem(source) == expected


def test_package_docstring_answers_where_things_happen() -> None:
    """A newcomer's three questions (where a failed pod becomes a step-down, where status is written, where a new
    child object goes) are answered in the controller's package docstring, by files that exist."""
    package = CONTROLLER
    doc = ast.get_docstring(ast.parse((package / "__init__.py").read_text(encoding="utf-8"))) or ""
    for question, needle in (("step-down", "converge/attempts.py"), ("status is written", "reconcile/write.py"),
                             ("new child object", "converge/desired.py")):
        sentence = next((s for s in " ".join(doc.split()).split(". ") if question in s.lower()), "")
        assert needle in sentence, f"the package docstring does not say where {question!r} happens ({needle})"
        assert (package / needle).is_file(), needle
