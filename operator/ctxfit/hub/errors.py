"""Typed resolution failures: a kind the operator's conditions and the CLI read, and one line for people."""

from __future__ import annotations

from enum import Enum


class ResolveKind(Enum):
    """Why a model could not be resolved. ``HUB_UNREACHABLE`` is waiting (retry with backoff); the others stay until
    the spec or the token changes."""

    HUB_UNREACHABLE = "HubUnreachable"
    ACCESS_DENIED = "ModelAccessDenied"
    NOT_FOUND = "ModelNotFound"
    REVISION_NOT_FOUND = "RevisionNotFound"
    UNSUPPORTED_ARCHITECTURE = "UnsupportedArchitecture"
    INVALID_CHECKPOINT = "InvalidCheckpoint"
    OFFLINE = "ModelNotCached"
    BAD_ENDPOINT = "HubEndpointInvalid"
    CACHE_UNUSABLE = "LocalCacheUnusable"

    @property
    def waiting(self) -> bool:
        """True when retrying later can succeed without any change (the Hub or network was down)."""
        return self is ResolveKind.HUB_UNREACHABLE


HINTS = {
    ResolveKind.HUB_UNREACHABLE: "check the network or HF_ENDPOINT (a mirror), or resolve offline with --model-dir",
    ResolveKind.ACCESS_DENIED: "the repo is gated or private: accept its terms on the Hub and give a token "
                               "(HF_TOKEN, or spec.model.tokenSecretRef in the operator)",
    ResolveKind.NOT_FOUND: "check spec.model.name (owner/name as on the Hub) or give --model-dir",
    ResolveKind.REVISION_NOT_FOUND: "check spec.model.revision (a branch, tag or commit of the repo)",
    ResolveKind.UNSUPPORTED_ARCHITECTURE: "set spec.model.architecture and weightsPerGPU, or use an engine version "
                                          "that serves this architecture",
    ResolveKind.INVALID_CHECKPOINT: "check the repo's config.json and safetensors files",
    ResolveKind.BAD_ENDPOINT: "HF_ENDPOINT must be the http(s) URL of the Hub or a mirror (e.g. "
                              "https://huggingface.co), or unset",
    ResolveKind.CACHE_UNUSABLE: "HF_HOME (the Hugging Face cache, default ~/.cache/huggingface) must be a directory "
                                "this process can write",
    ResolveKind.OFFLINE: "run once with network access (ctxfit keeps the resolution in ~/.cache/ctxfit), "
                         "or --model-dir",
}


class ResolveError(Exception):
    """A model that could not be resolved.

    Attributes:
        kind: the typed reason.
        repo: the repository (or directory) asked for.
        detail: what the source said (one line).
        hint: what to do, when the source knows better than the kind's ``HINTS`` (a local directory, the cache
            folder actually used).
    """

    def __init__(self, kind: ResolveKind, repo: str, detail: str, hint: str | None = None) -> None:
        self.kind, self.repo, self.detail = kind, repo, " ".join(detail.split())[:300]
        self.hint = hint or HINTS[kind]
        super().__init__(self.line())

    def line(self) -> str:
        """``repo: detail; what to do``."""
        return f"{self.repo}: {self.kind.value}: {self.detail}; {self.hint}"
