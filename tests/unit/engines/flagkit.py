"""The engines' argument parsers as the fixture records them (tests/fixtures/engine-flags, ``hack/engine_flags.py``):
per version, every flag with what it takes, and an ``argparse`` parser rebuilt from it (no engine import, no CUDA)."""

from __future__ import annotations

import argparse
import json
from functools import cache
from pathlib import Path
from typing import Any

FIXTURE = Path(__file__).resolve().parents[2] / "fixtures" / "engine-flags"


@cache
def document(engine: str) -> dict[str, Any]:
    loaded: dict[str, Any] = json.loads((FIXTURE / f"{engine}.json").read_text())
    return loaded


@cache
def per_version(engine: str) -> dict[str, dict[str, dict[str, Any]]]:
    """``{version: {flag: entry}}`` (the fixture's runs expanded)."""
    doc = document(engine)
    versions: list[str] = doc["versions"]
    index = {v: i for i, v in enumerate(versions)}
    out: dict[str, dict[str, dict[str, Any]]] = {v: {} for v in versions}
    for name, spans in doc["flags"].items():
        for span in spans:
            entry = {k: v for k, v in span.items() if k not in ("from", "to")}
            for version in versions[index[span["from"]]:index[span["to"]] + 1]:
                out[version][name] = entry
    return out


def spellings(engine: str, version: str) -> set[str]:
    """Every option string of ``version``'s parser (aliases and ``--no-x`` of boolean flags included)."""
    out: set[str] = set()
    for name, entry in per_version(engine)[version].items():
        out.add(name)
        out.update(entry.get("aliases", []))
        if entry["kind"] == "bool":
            out.add("--no-" + name[2:])
    return out


class ParseError(Exception):
    """The rebuilt parser refused the arguments."""


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> Any:  # argparse would exit the test process
        raise ParseError(message)


def parser(engine: str, version: str) -> argparse.ArgumentParser:
    """``version``'s parser rebuilt from the fixture: option strings and what each takes (abbreviations off, so a
    rendered flag must be spelt exactly)."""
    built = _Parser(prog=engine, allow_abbrev=False, add_help=False)
    if engine == "vllm":
        built.add_argument("model_tag")
    for name, entry in per_version(engine)[version].items():
        names = [name, *entry.get("aliases", [])]
        kind = entry["kind"]
        dest = name.lstrip("-").replace("-", "_")
        choices = entry.get("choices")
        extra: dict[str, Any] = {"choices": [*choices, "None"]} if choices and kind in ("value", "optional") else {}
        if kind == "flag":
            built.add_argument(*names, dest=dest, action="store_true")
        elif kind == "bool":
            built.add_argument(*names, dest=dest, action=argparse.BooleanOptionalAction)
        elif kind == "multi":
            built.add_argument(*names, dest=dest, nargs="+")
        elif kind == "optional":
            built.add_argument(*names, dest=dest, nargs="?", **extra)
        else:
            built.add_argument(*names, dest=dest, **extra)
    return built


def parse(engine: str, version: str, args: list[str]) -> argparse.Namespace:
    """Parse rendered ``args`` (after the program) with ``version``'s rebuilt parser; raises ``ParseError``."""
    return parser(engine, version).parse_args(args)
