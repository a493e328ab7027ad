"""README's text and its parts: a section under a heading, the shell commands in its fenced blocks, and the
"On a real cluster" install steps, shared by the README tests (unit and e2e)."""

from __future__ import annotations

import re
import shlex

from tests.unit.chart.chartkit import REPO

README = (REPO / "README.md").read_text()


def section(text: str, heading: str) -> str:
    """The text under ``heading`` up to the next heading of the same or a higher level."""
    level = heading.split(" ", 1)[0]
    start = text.index(f"\n{heading}\n") + len(heading) + 2
    ends = [m.start() for m in re.finditer(rf"\n#{{1,{len(level)}}} ", text[start:])]
    return text[start:start + ends[0]] if ends else text[start:]


def commands(text: str, program: str) -> list[list[str]]:
    """Shell commands starting with ``program`` in the fenced blocks of ``text`` (continuations joined)."""
    found = []
    for block in re.findall(r"```(?:bash|console)\n(.*?)```", text, re.S):
        for line in block.replace("\\\n", " ").splitlines():
            line = line.strip().removeprefix("$ ")
            if line.startswith(program + " "):
                found.append(shlex.split(line.split(" #", 1)[0]))
    return found


INSTALL = section(README, "### On a real cluster")
