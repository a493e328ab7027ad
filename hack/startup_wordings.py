#!/usr/bin/env python3
"""Regenerate tests/fixtures/startups/wordings.json: the start-up log lines each released engine version prints about
its memory budget, as the format strings in its source.

Read in the released wheels, unzipped under /work/wheels/<pkg>-<version>/ (``pip download vllm==X --no-deps``, then
unzip only the .py files), never imported: every ``logger.<level>(...)`` / ``logger.<level>_once(...)`` call (and
``rank_print``, an ``...Error(...)`` raised, a message assigned to a name or returned by a ``__repr__`` before it is
logged) whose message holds
one of ``MARKERS``, in the files of ``FILES``, its message rebuilt from the source (adjacent string
literals joined; an f-string's ``{expression:spec}`` kept as ``{spec}`` placeholders, ``%``-style messages kept as
they are). One entry per distinct message: its style (``f`` or ``%``), the file it is in and the versions that
print it. tests/unit/engines/test_startup_wordings.py renders every entry with sample values and checks that
``ctxfit.engines.<engine>.startup.parse_startup`` reads what the line states.

Usage: python3 hack/startup_wordings.py [--wheels /work/wheels] [--check]
"""

from __future__ import annotations

import argparse
import ast
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "tests" / "fixtures" / "startups" / "wordings.json"
MARKERS = {
    "vllm": ("Available KV cache memory", "KV cache size:", "Maximum concurrency for", "Model loading took",
             "Loading model weights took", "torch peak memory increase", "Actual usage is",
             "Graph capturing finished", "CUDA graph pool memory", "Using max model len", "reserved for KV Cache",
             " blocks: ", "can be stored in KV cache"),
    "sglang": ("is allocated", "#tokens:", "SWAKVPool", "Post-capture KV sizing", "Load weight end",
               " end. Time elapsed", "max_total_num_tokens=", "graph end"),
}
FILES = {
    # where the start-up ledger lives (other hits, e.g. benchmarks and stubs, are not the server's start-up)
    "vllm": ("vllm/v1/worker", "vllm/v1/core/kv_cache_utils.py", "vllm/utils/mem_utils.py", "vllm/utils.py",
             "vllm/utils/__init__.py", "vllm/config",
             "vllm/config.py", "vllm/worker", "vllm/executor", "vllm/engine/llm_engine.py"),
    "sglang": ("sglang/srt/mem_cache", "sglang/srt/model_executor", "sglang/srt/managers/scheduler.py"),
}
LOG_CALLS = {"info", "info_once", "warning", "warning_once", "debug", "debug_once"}


def _key(version: str) -> tuple[int, ...]:
    return tuple(int(p) for p in version.split(".") if p.isdigit())


def _text(node: ast.expr) -> tuple[str, str, str] | None:
    """(style, template, format) of a log message expression; None when it is not built from literals. ``template``
    is the message as written (an f-string's ``{expression:spec}`` kept); ``format`` is the same message as a
    ``str.format`` string with positional fields (``{0:.2f}``) for an f-string, the ``%`` message itself otherwise."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return "%", node.value, node.value
    if isinstance(node, ast.JoinedStr):
        parts: list[str] = []
        fields: list[str] = []
        count = 0
        for value in node.values:
            if isinstance(value, ast.Constant):
                text = str(value.value).replace("{", "{{").replace("}", "}}")
                parts.append(text)
                fields.append(text)
            elif isinstance(value, ast.FormattedValue):
                spec = ""
                if isinstance(value.format_spec, ast.JoinedStr):
                    spec = "".join(str(v.value) for v in value.format_spec.values if isinstance(v, ast.Constant))
                parts.append("{" + ast.unparse(value.value).replace("{", "(").replace("}", ")")
                             + (":" + spec if spec else "") + "}")
                fields.append("{" + str(count) + (":" + spec if spec else "") + "}")
                count += 1
        return "f", "".join(parts), "".join(fields)
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
        left, right = _text(node.left), _text(node.right)
        if left and right and left[0] == right[0] == "%":
            return "%", left[1] + right[1], left[2] + right[2]
    return None


def messages(path: Path, markers: tuple[str, ...]) -> list[tuple[str, str, str, list[str]]]:
    """(style, template, format, %-arguments) of every log call in ``path`` whose message holds a marker."""
    try:
        source = path.read_text(encoding="utf-8")
        if not any(m in source for m in markers):
            return []
        tree = ast.parse(source)
    except (SyntaxError, UnicodeDecodeError):
        return []
    found = []
    for node in ast.walk(tree):
        if (isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name)) or (
                isinstance(node, ast.Return) and node.value is not None):
            # a message built into a variable first, then logged or raised (V0 worker.py's ledger), or returned by a
            # __repr__ that is logged (mem_utils.py MemoryProfilingResult)
            assert node.value is not None
            text = _text(node.value)
            if text and any(m in text[1] for m in markers):
                found.append((*text, []))
            continue
        if not (isinstance(node, ast.Call) and node.args):
            continue
        name = node.func.attr if isinstance(node.func, ast.Attribute) else (
            node.func.id if isinstance(node.func, ast.Name) else "")
        if name not in LOG_CALLS and name != "rank_print" and not name.endswith(("Error", "Exception")):
            continue
        text = _text(node.args[0])
        if text and any(m in text[1] for m in markers):
            found.append((*text, [ast.unparse(a) for a in node.args[1:]] if text[0] == "%" else []))
    return found


def collect(wheels: Path) -> dict[str, list[dict[str, object]]]:
    """Per engine, the distinct messages with the versions and files that print them."""
    out: dict[str, list[dict[str, object]]] = {}
    for engine, markers in MARKERS.items():
        seen: dict[tuple[str, str], dict[str, object]] = {}
        dirs = sorted((d for d in wheels.glob(f"{engine}-*") if d.is_dir()),
                      key=lambda d: _key(d.name.split("-", 1)[1]))
        for wheel in dirs:
            version = wheel.name.split("-", 1)[1]
            for sub in FILES[engine]:
                base = wheel / sub
                for path in sorted([base] if base.is_file() else base.rglob("*.py")):
                    for style, template, form, arguments in messages(path, markers):
                        entry = seen.setdefault((style, template), {"style": style, "template": template,
                                                                    "format": form, "args": arguments, "files": [],
                                                                    "versions": []})
                        rel = str(path.relative_to(wheel))
                        if rel not in entry["files"]:  # type: ignore[operator]
                            entry["files"].append(rel)  # type: ignore[union-attr]
                        if version not in entry["versions"]:  # type: ignore[operator]
                            entry["versions"].append(version)  # type: ignore[union-attr]
        out[engine] = list(seen.values())
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--wheels", type=Path, default=Path("/work/wheels"))
    parser.add_argument("--check", action="store_true", help="exit 1 when the checked-in file differs")
    args = parser.parse_args()
    text = json.dumps(collect(args.wheels), indent=1, ensure_ascii=False) + "\n"
    if args.check:
        same = OUT.exists() and OUT.read_text(encoding="utf-8") == text
        print("up to date" if same else f"{OUT} differs from the wheels")
        return 0 if same else 1
    OUT.write_text(text, encoding="utf-8")
    print(f"wrote {OUT}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
