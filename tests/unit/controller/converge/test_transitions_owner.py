"""One module of the pure pass owns every phase and condition transition: ``converge/status.py``.

Checked with ``ast`` over ``operator/ctxfit/controller/converge/*.py``: no other module assigns (or deletes)
``.phase``, ``.conditions`` or ``.message`` (the phase's words, which move with it: ``mark_phase``), mutates
``.conditions`` in place, or calls ``InferenceServerStatus.set_condition``; they call status.py's ``mark_*``
and its ``set_condition(out, ...)`` (an Event only when the condition changed). See docs/design/status.md.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[4]
CONVERGE = ROOT / "operator" / "ctxfit" / "controller" / "converge"
OWNER = CONVERGE / "status.py"
ALLOWED: dict[str, str] = {}
"""Module name -> why it may write a transition itself. Empty: attempts.py records attempt outcomes
(``status.attempts``), which are neither a phase nor a condition, and is not matched by the rules below."""
OWNED = frozenset({"phase", "conditions", "message"})
"""Status attributes only status.py assigns."""
MUTATORS = frozenset({"append", "extend", "insert", "remove", "pop", "clear", "sort", "reverse"})


def _owned_targets(target: ast.expr) -> list[ast.expr]:
    """The parts of an assignment target that write an owned attribute (``x.phase``, ``x.conditions[0]``)."""
    if isinstance(target, ast.Tuple | ast.List):
        return [t for elt in target.elts for t in _owned_targets(elt)]
    if isinstance(target, ast.Starred):
        return _owned_targets(target.value)
    if isinstance(target, ast.Attribute) and target.attr in OWNED:
        return [target]
    if isinstance(target, ast.Subscript) and isinstance(target.value, ast.Attribute) \
            and target.value.attr == "conditions":
        return [target]
    return []


def transitions(source: str, filename: str = "<source>") -> list[str]:
    """Every phase or condition transition ``source`` writes itself, as ``line: code``."""
    tree = ast.parse(source, filename=filename)
    found: list[ast.AST] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Assign | ast.Delete):
            found += [t for target in node.targets for t in _owned_targets(target)]
        elif isinstance(node, ast.AugAssign | ast.AnnAssign):
            found += _owned_targets(node.target)
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
            func = node.func
            setter = func.attr == "set_condition"  # InferenceServerStatus.set_condition; the bare name is status.py's
            on_conditions = isinstance(func.value, ast.Attribute) and func.value.attr == "conditions"
            mutates = func.attr in MUTATORS and on_conditions
            if setter or mutates:
                found.append(node)
    return sorted({f"{n.lineno}: {ast.unparse(n)}" for n in found if isinstance(n, ast.expr)})


def _modules() -> list[Path]:
    return sorted(p for p in CONVERGE.rglob("*.py") if p != OWNER and p.stem not in ALLOWED)


def test_the_scan_sees_the_pass() -> None:
    names = {p.name for p in _modules()}
    assert OWNER.exists() and {"refusals.py", "resolution.py", "routing.py", "attempts.py"} <= names


@pytest.mark.parametrize("path", _modules(), ids=lambda p: p.name)
def test_only_status_py_writes_phases_and_conditions(path: Path) -> None:
    offenders = transitions(path.read_text(encoding="utf-8"), str(path))
    assert not offenders, (
        f"{path.relative_to(ROOT)} writes phase/condition transitions itself: {offenders}; add a named function "
        "to converge/status.py and call it"
    )


@pytest.mark.parametrize(
    "source",
    [
        "def f(out):\n    out.status.phase = Phase.STARTING\n",
        "def f(status):\n    status.phase, x = Phase.READY, 1\n",
        "def f(st):\n    st.message = 'held'\n",
        "def f(st):\n    st.conditions = []\n",
        "def f(st):\n    st.conditions[0] = c\n",
        "def f(st):\n    st.conditions.append(c)\n",
        "def f(st):\n    del st.conditions\n",
        "def f(out):\n    out.status.set_condition(ConditionType.READY, 'False', r, m, now=n, generation=g)\n",
        "def f(status):\n    changed = status.set_condition(kind, 'True', r, m, now=n)\n",
    ],
    ids=["phase", "phase-tuple", "message", "conditions", "conditions-item", "conditions-append", "conditions-del",
         "set-condition", "set-condition-bound"],
)
def test_the_scan_finds_a_planted_transition(source: str) -> None:
    assert transitions(source)


@pytest.mark.parametrize(
    "source",
    [
        "from .status import set_condition\n\ndef f(out):\n    set_condition(out, k, 'True', r, m, now, g)\n",
        "def f(out):\n    mark_phase(out, Phase.STARTING, r, m, now, g)\n",
        "def f(out):\n    if out.status.phase is Phase.READY:\n        return out.status.condition(k).message\n",
        "def f(out):\n    out.status.endpoint = None\n    out.events.append(note)\n",
    ],
    ids=["status-py-set-condition", "mark-phase", "reads", "other-fields"],
)
def test_the_scan_lets_calls_and_reads_through(source: str) -> None:
    assert not transitions(source)
