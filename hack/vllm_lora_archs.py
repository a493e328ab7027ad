"""Regenerate operator/ctxfit/engines/vllm/lora_archs.json: which architectures each vLLM release serves LoRA for.

Reads ``vllm/model_executor/models/*.py`` and ``registry.py`` of the released wheels with ``ast`` (no import, no
CUDA). For every architecture name of the registry's text-generation and multimodal tables it records whether its
class implements ``SupportsLoRA`` (every architecture of those tables is listed, with empty spans when no release
serves LoRA for it; a base class named so, directly or through a base class defined in the models
package; vLLM's ``lora_model_runner_mixin.load_lora_model`` raises "<class> does not support LoRA yet" otherwise) and
whether the class declares non-empty ``embedding_modules`` (``lora/utils.py get_supported_lora_modules`` then wraps
``embed_tokens`` and ``lm_head`` of every LoRA deployment, whatever the adapters target). The JSON keeps, per
architecture, the version spans of each property over the releases read (``VERSIONS``).

Usage: ``python hack/vllm_lora_archs.py [--wheels /work/wheels] [--out operator/ctxfit/engines/vllm/lora_archs.json]``.
"""

from __future__ import annotations

import argparse
import ast
import json
from pathlib import Path

VERSIONS = (
    "0.8.0", "0.8.1", "0.8.2", "0.8.3", "0.8.4", "0.8.5", "0.9.0", "0.9.2", "0.10.0", "0.10.1.1", "0.10.2", "0.11.0",
    "0.12.0", "0.13.0", "0.14.0", "0.15.0", "0.16.0", "0.17.0", "0.18.0", "0.19.0", "0.20.0", "0.21.0", "0.22.0",
    "0.23.0", "0.24.0", "0.25.0", "0.26.0", "0.27.0", "0.28.0", "0.29.0", "0.30.0", "0.31.0", "0.32.0", "0.33.0",
)
TABLES = ("_TEXT_GENERATION_MODELS", "_MULTIMODAL_MODELS")


def _classes(models: Path) -> dict[str, ast.ClassDef]:
    out: dict[str, ast.ClassDef] = {}
    for path in sorted(models.glob("*.py")):
        try:
            tree = ast.parse(path.read_text(errors="replace"))
        except SyntaxError:
            continue
        for node in tree.body:
            if isinstance(node, ast.ClassDef):
                out.setdefault(f"{path.stem}.{node.name}", node)
                out.setdefault(node.name, node)
    return out


def _base_names(node: ast.ClassDef) -> list[str]:
    names = []
    for base in node.bases:
        if isinstance(base, ast.Name):
            names.append(base.id)
        elif isinstance(base, ast.Attribute):
            names.append(base.attr)
        elif isinstance(base, ast.Subscript) and isinstance(base.value, ast.Name):
            names.append(base.value.id)
    return names


def _declares_embedding(node: ast.ClassDef) -> bool | None:
    for stmt in node.body:
        targets = stmt.targets if isinstance(stmt, ast.Assign) else [stmt.target] if isinstance(
            stmt, ast.AnnAssign) else []
        value = stmt.value if isinstance(stmt, ast.Assign | ast.AnnAssign) else None
        if any(isinstance(t, ast.Name) and t.id == "embedding_modules" for t in targets):
            return isinstance(value, ast.Dict) and bool(value.keys)
    return None


def _props(name: str, classes: dict[str, ast.ClassDef], seen: frozenset[str] = frozenset()) -> tuple[bool, bool]:
    """(SupportsLoRA, non-empty embedding_modules) of class ``name``, following base classes by name."""
    node = classes.get(name)
    if node is None or name in seen:
        return False, False
    bases = _base_names(node)
    lora = "SupportsLoRA" in bases
    embedding = _declares_embedding(node)
    inherited = [_props(b, classes, seen | {name}) for b in bases]
    lora = lora or any(i[0] for i in inherited)
    if embedding is None:
        embedding = any(i[1] for i in inherited)
    return lora, embedding


def scan(root: Path) -> dict[str, tuple[bool, bool]]:
    """arch -> (SupportsLoRA, embedding_modules) for one unpacked wheel."""
    models = root / "vllm" / "model_executor" / "models"
    classes = _classes(models)
    tree = ast.parse((models / "registry.py").read_text())
    out: dict[str, tuple[bool, bool]] = {}
    for node in tree.body:
        target = node.targets[0] if isinstance(node, ast.Assign) else node.target if isinstance(
            node, ast.AnnAssign) else None
        if not isinstance(target, ast.Name) or target.id not in TABLES or not isinstance(node.value, ast.Dict):
            continue
        for key, value in zip(node.value.keys, node.value.values, strict=True):
            if not isinstance(key, ast.Constant) or not isinstance(value, ast.Tuple) or len(value.elts) < 2:
                continue
            module, cls = (e.value if isinstance(e, ast.Constant) else None for e in value.elts[:2])
            if isinstance(module, str) and isinstance(cls, str):
                out[str(key.value)] = _props(f"{module}.{cls}", classes) if f"{module}.{cls}" in classes else \
                    _props(cls, classes)
    return out


def spans(present: list[bool]) -> list[list[str]]:
    """[first, last] version spans where ``present`` holds."""
    out: list[list[str]] = []
    for version, on in zip(VERSIONS, present, strict=True):
        if on and (not out or out[-1][1] != VERSIONS[VERSIONS.index(version) - 1]):
            out.append([version, version])
        elif on:
            out[-1][1] = version
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--wheels", type=Path, default=Path("/work/wheels"))
    parser.add_argument("--out", type=Path,
                        default=Path(__file__).resolve().parent.parent / "operator/ctxfit/engines/vllm/lora_archs.json")
    args = parser.parse_args()
    per_version = [scan(args.wheels / f"vllm-{v}") for v in VERSIONS]
    archs = sorted({a for table in per_version for a in table})
    table = {}
    for arch in archs:
        lora = spans([t.get(arch, (False, False))[0] for t in per_version])
        table[arch] = {"lora": lora, "embedding": spans([t.get(arch, (False, False))[1] and
                                                          t.get(arch, (False, False))[0] for t in per_version])}
    args.out.write_text(json.dumps({"versions": list(VERSIONS), "architectures": table}, indent=1) + "\n")
    served = sum(1 for entry in table.values() if entry["lora"])
    print(f"{len(table)} architectures ({served} with LoRA in some release) in {len(VERSIONS)} releases -> {args.out}")


if __name__ == "__main__":
    main()
