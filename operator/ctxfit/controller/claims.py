"""API calls for the weights cache: StorageClasses, the cache's PersistentVolumeClaim (read, create,
expand, delete). Thin wrappers over ``Kube``'s client; errors other than the expected 404/409 propagate
to ``reconcile``, which retries. Kept on ``Runtime.claims`` (None: no cache I/O, e.g. in tests with a
fake ``Kube``; servers are then rendered without a cache).
"""

from __future__ import annotations

import threading
import time
from typing import Any, cast

from kubernetes import client
from kubernetes.client.exceptions import ApiException

from .cache_view import ClaimView, StorageView, claim_view, storage_view
from .kube import MERGE_PATCH, Kube, _json, _release

STORAGE_CLASS_TTL_SECONDS = 30.0
"""StorageClasses change rarely: one list per this many seconds serves every reconcile."""


class ClaimsApi:
    """StorageClass and PVC calls over one ``Kube`` (thread-safe; the StorageClass list is cached)."""

    def __init__(self, kube: Kube) -> None:
        self.core = kube.core
        self.api_client = kube.api_client
        self._view: StorageView | None = None
        self._read_at = 0.0
        self._lock = threading.Lock()

    def storage(self) -> StorageView | None:
        """The cluster's StorageClasses (cached ``STORAGE_CLASS_TTL_SECONDS``); the last view (or None) when
        they cannot be read."""
        with self._lock:
            if self._view is not None and time.monotonic() - self._read_at < STORAGE_CLASS_TTL_SECONDS:
                return self._view
        api = client.StorageV1Api(self.api_client)
        try:
            listed = _json(api.list_storage_class(_preload_content=False))
        except ApiException:
            return self._view
        view = storage_view(list(listed.get("items") or []))
        with self._lock:
            self._view, self._read_at = view, time.monotonic()
        return view

    def get_claim(self, namespace: str, name: str) -> ClaimView | None:
        """The claim, None when absent."""
        try:
            rsp = self.core.read_namespaced_persistent_volume_claim(name, namespace, _preload_content=False)
        except ApiException as exc:
            if exc.status == 404:
                return None
            raise
        return claim_view(_json(rsp))

    def apply_claim(self, claim: dict[str, Any], *, exists: bool) -> None:
        """Create the claim (one that already exists is kept: the next pass reads it and expands it if it is
        smaller), or expand an existing one to the rendered request (a merge patch of the request)."""
        meta = claim["metadata"]
        if not exists:
            try:
                _release(self.core.create_namespaced_persistent_volume_claim(
                    meta["namespace"], cast(Any, claim), _preload_content=False))
            except ApiException as exc:
                if exc.status != 409:
                    raise
            return
        size = claim["spec"]["resources"]["requests"]["storage"]
        patch = {"spec": {"resources": {"requests": {"storage": size}}}}
        _release(self.core.patch_namespaced_persistent_volume_claim(
            meta["name"], meta["namespace"], patch, _content_type=MERGE_PATCH, _preload_content=False))

    def delete_claim(self, namespace: str, name: str) -> None:
        """Delete a replaced claim (Kubernetes keeps it until no pod uses it); absent is fine."""
        try:
            _release(self.core.delete_namespaced_persistent_volume_claim(name, namespace, _preload_content=False))
        except ApiException as exc:
            if exc.status != 404:
                raise
