"""Regenerate tests/fixtures/engine-flags/{vllm,sglang}.json: every command-line flag of each released engine version.

Reads the argument parsers in the published wheels without importing them (no torch, no CUDA): the ``.py`` files
are parsed with ``ast`` and every ``add_argument`` call, and every dataclass field the engine turns into a flag, is
collected with what it takes (no value, one value, several values):

- vLLM: ``vllm/engine/arg_utils.py`` (``EngineArgs.add_cli_args``; from 0.9 the kwargs of most flags come from
  ``get_kwargs(SomeConfig)``, whose field type decides the action: ``bool`` -> ``--x/--no-x``
  (``argparse.BooleanOptionalAction``), ``list``/``tuple``/``set`` -> ``nargs="+"``, else one value),
  ``vllm/entrypoints/openai/cli_args.py`` (the frontend; from 0.10 one flag per ``FrontendArgs`` field) and
  ``vllm/entrypoints/cli/serve.py`` (``--config`` and the ``serve`` extras).
- SGLang: ``sglang/srt/server_args.py`` ``ServerArgs.add_cli_args`` (explicit calls up to 0.5.14; from 0.5.15
  ``A[T, "help"]`` / ``A[T, Arg(...)]`` annotated fields, ``srt/arg_groups/arg_utils.py``
  ``add_cli_args_from_dataclass``: ``bool`` -> ``store_true``, ``List[T]`` -> ``nargs="+"``; from 0.5.20 the fields
  live in ``srt/arg_groups/fields/*.py``) and ``srt/arg_groups/*.py``.

Usage: ``python hack/engine_flags.py [--wheels /work/wheels] [--out tests/fixtures/engine-flags] [--download]``.
A version whose sources are not under ``WHEELS/<pkg>-<version>/`` is fetched with ``pip download <pkg>==<version>
--no-deps`` (only with ``--download``) and only the needed ``.py`` files are unzipped.
"""

from __future__ import annotations

import argparse
import ast
import json
import subprocess
import sys
import zipfile
from pathlib import Path
from typing import Any

VLLM_VERSIONS = (
    "0.8.0", "0.8.1", "0.8.2", "0.8.3", "0.8.4", "0.8.5", "0.9.0", "0.9.2", "0.10.0", "0.10.1.1", "0.10.2", "0.11.0",
    "0.12.0", "0.13.0", "0.14.0", "0.15.0", "0.16.0", "0.17.0", "0.18.0", "0.19.0", "0.20.0", "0.21.0", "0.22.0",
    "0.23.0", "0.24.0", "0.25.0", "0.26.0", "0.27.0", "0.28.0", "0.29.0", "0.30.0", "0.31.0", "0.32.0", "0.33.0",
)
"""Every 0.8 patch release (the speculative flags changed there), the first release of every vLLM minor from 0.9 to
0.33, and 0.9.2 and 0.10.1.1 (flags changed in patches)."""
SGLANG_VERSIONS = (
    "0.4.0", "0.4.1", "0.4.2", "0.4.3", "0.4.4", "0.4.5", "0.4.6", "0.4.7", "0.4.8", "0.4.9", "0.4.10", "0.5.1",
    "0.5.2", "0.5.3", "0.5.4", "0.5.5", "0.5.6", "0.5.7", "0.5.8", "0.5.9", "0.5.10", "0.5.11", "0.5.12", "0.5.13",
    "0.5.14", "0.5.15", "0.5.16", "0.5.17", "0.5.18", "0.5.19", "0.5.20", "0.5.21", "0.5.22", "0.5.23",
)
"""Every SGLang minor/patch release from 0.4.0 to 0.5.23 (no 0.5.0 was published)."""

