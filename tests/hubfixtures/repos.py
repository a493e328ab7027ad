"""The fixture repos of tests/fixtures/hub/models.yaml as files: config.json (the real file, from
tests/fixtures/hub/configs/), safetensors shards (header + a data region that is never materialised),
model.safetensors.index.json, the entry's extra files (hf_quant_config.json), a commit sha."""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from typing import Any

import yaml
from ctxfit.vocab.checkpoint import Checkpoint, group_tensors
from ctxfit.vocab.safetensors import Tensor, encode_header

from .layouts import model_tensors, quantize

HUB = Path(__file__).resolve().parents[1] / "fixtures" / "hub"
FIXTURES = HUB / "models.yaml"


@dataclass
class RepoFile:
    """One file: ``content`` in full (small files), or a safetensors ``header`` followed by ``data_bytes`` zeros."""

    path: str
    content: bytes = b""
    header: bytes = b""
    data_bytes: int = 0

    @property
    def size(self) -> int:
        return len(self.content) if not self.header else len(self.header) + self.data_bytes

    def read(self, start: int, end: int) -> bytes:
        """Bytes [start, end) (end exclusive); the data region reads as zeros."""
        if not self.header:
            return self.content[start:end]
        end = min(end, self.size)
        head = self.header[start:end] if start < len(self.header) else b""
        return head + b"\0" * max(0, end - max(start, len(self.header)))


@dataclass
class FixtureRepo:
    repo: str
    config: dict[str, Any]
    tensors: list[Tensor]
    shards: int
    gated: bool
    family: str
    entry: dict[str, Any]
    sha: str = ""
    files: dict[str, RepoFile] = field(default_factory=dict)

    def checkpoint(self) -> Checkpoint:
        return Checkpoint(group_tensors(self.tensors), tuple(f for f in self.files if f.endswith(".safetensors")),
                          sum(f.size for n, f in self.files.items() if n.endswith(".safetensors")))


def config_of(entry: dict[str, Any]) -> dict[str, Any]:
    """The entry's config.json (tests/fixtures/hub/configs/)."""
    return json.loads((HUB / "configs" / entry["config"]).read_text(encoding="utf-8"))


def generated_tensors(entry: dict[str, Any]) -> list[Tensor]:
    """The tensors layouts.py generates for the entry's config and scheme."""
    raw = model_tensors(config_of(entry))
    if entry.get("scheme", "none") != "none":
        raw = quantize(raw, entry["scheme"])
    return [Tensor(n, d, tuple(s)) for n, d, s in raw]


def real_tensors(entry: dict[str, Any]) -> list[Tensor] | None:
    """The entry's real safetensors dump (tests/fixtures/hub/tensors/), in the config's dtype, or None."""
    if not entry.get("tensors"):
        return None
    dtype = {"float16": "F16", "float32": "F32"}.get(str(config_of(entry).get("torch_dtype")), "BF16")
    rows = json.loads((HUB / "tensors" / entry["tensors"]["file"]).read_text(encoding="utf-8"))
    return [Tensor(name, dtype, tuple(shape)) for name, shape in rows]


def _build(entry: dict[str, Any]) -> FixtureRepo:
    tensors = real_tensors(entry) or generated_tensors(entry)
    config = config_of(entry)
    repo = FixtureRepo(entry["repo"], config, tensors, int(entry.get("shards", 1)), bool(entry.get("gated")),
                       entry.get("family", ""), entry)
    repo.sha = hashlib.sha1(f"ctxfit-fixture:{entry['repo']}".encode()).hexdigest()
    stem = entry["repo"].replace("/", "--")
    raw_config = (HUB / "configs" / entry["config"]).read_bytes()
    files: dict[str, RepoFile] = {"config.json": RepoFile("config.json", raw_config)}
    for name in entry.get("extraFiles") or {}:
        files[name] = RepoFile(name, (HUB / "configs" / f"{stem}--{name}").read_bytes())
    n = repo.shards
    if n == 1:
        header = encode_header(tensors)
        files["model.safetensors"] = RepoFile("model.safetensors", header=header,
                                              data_bytes=sum(t.nbytes for t in tensors))
    else:
        per = -(-len(tensors) // n)
        weight_map: dict[str, str] = {}
        for i in range(n):
            chunk = tensors[i * per:(i + 1) * per]
            name = f"model-{i + 1:05d}-of-{n:05d}.safetensors"
            files[name] = RepoFile(name, header=encode_header(chunk), data_bytes=sum(t.nbytes for t in chunk))
            weight_map.update({t.name: name for t in chunk})
        index = {"metadata": {"total_size": sum(t.nbytes for t in tensors)}, "weight_map": weight_map}
        files["model.safetensors.index.json"] = RepoFile("model.safetensors.index.json", json.dumps(index).encode())
    files["README.md"] = RepoFile("README.md", f"# {entry['repo']}\nctxfit test fixture ({repo.family}).\n".encode())
    repo.files = files
    return repo


@cache
def fixture_entries() -> dict[str, dict[str, Any]]:
    """The models.yaml entries by repo id."""
    return {e["repo"]: e for e in yaml.safe_load(FIXTURES.read_text(encoding="utf-8"))["models"]}


@cache
def fixture_repo(repo: str) -> FixtureRepo:
    """One fixture repo, built on first use (DeepSeek-V3's 92k tensor headers take seconds)."""
    return _build(fixture_entries()[repo])


class _Repos(dict[str, FixtureRepo]):
    """Lazy mapping repo id -> ``FixtureRepo``."""

    def __contains__(self, key: object) -> bool:
        return key in fixture_entries()

    def __getitem__(self, key: str) -> FixtureRepo:
        return fixture_repo(key)

    def get(self, key: str, default: Any = None) -> Any:  # type: ignore[override]
        return fixture_repo(key) if key in fixture_entries() else default

    def __iter__(self):  # type: ignore[no-untyped-def]
        return iter(fixture_entries())

    def __len__(self) -> int:
        return len(fixture_entries())


def fixture_repos() -> dict[str, FixtureRepo]:
    """Every fixture repo by id, built lazily."""
    return _Repos()
