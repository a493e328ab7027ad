"""kopf's settings for ctxfit, chosen for the per-event cost (the operator watches every engine pod, owned
Deployment and Service, and every InferenceServer: at 1,000 servers that is many events per second). See
docs/design/io-performance.md."""

from __future__ import annotations

import logging
from collections.abc import Iterable
from typing import Any

import kopf

KOPF_EXECUTOR_THREADS = 2
"""Threads of kopf's own executor: only ``on.login`` (sync) runs there once every handler is async."""
WATCH_SERVER_TIMEOUT_SECONDS = 300
"""``watching.server_timeout``: the API server ends each watch after this long (kopf re-lists nothing)."""
LIST_CHUNK_SIZE = 200
"""``watching.chunk_size``: the initial listings (1,000 servers, their pods, Deployments...) are read this many
objects per call, not all at once: one 1,000-object list decoded at once was a transient peak of the
operator's RSS after a restart (kopf docs: "Configuration", watching.chunk_size)."""


class NoDiffBase(kopf.DiffBaseStorage):
    """A diff-base storage for an operator without change-detecting handlers: empty essence, nothing stored."""

    def build(self, *, body: kopf.Body, extra_fields: Iterable[Any] | None = None) -> kopf.BodyEssence:
        """An empty essence (no copy of ``body``)."""
        return kopf.BodyEssence()

    def fetch(self, *, body: kopf.Body) -> kopf.BodyEssence | None:
        """Nothing was stored."""
        return None

    def store(self, *, body: kopf.Body, patch: kopf.Patch, essence: kopf.BodyEssence) -> None:
        """Store nothing."""


def configure(settings: kopf.OperatorSettings) -> None:
    """Apply ctxfit's kopf settings (called from the ``on.startup`` handler)."""
    settings.posting.level = logging.WARNING
    settings.persistence.progress_storage = kopf.AnnotationsProgressStorage(prefix="ctxfit.io")
    settings.persistence.diffbase_storage = NoDiffBase()
    settings.watching.server_timeout = WATCH_SERVER_TIMEOUT_SECONDS
    settings.watching.chunk_size = LIST_CHUNK_SIZE
    settings.execution.max_workers = KOPF_EXECUTOR_THREADS