FLAG = "flag"
"""Takes no value (``store_true``/``store_false``/``store_const``/``count``)."""
BOOL = "bool"
"""``argparse.BooleanOptionalAction``: ``--x`` and ``--no-x``, no value."""
VALUE = "value"
"""One value."""
MULTI = "multi"
"""One or more values (``nargs="+"``/``"*"``/N)."""
OPTIONAL = "optional"
"""Zero or one value (``nargs="?"``)."""

_NO_VALUE_ACTIONS = {"store_true", "store_false", "store_const", "count", "help", "version"}


def _src(node: ast.AST | None) -> str:
    return ast.unparse(node) if node is not None else ""


ACTION_NARGS: dict[str, str] = {}
"""``nargs`` defaults of the custom ``argparse.Action`` classes in the sources read (``action_defaults``)."""


def action_defaults(tree: ast.Module) -> None:
    """Record the ``nargs`` default of every ``class X(argparse.Action)`` whose ``__init__`` sets one."""
    for node in ast.walk(tree):
        if not (isinstance(node, ast.ClassDef) and any("Action" in _src(b) for b in node.bases)):
            continue
        for item in node.body:
            if isinstance(item, ast.FunctionDef) and item.name == "__init__":
                args = item.args.args + item.args.kwonlyargs
                defaults = [None] * (len(item.args.args) - len(item.args.defaults)) + list(item.args.defaults)
                defaults += list(item.args.kw_defaults)
                for arg, default in zip(args, defaults, strict=True):
                    if arg.arg == "nargs" and isinstance(default, ast.Constant):
                        ACTION_NARGS[node.name] = str(default.value)


def _kind_of_call(keywords: dict[str, ast.AST]) -> str | None:  # noqa: C901 - one case per argparse form
    """The kind an explicit ``add_argument`` call sets through ``action``/``nargs`` (None: not decided)."""
    action = keywords.get("action")
    if action is not None and "nargs" not in keywords:
        custom = ACTION_NARGS.get(_src(action).split(".")[-1])
        if custom is not None:
            return {"0": FLAG, "?": OPTIONAL, "+": MULTI, "*": MULTI}.get(custom, VALUE)
    if action is not None:
        text = _src(action).strip("'\"")
        if text in _NO_VALUE_ACTIONS:
            return FLAG
        if text.endswith("BooleanOptionalAction"):
            return BOOL
        if text in ("store", "append", "extend"):
            pass
        elif "StoreTrue" in text or "store_true" in text.lower():
            return FLAG
    nargs = keywords.get("nargs")
    if nargs is not None:
        text = _src(nargs).strip("'\"")
        if text == "?":
            return OPTIONAL
        if text in ("+", "*") or text.isdigit() or "REMAINDER" in text:
            return MULTI
    if action is not None:
        text = _src(action).strip("'\"")
        if text in ("store", "append", "extend"):
            return VALUE
        return VALUE  # a custom Action class: assume it takes a value (the default nargs)
    return None


def _choices(keywords: dict[str, ast.AST]) -> list[str] | None:
    node = keywords.get("choices")
    if isinstance(node, ast.List | ast.Tuple | ast.Set) and all(isinstance(e, ast.Constant) for e in node.elts):
        return sorted(str(e.value) for e in node.elts)  # type: ignore[attr-defined]
    return None


def _kind_of_annotation(text: str, *, bool_kind: str) -> str:
    """The kind a dataclass field's annotation gives its flag (vLLM ``get_kwargs``, SGLang ``Arg`` fields)."""
    plain = text.replace(" ", "")
    if plain in ("bool", "Optional[bool]", "bool|None", "None|bool") or plain.startswith("Literal[True"):
        return bool_kind
    if "Literal[" in plain:
        return VALUE
    for prefix in ("list[", "List[", "tuple[", "Tuple[", "set[", "Set[", "Optional[list[", "Optional[List[",
                   "Optional[tuple[", "Optional[Tuple["):
        if plain.startswith(prefix):
            return MULTI
    if plain.startswith(("list[", "tuple[")) or "|list[" in plain or "list[" in plain.split("|")[0]:
        return MULTI
    if "bool" in plain.split("|") and "str" not in plain:
        return bool_kind
    return VALUE


