#!/usr/bin/env python3
"""Regenerate operator/ctxfit/engines/registry.json: which architectures each released engine version serves.

Read in the released wheels, unzipped under /work/wheels/<pkg>-<version>/ (``pip download vllm==X --no-deps``, then
unzip only the .py files; see the team notes), never imported:

- vLLM: the keys of ``_VLLM_MODELS`` in ``vllm/model_executor/models/registry.py`` (text generation, multimodal,
  embedding, reward/classification, speculative and Transformers-backend entries), and
  ``_PREVIOUSLY_SUPPORTED_MODELS`` (architecture -> the last version that served it);
- SGLang: the class names of every ``EntryClass`` in ``sglang/srt/models/*.py`` (what
  ``sglang/srt/models/registry.py`` ``import_model_classes`` registers).

Usage: python3 hack/engine_registry.py [--wheels /work/wheels] [--check]
"""

from __future__ import annotations

import argparse
import ast
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "operator" / "ctxfit" / "engines" / "registry.json"


def _key(version: str) -> tuple[int, ...]:
    return tuple(int(p) for p in version.split("."))


def vllm_architectures(path: Path) -> tuple[set[str], dict[str, str]]:
    """(served architectures, previously supported -> last version) of one registry.py."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    dicts: dict[str, ast.Dict] = {}
    for node in tree.body:
        target = node.targets[0] if isinstance(node, ast.Assign) and len(node.targets) == 1 else (
            node.target if isinstance(node, ast.AnnAssign) else None)
        if isinstance(target, ast.Name) and isinstance(node.value, ast.Dict):
            dicts[target.id] = node.value

    def keys(name: str, seen: frozenset[str] = frozenset()) -> set[str]:
        out: set[str] = set()
        for key, value in zip(dicts[name].keys, dicts[name].values, strict=True):
            if key is None and isinstance(value, ast.Name) and value.id in dicts and value.id not in seen:
                out |= keys(value.id, seen | {name})  # **_TEXT_GENERATION_MODELS
            elif isinstance(key, ast.Constant) and isinstance(key.value, str):
                out.add(key.value)
        return out

    previously = {}
    if "_PREVIOUSLY_SUPPORTED_MODELS" in dicts:
        previously = {k.value: v.value for k, v in zip(dicts["_PREVIOUSLY_SUPPORTED_MODELS"].keys,
                                                        dicts["_PREVIOUSLY_SUPPORTED_MODELS"].values, strict=True)
                      if isinstance(k, ast.Constant) and isinstance(v, ast.Constant)}
    return keys("_VLLM_MODELS"), previously


def sglang_architectures(models: Path) -> set[str]:
    """Class names of every ``EntryClass`` in ``srt/models``."""
    out: set[str] = set()
    for path in sorted(models.glob("*.py")):
        try:
            tree = ast.parse(path.read_text(encoding="utf-8"))
        except SyntaxError:
            continue
        for node in tree.body:
            if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "EntryClass"
                                                    for t in node.targets):
                out |= {n.id for n in ast.walk(node.value) if isinstance(n, ast.Name)}
    return out


def spans(present: list[bool], versions: list[str]) -> str:
    """``0.8.0-0.10.2,0.12.0-0.33.0`` over the ordered versions."""
    out, start = [], None
    for i, here in enumerate([*present, False]):
        if here and start is None:
            start = i
        elif not here and start is not None:
            out.append(versions[start] if start == i - 1 else f"{versions[start]}-{versions[i - 1]}")
            start = None
    return ",".join(out)


def build(wheels: Path) -> dict:
    table: dict = {}
    for engine in ("vllm", "sglang"):
        served: dict[str, set[str]] = {}
        removed: dict[str, str] = {}
        for d in sorted(wheels.glob(f"{engine}-*"), key=lambda p: _key(p.name.split("-", 1)[1])):
            version = d.name.split("-", 1)[1]
            if engine == "vllm":
                reg = d / "vllm" / "model_executor" / "models" / "registry.py"
                if reg.is_file():
                    served[version], prev = vllm_architectures(reg)
                    removed |= prev
            else:
                models = d / "sglang" / "srt" / "models"
                if models.is_dir():
                    served[version] = sglang_architectures(models)
        versions = list(served)
        archs = sorted(set().union(*served.values())) if served else []
        table[engine] = {"versions": versions,
                         "architectures": {a: spans([a in served[v] for v in versions], versions) for a in archs}}
        if removed:
            table[engine]["previouslySupported"] = dict(sorted(removed.items()))
    return table


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--wheels", type=Path, default=Path("/work/wheels"))
    parser.add_argument("--check", action="store_true", help="compare with the checked-in table, write nothing")
    args = parser.parse_args()
    table = {"source": "hack/engine_registry.py over the released wheels (vLLM registry.py _VLLM_MODELS; SGLang "
                       "srt/models EntryClass)"} | build(args.wheels)
    text = json.dumps(table, indent=1, sort_keys=False) + "\n"
    if args.check:
        same = OUT.is_file() and json.loads(OUT.read_text(encoding="utf-8")) == table
        print("registry.json is up to date" if same else "registry.json differs from the wheels")
        return 0 if same else 1
    OUT.write_text(text, encoding="utf-8")
    print(f"wrote {OUT.relative_to(ROOT)}: " + ", ".join(
        f"{e} {len(table[e]['versions'])} versions, {len(table[e]['architectures'])} architectures"
        for e in ("vllm", "sglang")))
    return 0


if __name__ == "__main__":
    sys.exit(main())
