"""What resolution of ``spec.model`` found: the config, the checkpoint's tensors, where they came from (pure).

Produced by ``ctxfit.hub`` (Hugging Face Hub / mirror / HF cache / a local directory) or read back from the
operator's shared resolution; consumed by ``ctxfit.budget.planner.plan``.
"""

from __future__ import annotations

import base64
import binascii
import json
import zlib
from dataclasses import dataclass
from typing import Any

from .checkpoint import Checkpoint, checkpoint_format


@dataclass(frozen=True)
class ModelSource:
    """A resolved model.

    Attributes:
        config: config.json as a dict.
        checkpoint: tensor groups from the safetensors headers (or file sizes with ``fallback``), None when only
            the config was read.
        origin: ``hub`` | ``volume`` | ``local`` | ``cache`` | ``spec`` | ``catalog``.
        repo: repository id (or the directory for ``local``/``volume``).
        revision: the revision asked for (branch, tag or commit).
        commit: the resolved commit sha, when known.
    """

    config: dict[str, Any]
    checkpoint: Checkpoint | None = None
    origin: str = "hub"
    repo: str = ""
    revision: str | None = None
    commit: str | None = None

    @property
    def weight_format(self) -> str:
        """``checkpoint_format`` of config and checkpoint."""
        return checkpoint_format(self.config, self.checkpoint)

    def describe(self) -> str:
        """One line for the plan's reasons: where the config and tensors came from."""
        at = f"@{self.commit[:12]}" if self.commit else (f"@{self.revision}" if self.revision else "")
        return f"{self.origin} {self.repo}{at}"


RESOLUTION_PREFIX = "ctxfit-resolution/1 "
"""First token of a packed resolution (a resolver pod's termination message, the operator's shared store)."""
MAX_UNPACKED_BYTES = 1 << 20
"""A packed resolution decompresses to at most this much (it is input: a pod's termination message)."""


def pack_source(source: ModelSource) -> str:
    """``RESOLUTION_PREFIX`` + base64(zlib(JSON {config, checkpoint, origin, repo, revision, commit})): a few KiB
    for any checkpoint (tensor groups, not tensors), under the kubelet's 4096-byte termination message."""
    doc = {"config": source.config, "checkpoint": source.checkpoint.to_wire() if source.checkpoint else None,
           "origin": source.origin, "repo": source.repo, "revision": source.revision, "commit": source.commit}
    return RESOLUTION_PREFIX + _pack(doc)


def pack_error(kind: str, repo: str, detail: str) -> str:
    """A failed resolution in the same form: ``{"error": kind, "repo", "detail"}``."""
    return RESOLUTION_PREFIX + _pack({"error": kind, "repo": repo, "detail": " ".join(detail.split())[:300]})


def unpack(text: str) -> ModelSource | tuple[str, str, str]:
    """Inverse of ``pack_source`` / ``pack_error``: a ``ModelSource``, or ``(kind, repo, detail)``.

    Raises:
        ValueError: not a packed resolution (wrong prefix, undecodable, too large, malformed fields).
    """
    text = text.strip()
    if not text.startswith(RESOLUTION_PREFIX.strip()):
        raise ValueError("not a ctxfit resolution")
    payload = text[len(RESOLUTION_PREFIX.strip()):].strip()
    try:
        inflater = zlib.decompressobj()
        raw = inflater.decompress(base64.b64decode(payload, validate=True), MAX_UNPACKED_BYTES)
        if inflater.unconsumed_tail:
            raise ValueError(f"larger than {MAX_UNPACKED_BYTES} bytes")
        doc = json.loads(raw)
    except (zlib.error, ValueError, binascii.Error) as exc:
        raise ValueError(f"undecodable resolution ({exc})") from None
    if not isinstance(doc, dict):
        raise ValueError("a resolution is a JSON object")
    if "error" in doc:
        return str(doc["error"]), str(doc.get("repo") or ""), str(doc.get("detail") or "")
    config = doc.get("config")
    if not isinstance(config, dict):
        raise ValueError("resolution without a config object")
    try:
        checkpoint = Checkpoint.from_wire(doc["checkpoint"]) if doc.get("checkpoint") else None
    except (KeyError, TypeError, ValueError) as exc:
        raise ValueError(f"malformed checkpoint ({exc})") from None
    return ModelSource(config, checkpoint, str(doc.get("origin") or "hub"), str(doc.get("repo") or ""),
                       doc.get("revision"), doc.get("commit"))


def _pack(doc: dict[str, Any]) -> str:
    return base64.b64encode(zlib.compress(json.dumps(doc, separators=(",", ":")).encode(), 9)).decode()