class _Classes:
    """Dataclass fields by class name across a package's config modules: ``{class: {field: annotation source}}``."""

    def __init__(self) -> None:
        self.fields: dict[str, dict[str, str]] = {}
        self.bases: dict[str, list[str]] = {}

    def add_module(self, tree: ast.Module) -> None:
        for node in ast.walk(tree):
            if isinstance(node, ast.ClassDef):
                own = {
                    stmt.target.id: _src(stmt.annotation)
                    for stmt in node.body
                    if isinstance(stmt, ast.AnnAssign) and isinstance(stmt.target, ast.Name)
                    and not stmt.target.id.startswith("_") and "ClassVar" not in _src(stmt.annotation)
                }
                if own or node.name not in self.fields:
                    self.fields[node.name] = own
                    self.bases[node.name] = [_src(b).split(".")[-1] for b in node.bases]

    def all_fields(self, name: str, seen: frozenset[str] = frozenset()) -> dict[str, str]:
        out: dict[str, str] = {}
        for base in self.bases.get(name, []):
            if base in self.fields and base not in seen:
                out.update(self.all_fields(base, seen | {name}))
        out.update(self.fields.get(name, {}))
        return out


def _parse(path: Path) -> ast.Module | None:
    try:
        return ast.parse(path.read_text(encoding="utf-8"))
    except (OSError, SyntaxError, ValueError):
        return None


def _add(flags: dict[str, dict[str, Any]], names: list[str], kind: str, choices: list[str] | None = None) -> None:
    """Record a flag under its first long name; aliases next to it; the first registration wins (argparse refuses
    a duplicate, so a second one in the sources is a different subcommand or a later override)."""
    longs = [n for n in names if n.startswith("--")] or names
    key = longs[0]
    if key in flags:
        return
    entry: dict[str, Any] = {"kind": kind}
    aliases = sorted(n for n in names if n != key)
    if aliases:
        entry["aliases"] = aliases
    if choices:
        entry["choices"] = choices
    flags[key] = entry


def _kwargs_vars(func: ast.AST) -> dict[str, str]:
    """``{variable: class}`` for ``x_kwargs = get_kwargs(Cls)`` assignments inside ``func``."""
    out: dict[str, str] = {}
    for node in ast.walk(func):
        if isinstance(node, ast.Assign) and isinstance(node.value, ast.Call):
            callee = _src(node.value.func)
            if callee.endswith("get_kwargs") and node.value.args:
                cls = _src(node.value.args[0]).split(".")[-1]
                for target in node.targets:
                    if isinstance(target, ast.Name):
                        out[target.id] = cls
    return out


def _spread_fields(node: ast.AST) -> list[tuple[str, str]]:
    """(variable, field) pairs a ``**kw`` expression spreads: ``x["f"]`` or ``{**x["f"], ...}``."""
    if isinstance(node, ast.Subscript) and isinstance(node.value, ast.Name) and isinstance(node.slice, ast.Constant):
        return [(node.value.id, str(node.slice.value))]
    if isinstance(node, ast.Dict):
        out: list[tuple[str, str]] = []
        for key, value in zip(node.keys, node.values, strict=True):
            if key is None:
                out.extend(_spread_fields(value))
        return out
    return []


def _dict_keywords(node: ast.AST) -> dict[str, ast.AST]:
    """Literal keys of a ``**{...}`` spread (``{**x["f"], "action": ...}``)."""
    if isinstance(node, ast.Dict):
        return {str(k.value): v for k, v in zip(node.keys, node.values, strict=True)
                if isinstance(k, ast.Constant)}
    return {}


