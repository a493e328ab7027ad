#!/usr/bin/env python3
"""Regenerate tests/fixtures/hub/configs/*.json from the public sources models.yaml cites (not run by tests).

Each fixture's config.json is copied from a file in a public GitHub repository at a pinned commit
(``source.url``, ``https://github.com/<owner>/<name>/blob/<commit>/<path>``, in tests/fixtures/hub/models.yaml).
``how`` says how the JSON is taken out:

- ``verbatim``: the file is the config.json (ai-dynamo/aiconfigurator ``model_configs/*_config.json``).
- ``markdown:<heading>``: the JSON object that follows the line ``<heading>`` (citsjtu2020/LLM-Prof keeps a
  markdown page of several config.json files, one after another under the model's name).
- ``python-dict:<name>[;drop=a,b]``: the ``<name>`` entry of the module's ``MODEL_PRESETS`` dict (mlc-ai/mlc-llm
  ``model_preset.py`` keeps config.json files as Python dicts and appends its own keys, listed in ``drop``).
- ``markdown table ...`` (``tensors.source``): the ``| name | (shape) | ... |`` rows of a safetensors dump, written as
  ``[[name, [shape...]], ...]`` to ``tensors.file``.

Besides config.json, an entry's ``extraFiles`` (e.g. ModelOpt's hf_quant_config.json) are copied the same way to
``configs/<owner>--<name>--<file>``.

Usage: python3 hack/hub_fixture_configs.py --mirror ai-dynamo/aiconfigurator=/path/to/git-dir [--mirror ...]
(a git directory holding the cited commit, e.g. one brought by the tool library's ``fetch``, or a clone).
Files whose source repo has no mirror given are left as they are; ``--check`` compares instead of writing.
"""

from __future__ import annotations

import argparse
import ast
import json
import subprocess
import sys
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
FIXTURES = ROOT / "tests" / "fixtures" / "hub"


def parse_url(url: str) -> tuple[str, str, str]:
    """``https://github.com/o/n/blob/<commit>/<path>`` -> (``o/n``, commit, path)."""
    owner, name, blob, commit, path = url.removeprefix("https://github.com/").split("/", 4)
    if blob != "blob":
        raise ValueError(url)
    return f"{owner}/{name}", commit, path


def _git_show(git_dir: str, commit: str, path: str) -> str:
    return subprocess.run(["git", "--git-dir", git_dir, "show", f"{commit}:{path}"], check=True,
                          capture_output=True, text=True).stdout


def extract(text: str, how: str) -> dict:
    """The config object from the source file's text."""
    if how == "verbatim":
        return json.loads(text)
    kind, _, arg = how.partition(":")
    if kind == "markdown":
        lines = text.splitlines()
        start = lines.index(arg) + 1
        return json.JSONDecoder().raw_decode("\n".join(lines[start:]).lstrip())[0]
    if kind == "python-dict":
        name, _, opts = arg.partition(";")
        drop = set(opts.removeprefix("drop=").split(",")) if opts else set()
        tree = ast.parse(text)
        for node in ast.walk(tree):
            if isinstance(node, ast.AnnAssign | ast.Assign) and isinstance(node.value, ast.Dict):
                for key, value in zip(node.value.keys, node.value.values, strict=True):
                    if isinstance(key, ast.Constant) and key.value == name:
                        return {k: v for k, v in ast.literal_eval(value).items() if k not in drop}
        raise KeyError(name)
    raise ValueError(f"unknown extraction {how}")


def tensor_table(text: str) -> list:
    """``| name | (d0, d1) | ... |`` rows (the first table of the dump) -> ``[[name, [d0, d1]], ...]``."""
    rows: list = []
    for line in text.splitlines():
        if line.startswith("## ") and rows:
            break  # the dump's second table repeats the largest tensors
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) >= 2 and cells[1].startswith("(") and "." in cells[0]:
            shape = [int(d) for d in cells[1].strip("()").split(",") if d.strip()]
            rows.append([cells[0], shape])
    return rows


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mirror", action="append", default=[], help="owner/name=GIT_DIR")
    parser.add_argument("--check", action="store_true", help="compare with the checked-in files, write nothing")
    args = parser.parse_args()
    mirrors = dict(m.split("=", 1) for m in args.mirror)
    bad = 0
    doc = yaml.safe_load((FIXTURES / "models.yaml").read_text(encoding="utf-8"))
    for entry in doc["models"] + [e | {"repo": e["name"]} for e in doc.get("catalogConfigs") or []]:
        stem = entry["repo"].replace("/", "--")
        jobs = [(entry["source"], FIXTURES / "configs" / entry["config"])]
        extra = entry.get("extraFiles") or {}
        jobs += [(src, FIXTURES / "configs" / f"{stem}--{name}") for name, src in extra.items()]
        if entry.get("tensors"):
            jobs.append((entry["tensors"]["source"], FIXTURES / "tensors" / entry["tensors"]["file"]))
        for src, out in jobs:
            repo, commit, path = parse_url(src["url"])
            if repo not in mirrors:
                continue
            text_in = _git_show(mirrors[repo], commit, path)
            how = src.get("how", "verbatim")
            config = tensor_table(text_in) if how.startswith("markdown table") else extract(text_in, how)
            text = json.dumps(config, indent=2 if isinstance(config, dict) else None) + "\n"
            if args.check:
                if not out.is_file() or json.loads(out.read_text(encoding="utf-8")) != config:
                    print(f"differs: {out.relative_to(ROOT)}")
                    bad += 1
            else:
                out.parent.mkdir(parents=True, exist_ok=True)
                out.write_text(text, encoding="utf-8")
                print(f"wrote {out.relative_to(ROOT)}")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
