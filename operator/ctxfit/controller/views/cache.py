"""Pure views of the weights cache as Kubernetes shows it: the ``model-download`` init container, the claim,
the default StorageClass (no kopf, no API client)."""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from ctxfit.api import quantity_to_bytes
from ctxfit.render.cache import CLAIM_ANNOTATION, DOWNLOAD_CONTAINER
from ctxfit.vocab.text import capped

from .ownership import Holder, holder_of

DEFAULT_CLASS_ANNOTATIONS = ("storageclass.kubernetes.io/is-default-class",
                             "storageclass.beta.kubernetes.io/is-default-class")
"""Annotations marking the default StorageClass (Kubernetes docs "Change the default StorageClass")."""

PROGRESS = re.compile(r"ctxfit-download: (?:complete )?(\d{1,20}) of (\d{1,20}) bytes", re.ASCII)
"""The download script's progress line (``ctxfit.render.cache.DOWNLOAD_SCRIPT``)."""


@dataclass(frozen=True)
class DownloadView:
    """The ``model-download`` init container of one pod.

    Attributes:
        state: ``waiting`` (not started / backing off), ``running``, ``succeeded``, ``failed`` (its last
            run exited non-zero and it has not succeeded since).
        started_at: when the current or last run started (RFC 3339).
        finished_at: when it succeeded, or when its last failed run ended.
        restart_count: runs the kubelet restarted.
        exit_code, reason, message: the last failed run's termination (message = log tail).
        claim: the pod's ``ctxfit.io/cache-claim`` annotation (which claim it was started with).
    """

    state: str
    started_at: str | None
    finished_at: str | None
    restart_count: int
    exit_code: int | None
    reason: str | None
    message: str
    claim: str | None


def _terminated(status: Mapping[str, Any], key: str) -> Mapping[str, Any]:
    return ((status.get(key) or {}).get("terminated")) or {}


CLAIM_NAME_MAX = 253
"""A claim's name is a DNS subdomain (at most 253 characters)."""


def download_view(pod: Mapping[str, Any]) -> DownloadView | None:
    """Fold a Pod's ``model-download`` init container status into a ``DownloadView`` (None: no such container)."""
    spec_names = [c.get("name") for c in (pod.get("spec") or {}).get("initContainers") or []]
    statuses = [s for s in (pod.get("status") or {}).get("initContainerStatuses") or []
                if s.get("name") == DOWNLOAD_CONTAINER]
    if DOWNLOAD_CONTAINER not in spec_names and not statuses:
        return None
    claim = ((pod.get("metadata") or {}).get("annotations") or {}).get(CLAIM_ANNOTATION)
    if claim is not None and len(str(claim)) > CLAIM_NAME_MAX:  # names no claim; kept bounded (a view per pod)
        claim = ""
    if not statuses:
        return DownloadView("waiting", None, None, 0, None, None, "", claim)
    status = statuses[0]
    now, last = _terminated(status, "state"), _terminated(status, "lastState")
    running = (status.get("state") or {}).get("running") or {}
    restarts = int(status.get("restartCount") or 0)
    if now and now.get("exitCode") == 0:
        return DownloadView("succeeded", now.get("startedAt"), now.get("finishedAt"), restarts, 0, now.get("reason"),
                            capped(now.get("message")), claim)
    if running:
        return DownloadView("running", running.get("startedAt"), None, restarts, None, None, "", claim)
    failed = now or last
    if failed:
        code = failed.get("exitCode")
        return DownloadView("failed", failed.get("startedAt"), failed.get("finishedAt"), restarts,
                            int(code) if isinstance(code, int) else None, failed.get("reason"),
                            capped(failed.get("message")), claim)
    return DownloadView("waiting", None, None, restarts, None, None, "", claim)


def parse_progress(log: str) -> tuple[int, int] | None:
    """``(bytes done, bytes total)`` from the last progress line of the download's log, None when absent."""
    matches = list(PROGRESS.finditer(log[-65536:]))
    if not matches:
        return None
    return int(matches[-1].group(1)), int(matches[-1].group(2))


@dataclass(frozen=True)
class ClaimView:
    """An existing PersistentVolumeClaim: its requested size (bytes), phase, class and capacity; ``holder``:
    whose it is (``ownership``; None: not known, e.g. the claim this process just created from a rendering)."""

    name: str
    request_bytes: int | None
    phase: str | None
    storage_class: str | None
    capacity_bytes: int | None
    holder: Holder | None = None


def _bytes(value: object) -> int | None:
    try:
        return quantity_to_bytes(str(value)) if value is not None else None
    except ValueError:
        return None


def claim_view(claim: Mapping[str, Any] | None) -> ClaimView | None:
    """Fold a PVC (dict) into a ``ClaimView``; None stays None."""
    if claim is None:
        return None
    spec, status = claim.get("spec") or {}, claim.get("status") or {}
    return ClaimView(
        name=str((claim.get("metadata") or {}).get("name", "")),
        request_bytes=_bytes(((spec.get("resources") or {}).get("requests") or {}).get("storage")),
        phase=status.get("phase"),
        storage_class=spec.get("storageClassName"),
        capacity_bytes=_bytes((status.get("capacity") or {}).get("storage")),
        holder=holder_of(claim),
    )


@dataclass(frozen=True)
class StorageView:
    """The cluster's StorageClasses as far as the cache needs them.

    Attributes:
        default_class: name of the default StorageClass, None when there is none.
        expandable: class name -> ``allowVolumeExpansion``.
    """

    default_class: str | None
    expandable: Mapping[str, bool]

    def can_expand(self, class_name: str | None) -> bool:
        """Whether a claim of ``class_name`` (None: the default class) may be expanded in place."""
        name = class_name or self.default_class
        return bool(name and self.expandable.get(name, False))


def storage_view(classes: list[Mapping[str, Any]]) -> StorageView:
    """Fold StorageClasses (dicts) into a ``StorageView``."""
    default = None
    expandable: dict[str, bool] = {}
    for item in sorted(classes, key=lambda c: str((c.get("metadata") or {}).get("name", ""))):
        meta = item.get("metadata") or {}
        name = str(meta.get("name", ""))
        expandable[name] = bool(item.get("allowVolumeExpansion"))
        if any((meta.get("annotations") or {}).get(a) == "true" for a in DEFAULT_CLASS_ANNOTATIONS):
            default = default or name
    return StorageView(default, expandable)