def _vllm_calls(tree: ast.Module, classes: _Classes, flags: dict[str, dict[str, Any]], *, bool_kind: str) -> None:
    funcs = [n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef)]
    for func in funcs:
        kwvars = _kwargs_vars(func)
        for call in ast.walk(func):
            if not (isinstance(call, ast.Call) and isinstance(call.func, ast.Attribute)
                    and call.func.attr == "add_argument"):
                continue
            names = [a.value for a in call.args if isinstance(a, ast.Constant) and isinstance(a.value, str)
                     and a.value.startswith("-")]
            if not names:
                continue
            keywords = {k.arg: k.value for k in call.keywords if k.arg is not None}
            kind = None
            choices = _choices(keywords)
            for spread in (k.value for k in call.keywords if k.arg is None):
                keywords = {**_dict_keywords(spread), **keywords}
                for var, field in _spread_fields(spread):
                    cls = kwvars.get(var)
                    annotation = classes.all_fields(cls).get(field) if cls else None
                    if annotation is not None and kind is None:
                        kind = _kind_of_annotation(annotation, bool_kind=bool_kind)
            kind = _kind_of_call(keywords) or kind or VALUE
            _add(flags, names, kind, choices or _choices(keywords))


def _vllm_frontend_fields(tree: ast.Module, classes: _Classes, flags: dict[str, dict[str, Any]]) -> None:
    """From 0.10 ``FrontendArgs.add_cli_args`` adds ``--<field>`` for every field (``get_kwargs(cls)`` in a loop)."""
    looped = any(
        isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "add_argument"
        and any(isinstance(a, ast.JoinedStr) for a in node.args)
        for node in ast.walk(tree)
    )
    if not looped:
        return
    for name in ("FrontendArgs",):
        for field, annotation in classes.all_fields(name).items():
            _add(flags, ["--" + field.replace("_", "-")], _kind_of_annotation(annotation, bool_kind=BOOL))


def vllm_flags(root: Path) -> dict[str, dict[str, Any]]:
    """Every ``vllm serve`` flag of the vLLM sources under ``root`` (the directory holding ``vllm/``)."""
    pkg = root / "vllm"
    classes = _Classes()
    cli_args = sorted((pkg / "entrypoints").glob("*/cli_args.py"))
    config_files = [pkg / "config.py", *sorted((pkg / "config").glob("*.py")), pkg / "engine" / "arg_utils.py",
                    *cli_args, *sorted((pkg / "entrypoints").glob("*.py"))]
    ACTION_NARGS.clear()
    for path in [*config_files, pkg / "utils" / "argparse_utils.py", pkg / "utils.py"]:
        tree = _parse(path) if path.exists() else None
        if tree is not None:
            classes.add_module(tree)
            action_defaults(tree)
    flags: dict[str, dict[str, Any]] = {}
    for path in (pkg / "entrypoints" / "cli" / "serve.py", *cli_args, pkg / "engine" / "arg_utils.py"):
        tree = _parse(path) if path.exists() else None
        if tree is None:
            continue
        _vllm_calls(tree, classes, flags, bool_kind=BOOL)
        if path.name == "cli_args.py":
            _vllm_frontend_fields(tree, classes, flags)
    return dict(sorted(flags.items()))


