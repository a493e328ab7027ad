"""Fail when a module's first statement is not its docstring (``pre-commit``'s check-docstring-first, locally).

    python3 -m hack.docstring_first FILE...
"""

from __future__ import annotations

import ast
import sys
from pathlib import Path


def problems(paths: list[str]) -> list[str]:
    """``path: why`` for each file whose module docstring is missing or not the first statement."""
    found = []
    for name in paths:
        tree = ast.parse(Path(name).read_text(encoding="utf-8"))
        if not tree.body:
            continue
        first = tree.body[0]
        if not (isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant)
                and isinstance(first.value.value, str)):
            found.append(f"{name}: the module docstring must come first")
    return found


def main(argv: list[str]) -> int:
    found = problems(argv)
    for line in found:
        print(line, file=sys.stderr)
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
