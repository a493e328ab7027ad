"""API calls for the weights cache: StorageClasses, the operator's PersistentVolumeClaim (create, expand,
delete), the download's log. Thin wrappers over ``Kube``'s client; errors other than the expected 404/409
propagate to ``reconcile``, which retries.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field
from typing import Any, cast

from kubernetes import client
from kubernetes.client.exceptions import ApiException

from .cache_view import ClaimView, StorageView, claim_view, storage_view
from .kube import MERGE_PATCH, Kube, _json, _release

STORAGE_CLASS_TTL_SECONDS = 30.0
"""StorageClasses change rarely: one list per this many seconds serves every reconcile."""


@dataclass
class StorageCache:
    """The last ``StorageView`` and when it was read (shared by reconcile threads)."""

    view: StorageView | None = None
    read_at: float = 0.0
    lock: threading.Lock = field(default_factory=threading.Lock)


def storage(kube: Kube, cache: StorageCache) -> StorageView | None:
    """The cluster's StorageClasses (cached ``STORAGE_CLASS_TTL_SECONDS``); None when they cannot be read."""
    with cache.lock:
        if cache.view is not None and time.monotonic() - cache.read_at < STORAGE_CLASS_TTL_SECONDS:
            return cache.view
    api = client.StorageV1Api(kube.api_client)
    try:
        listed = _json(api.list_storage_class(_preload_content=False))
    except ApiException:
        return cache.view
    view = storage_view(list(listed.get("items") or []))
    with cache.lock:
        cache.view, cache.read_at = view, time.monotonic()
    return view


def get_claim(kube: Kube, namespace: str, name: str) -> ClaimView | None:
    """The claim, None when absent."""
    try:
        rsp = kube.core.read_namespaced_persistent_volume_claim(name, namespace, _preload_content=False)
    except ApiException as exc:
        if exc.status == 404:
            return None
        raise
    return claim_view(_json(rsp))


def apply_claim(kube: Kube, claim: dict[str, Any], *, exists: bool) -> None:
    """Create the claim, or expand an existing one to the rendered request (a merge patch of the request)."""
    meta = claim["metadata"]
    if not exists:
        try:
            _release(kube.core.create_namespaced_persistent_volume_claim(meta["namespace"], cast(Any, claim),
                                                                         _preload_content=False))
            return
        except ApiException as exc:
            if exc.status != 409:
                raise
    size = claim["spec"]["resources"]["requests"]["storage"]
    patch = {"spec": {"resources": {"requests": {"storage": size}}}}
    _release(kube.core.patch_namespaced_persistent_volume_claim(meta["name"], meta["namespace"], patch,
                                                                _content_type=MERGE_PATCH, _preload_content=False))


def delete_claim(kube: Kube, namespace: str, name: str) -> None:
    """Delete a replaced claim (Kubernetes keeps it until no pod uses it); absent is fine."""
    try:
        _release(kube.core.delete_namespaced_persistent_volume_claim(name, namespace, _preload_content=False))
    except ApiException as exc:
        if exc.status != 404:
            raise

