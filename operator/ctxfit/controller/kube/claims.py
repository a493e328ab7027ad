"""API calls for the weights cache: StorageClasses, the cache's PersistentVolumeClaim (read, create,
expand, delete). Raw JSON over ``Kube.rest`` (``controller/kube/rest.py``); errors other than the expected
404/409 propagate to ``reconcile``, which retries. Kept on ``Runtime.claims`` (None: no cache I/O, e.g. in
tests with a fake ``Kube``; servers are then rendered without a cache).
"""

from __future__ import annotations

import threading
import time
from typing import Any

from kubernetes.client.exceptions import ApiException

from ctxfit.api import quantity_to_bytes

from ..views.cache import ClaimView, StorageView, claim_view, storage_view
from .client import Kube
from .rest import CLAIMS, MERGE_PATCH, STORAGE_CLASSES

STORAGE_CLASS_TTL_SECONDS = 30.0
"""StorageClasses change rarely: one list per this many seconds serves every reconcile."""
CREATED_MEMORY_SECONDS = 60.0
"""How long a claim this process created is remembered for the passes before its server's status records
it (a fresh plan's later passes would otherwise create it again and get a 409)."""


class ClaimsApi:
    """StorageClass and PVC calls over one ``Kube`` (thread-safe; the StorageClass list is cached and read by
    one thread at a time: a burst of reconciles shares one list)."""

    def __init__(self, kube: Kube) -> None:
        self.rest = kube.rest
        self._view: StorageView | None = None
        self._read_at = 0.0
        self._lock = threading.Lock()
        self._refresh = threading.Lock()
        self._created: dict[tuple[str, str], tuple[ClaimView, float]] = {}
        self._pruned_at = 0.0

    def _fresh(self) -> StorageView | None:
        with self._lock:
            if self._view is not None and time.monotonic() - self._read_at < STORAGE_CLASS_TTL_SECONDS:
                return self._view
        return None

    def storage(self) -> StorageView | None:
        """The cluster's StorageClasses (cached ``STORAGE_CLASS_TTL_SECONDS``); the last view (or None) when
        they cannot be read."""
        view = self._fresh()
        if view is not None:
            return view
        with self._refresh:  # the others wait for this one's list instead of listing too
            view = self._fresh()
            if view is not None:
                return view
            try:
                listed = self.rest.call_json("GET", STORAGE_CLASSES)
            except ApiException:
                return self._view
            view = storage_view(list(listed.get("items") or []))
            with self._lock:
                self._view, self._read_at = view, time.monotonic()
            return view

    def get_claim(self, namespace: str, name: str) -> ClaimView | None:
        """The claim, None when absent."""
        return claim_view(self.rest.read(CLAIMS, namespace, name))

    def created(self, namespace: str, name: str) -> ClaimView | None:
        """The claim this process created in the last ``CREATED_MEMORY_SECONDS``, as
        rendered (phase and capacity unknown); None when there is none."""
        now = time.monotonic()
        with self._lock:
            if now - self._pruned_at > CREATED_MEMORY_SECONDS:  # at most once per period, not per call
                self._pruned_at = now
                for key in [k for k, (_, at) in self._created.items() if now - at > CREATED_MEMORY_SECONDS]:
                    del self._created[key]
            entry = self._created.get((namespace, name))
        return entry[0] if entry is not None and now - entry[1] <= CREATED_MEMORY_SECONDS else None

    def apply_claim(self, claim: dict[str, Any], *, exists: bool) -> None:
        """Create the claim (one that already exists is kept: the next pass reads it and expands it if it is
        smaller), or expand an existing one to the rendered request (a merge patch of the request)."""
        meta = claim["metadata"]
        size = claim["spec"]["resources"]["requests"]["storage"]
        if not exists:
            try:
                self.rest.call("POST", CLAIMS, meta["namespace"], body=claim)
            except ApiException as exc:
                if exc.status != 409:
                    raise
                return  # not remembered: the next pass reads it (its size may differ)
            view = ClaimView(meta["name"], quantity_to_bytes(str(size)), None,
                             claim["spec"].get("storageClassName"), None)
            with self._lock:
                self._created[(meta["namespace"], meta["name"])] = (view, time.monotonic())
            return
        self.rest.call("PATCH", CLAIMS, meta["namespace"], meta["name"],
                       body={"spec": {"resources": {"requests": {"storage": size}}}}, content_type=MERGE_PATCH)

    def delete_claim(self, namespace: str, name: str) -> None:
        """Delete a replaced claim (Kubernetes keeps it until no pod uses it); absent is fine."""
        try:
            self.rest.call("DELETE", CLAIMS, namespace, name)
        except ApiException as exc:
            if exc.status != 404:
                raise