def _arg_meta(node: ast.AST) -> dict[str, ast.AST] | None:
    """Keywords of the ``Arg(...)`` (or bare help string) in ``A[T, meta]``; None when the field has no CLI."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return {}
    if isinstance(node, ast.Call) and _src(node.func).split(".")[-1] == "Arg":
        return {k.arg: k.value for k in node.keywords if k.arg is not None}
    return None


def _sglang_fields(tree: ast.Module, flags: dict[str, dict[str, Any]]) -> None:
    for node in ast.walk(tree):
        if not isinstance(node, ast.ClassDef):
            continue
        for stmt in node.body:
            if not (isinstance(stmt, ast.AnnAssign) and isinstance(stmt.target, ast.Name)):
                continue
            ann = stmt.annotation
            if not (isinstance(ann, ast.Subscript) and _src(ann.value) in ("A", "Annotated", "typing.Annotated")
                    and isinstance(ann.slice, ast.Tuple) and len(ann.slice.elts) >= 2):
                continue
            meta = _arg_meta(ann.slice.elts[1])
            if meta is None:
                continue
            no_cli = meta.get("no_cli")
            if isinstance(no_cli, ast.Constant) and no_cli.value is True:
                continue
            field = stmt.target.id
            cli = meta.get("cli_name")
            name = str(cli.value) if isinstance(cli, ast.Constant) else "--" + field.replace("_", "-")
            aliases_node = meta.get("aliases")
            aliases = [str(e.value) for e in aliases_node.elts if isinstance(e, ast.Constant)] if isinstance(
                aliases_node, ast.List | ast.Tuple) else []
            type_text = _src(ann.slice.elts[0])
            meta = {**_dict_keywords(meta.get("action_kwargs", ast.Constant(None))), **meta}
            kind = _kind_of_call(meta)
            if kind is None:
                if ("type_parser" in meta and "List" in type_text) or ("type_parser" in meta and "list" in type_text):
                    kind = VALUE
                else:
                    kind = _kind_of_annotation(type_text, bool_kind=FLAG)
            _add(flags, [name, *aliases], kind, _choices(meta))


def _sglang_calls(tree: ast.Module, flags: dict[str, dict[str, Any]]) -> None:
    for call in ast.walk(tree):
        if not (isinstance(call, ast.Call) and isinstance(call.func, ast.Attribute)
                and call.func.attr == "add_argument"):
            continue
        names = [a.value for a in call.args if isinstance(a, ast.Constant) and isinstance(a.value, str)
                 and a.value.startswith("-")]
        if names:
            keywords = {k.arg: k.value for k in call.keywords if k.arg is not None}
            _add(flags, names, _kind_of_call(keywords) or VALUE, _choices(keywords))


def sglang_flags(root: Path) -> dict[str, dict[str, Any]]:
    """Every ``sglang.launch_server`` flag of the SGLang sources under ``root`` (the directory holding ``sglang/``)."""
    srt = root / "sglang" / "srt"
    flags: dict[str, dict[str, Any]] = {}
    files = [srt / "server_args.py", *sorted((srt / "arg_groups").glob("*.py")),
             *sorted((srt / "arg_groups" / "fields").glob("*.py"))]
    ACTION_NARGS.clear()
    for path in files:
        tree = _parse(path) if path.exists() else None
        if tree is not None:
            action_defaults(tree)
    for path in files:
        if path.name == "arg_utils.py":
            continue
        tree = _parse(path) if path.exists() else None
        if tree is None:
            continue
        _sglang_calls(tree, flags)
        _sglang_fields(tree, flags)
    return dict(sorted(flags.items()))


NEEDED = {
    "vllm": ("vllm/config", "vllm/config.py", "vllm/engine/arg_utils.py", "vllm/entrypoints/", "vllm/utils"),
    "sglang": ("sglang/srt/server_args.py", "sglang/srt/arg_groups/"),
}


def ensure_sources(wheels: Path, pkg: str, version: str, *, download: bool) -> Path | None:
    """``wheels/<pkg>-<version>`` holding the parser sources; fetched with pip when ``download``."""
    root = wheels / f"{pkg}-{version}"
    marker = root / (f"{pkg}/engine/arg_utils.py" if pkg == "vllm" else f"{pkg}/srt/server_args.py")
    if marker.exists():
        return root
    if not download:
        return None
    dl = wheels / "dl"
    dl.mkdir(parents=True, exist_ok=True)
    found = sorted(dl.glob(f"{pkg}-{version}-*.whl"))
    if not found:
        subprocess.run([sys.executable, "-m", "pip", "download", f"{pkg}=={version}", "--no-deps", "-q", "-d",
                        str(dl)], check=True)
        found = sorted(dl.glob(f"{pkg}-{version}-*.whl"))
    with zipfile.ZipFile(found[0]) as whl:
        for name in whl.namelist():
            if name.endswith(".py") and name.startswith(NEEDED[pkg]):
                target = root / name
                if not target.exists():
                    whl.extract(name, root)
    return root


def runs(per_version: dict[str, dict[str, dict[str, Any]]]) -> dict[str, list[dict[str, Any]]]:
    """``{flag: [{"from": v, "to": w, "kind": ..., ...}]}``: each run a stretch of consecutive versions read in
    which the flag exists with the same entry (``expand`` is the inverse)."""
    versions = list(per_version)
    names = sorted({name for flags in per_version.values() for name in flags})
    out: dict[str, list[dict[str, Any]]] = {}
    for name in names:
        spans: list[dict[str, Any]] = []
        for version in versions:
            entry = per_version[version].get(name)
            last = spans[-1] if spans else None
            if entry is None:
                if last is not None:
                    last["open"] = False
                continue
            if last is not None and last.get("open", True) and {k: v for k, v in last.items()
                                                               if k not in ("from", "to", "open")} == entry:
                last["to"] = version
            else:
                spans.append({"from": version, "to": version, **entry})
        for span in spans:
            span.pop("open", None)
        out[name] = spans
    return out


def expand(doc: dict[str, Any]) -> dict[str, dict[str, dict[str, Any]]]:
    """``{version: {flag: entry}}`` from a fixture document (``runs`` inverted)."""
    versions: list[str] = doc["versions"]
    index = {v: i for i, v in enumerate(versions)}
    out: dict[str, dict[str, dict[str, Any]]] = {v: {} for v in versions}
    for name, spans in doc["flags"].items():
        for span in spans:
            entry = {k: v for k, v in span.items() if k not in ("from", "to")}
            for version in versions[index[span["from"]]:index[span["to"]] + 1]:
                out[version][name] = entry
    return out


def regenerate(wheels: Path, out: Path, *, download: bool) -> dict[str, int]:
    """Write ``out/vllm.json`` and ``out/sglang.json``; returns versions read per engine."""
    out.mkdir(parents=True, exist_ok=True)
    counts: dict[str, int] = {}
    for pkg, versions, extract in (("vllm", VLLM_VERSIONS, vllm_flags), ("sglang", SGLANG_VERSIONS, sglang_flags)):
        doc: dict[str, Any] = {
            "generator": "hack/engine_flags.py",
            "source": f"the argument parsers in the published {pkg} wheels (PyPI), read with ast",
            "kinds": {FLAG: "no value", BOOL: "--x / --no-x, no value", VALUE: "one value",
                      MULTI: "one or more values", OPTIONAL: "zero or one value"},
            "versions": [],
            "flags": {},
        }
        per_version: dict[str, dict[str, dict[str, Any]]] = {}
        for version in versions:
            root = ensure_sources(wheels, pkg, version, download=download)
            if root is None:
                print(f"skip {pkg} {version}: no sources under {wheels} (use --download)", file=sys.stderr)
                continue
            per_version[version] = extract(root)
        doc["versions"] = list(per_version)
        doc["flags"] = runs(per_version)
        (out / f"{pkg}.json").write_text(json.dumps(doc, indent=1, sort_keys=False) + "\n", encoding="utf-8")
        counts[pkg] = len(doc["versions"])
    return counts


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--wheels", default="/work/wheels", help="directory of <pkg>-<version>/ source trees")
    parser.add_argument("--out", default=str(Path(__file__).resolve().parents[1] / "tests/fixtures/engine-flags"))
    parser.add_argument("--download", action="store_true", help="pip download versions that are missing")
    args = parser.parse_args()
    counts = regenerate(Path(args.wheels), Path(args.out), download=args.download)
    print(" ".join(f"{k}: {v} versions" for k, v in counts.items()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
