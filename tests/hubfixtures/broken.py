"""Broken repos for the Hub stand-in (``HubStandIn(extra=broken_repos())``): each is one way a real repository's
files can be bad input, with the typed kind resolution must end in (``ctxfit.hub.errors.ResolveKind``) or, for a
config.json that reads but cannot be planned, the planner's named error.

Built from a real fixture (Qwen/Qwen2.5-7B's config.json and tensors) with one thing broken, so that nothing else
about the repo is unusual.
"""

from __future__ import annotations

import hashlib
import json
import struct
from dataclasses import dataclass

from ctxfit.vocab.safetensors import encode_header

from .repos import FixtureRepo, RepoFile, fixture_repo

BASE = "Qwen/Qwen2.5-7B"


@dataclass(frozen=True)
class Broken:
    """``repo``: the stand-in's repo id; ``kind``: the ResolveKind value resolution ends in (None: it resolves and
    the planner refuses it, naming ``field``); ``what``: what is broken, for test ids."""

    repo: str
    kind: str | None
    what: str
    field: str = ""


CASES = (
    Broken("acme/config-truncated", "InvalidCheckpoint", "config.json cut off mid-object"),
    Broken("acme/config-not-object", "InvalidCheckpoint", "config.json is a JSON list"),
    Broken("acme/no-config", "InvalidCheckpoint", "no config.json at all"),
    Broken("acme/header-not-json", "InvalidCheckpoint", "a safetensors header that is not JSON"),
    Broken("acme/header-too-long", "InvalidCheckpoint", "a safetensors header length of 1 TiB"),
    Broken("acme/header-bad-dtype", "InvalidCheckpoint", "a tensor of an unknown dtype"),
    Broken("acme/header-bad-shape", "InvalidCheckpoint", "a tensor with a negative dimension"),
    Broken("acme/header-offsets-short", "InvalidCheckpoint",
           "a tensor of 10^30 elements whose data_offsets hold 10 bytes"),
    Broken("acme/header-offsets-gap", "InvalidCheckpoint", "a tensor whose data does not follow the one before"),
    Broken("acme/config-layers-string", "UnsupportedArchitecture", "num_hidden_layers is a string",
           "num_hidden_layers"),
    Broken("acme/config-intermediate-string", None, "intermediate_size is a string", "intermediate_size"),
    Broken("acme/config-architectures-int", None, "architectures is a number, vocab_size a float", "vocab_size"),
)


def _repo(case: Broken, config: bytes | None, header: bytes | None) -> FixtureRepo:
    base = fixture_repo(BASE)
    repo = FixtureRepo(case.repo, {}, [], 1, False, f"broken: {case.what}", {})
    repo.sha = hashlib.sha1(f"ctxfit-broken:{case.repo}".encode()).hexdigest()
    files: dict[str, RepoFile] = {}
    if config is not None:
        files["config.json"] = RepoFile("config.json", config)
    if header is None:
        header = encode_header(base.tensors[:4])
    files["model.safetensors"] = RepoFile("model.safetensors", header=header, data_bytes=1024)
    repo.files = files
    return repo


def broken_repos() -> dict[str, FixtureRepo]:
    """Every case of ``CASES`` by repo id."""
    base = fixture_repo(BASE)
    good = json.dumps(base.config).encode()
    tensors = base.tensors[:4]

    def config(**change: object) -> bytes:
        return json.dumps(base.config | change).encode()

    def raw_header(doc: object) -> bytes:
        body = json.dumps(doc).encode()
        return struct.pack("<Q", len(body)) + body

    first = {t.name: {"dtype": t.dtype, "shape": list(t.shape), "data_offsets": [0, 0]} for t in tensors}
    name = tensors[0].name
    laid_out = json.loads(encode_header(tensors)[8:])
    huge = laid_out | {name: laid_out[name] | {"shape": [10**15, 10**15], "data_offsets": [0, 10]}}
    last = tensors[-1].name
    begin, end = laid_out[last]["data_offsets"]
    gap = laid_out | {last: laid_out[last] | {"data_offsets": [begin + 64, end + 64]}}
    made = {
        "acme/config-truncated": (good[: len(good) // 2], None),
        "acme/config-not-object": (b"[1, 2, 3]", None),
        "acme/no-config": (None, None),
        "acme/header-not-json": (good, struct.pack("<Q", 10) + b"{not json}"),
        "acme/header-too-long": (good, struct.pack("<Q", 1 << 40) + b"{}"),
        "acme/header-bad-dtype": (good, raw_header(first | {name: first[name] | {"dtype": "Q9"}})),
        "acme/header-bad-shape": (good, raw_header(first | {name: first[name] | {"shape": [-4, 8]}})),
        "acme/header-offsets-short": (good, raw_header(huge)),
        "acme/header-offsets-gap": (good, raw_header(gap)),
        "acme/config-layers-string": (config(num_hidden_layers="28"), None),
        "acme/config-intermediate-string": (config(intermediate_size="18944"), None),
        "acme/config-architectures-int": (config(architectures=-1, vocab_size=152064.5), None),
    }
    return {c.repo: _repo(c, *made[c.repo]) for c in CASES}
