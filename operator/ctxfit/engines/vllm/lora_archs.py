"""Which architectures each vLLM release serves LoRA for, read in the wheels (``hack/vllm_lora_archs.py`` writes
``lora_archs.json``: per architecture of the registry, the releases whose model class implements ``SupportsLoRA``
and those whose class declares non-empty ``embedding_modules``).

vLLM refuses LoRA on a model class without ``SupportsLoRA`` (``v1/worker/lora_model_runner_mixin.load_lora_model``:
"<class> does not support LoRA yet"); with ``embedding_modules`` it wraps ``embed_tokens`` and ``lm_head`` in every
LoRA deployment (``lora/utils.get_supported_lora_modules``), whatever the adapters target.
"""

from __future__ import annotations

import json
from functools import cache
from pathlib import Path
from typing import Any

Version = tuple[int, ...]


@cache
def _table() -> dict[str, Any]:
    return dict(json.loads((Path(__file__).with_name("lora_archs.json")).read_text()))


def version_tuple(text: str) -> Version:
    return tuple(int(p) for p in text.split("."))


def _within(spans: list[list[str]], version: Version) -> bool:
    return any(version_tuple(a)[:3] <= version[:3] <= version_tuple(b)[:3] for a, b in spans)


def releases_read() -> tuple[Version, Version]:
    """(first, last) release the table was read from."""
    versions = _table()["versions"]
    return version_tuple(versions[0]), version_tuple(versions[-1])


def lora_since(architecture: str) -> str | None:
    """The first release read whose class of ``architecture`` serves LoRA, None when none does (or unknown)."""
    entry = _table()["architectures"].get(architecture)
    return str(entry["lora"][0][0]) if entry and entry["lora"] else None


def known(architecture: str) -> bool:
    """Whether the table has ``architecture`` (a registry name with LoRA in some release read)."""
    return architecture in _table()["architectures"]


def supports_lora(architecture: str, version: Version) -> bool | None:
    """Whether vLLM ``version`` serves LoRA for ``architecture``; None when the table cannot say (an
    architecture it does not list, or a version outside the releases read)."""
    first, last = releases_read()
    if not first[:3] <= version[:3] <= last[:3]:
        return None
    entry = _table()["architectures"].get(architecture)
    return None if entry is None else _within(entry["lora"], version)


def wraps_embeddings(architecture: str, version: Version) -> bool | None:
    """Whether vLLM ``version`` gives ``embed_tokens`` / ``lm_head`` LoRA buffers for ``architecture``; None when
    the table cannot say."""
    if supports_lora(architecture, version) is None:
        return None
    return _within(_table()["architectures"][architecture]["embedding"], version)
