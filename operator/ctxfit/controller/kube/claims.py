"""API calls for the weights cache: StorageClasses, the cache's PersistentVolumeClaim (read, create, expand,
retention, delete; only the server's own claim is ever written: ``guarded``). Raw JSON over ``Kube.rest``
(``controller/kube/rest.py``); errors other than the expected 404/409 propagate to ``reconcile``, which retries. Kept
on ``Runtime.claims`` (None: no cache I/O, e.g. in tests with a fake ``Kube``; servers are then rendered without
a cache).
"""

from __future__ import annotations

import threading
import time
from typing import Any

from kubernetes.client.exceptions import ApiException

from ctxfit.api import quantity_to_bytes
from ctxfit.render.labels import OWNER_UID_ANNOTATION

from ..views.cache import ClaimView, StorageView, claim_view, storage_view
from ..views.ownership import holder_of, server_uid_of
from .answers import conflict
from .guarded import check, patch_owned
from .objects import delete_if_owned, pointer
from .protocol import KubeClient
from .rest import CLAIMS, JSON_PATCH, STORAGE_CLASSES

STORAGE_CLASS_TTL_SECONDS = 30.0
"""StorageClasses change rarely: one list per this many seconds serves every reconcile."""
CREATED_MEMORY_SECONDS = 60.0
"""How long a claim this process created is remembered for the passes before its server's status records
it (a fresh plan's later passes would otherwise create it again and get a 409)."""


class ClaimsApi:
    """StorageClass and PVC calls over one ``Kube`` (thread-safe; the StorageClass list is cached and read by
    one thread at a time: a burst of reconciles shares one list)."""

    def __init__(self, kube: KubeClient) -> None:
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
        """Create the claim, or bring the server's existing claim to the rendering: its request grown to the
        rendered size (never shrunk: Kubernetes refuses that), its ownerReference added or removed as
        ``retain`` says, the ``ctxfit.io/owner-uid`` annotation kept. A claim of that name that is not the
        server's is never written (``guarded``); one that is, found on create (409), is kept as it is: the next
        pass reads it and grows it if it is smaller.

        Raises:
            guarded.Foreign: a claim of that name exists and is not the server's.
            ApiException: any other refusal (e.g. 403: its StorageClass does not allow expansion).
        """
        meta = claim["metadata"]
        namespace, name = meta["namespace"], meta["name"]
        owner = server_uid_of(claim)
        size = claim["spec"]["resources"]["requests"]["storage"]

        def read() -> dict[str, Any] | None:
            return self.rest.read(CLAIMS, namespace, name)

        if not exists:
            try:
                self.rest.call("POST", CLAIMS, namespace, body=claim)
            except ApiException as exc:
                if not conflict(exc):
                    raise
                check("PersistentVolumeClaim", name, read(), owner)  # Foreign when not the server's
                return  # not remembered: the next pass reads it (its size may differ)
            view = ClaimView(name, quantity_to_bytes(str(size)), None, claim["spec"].get("storageClassName"), None,
                             holder_of(claim))
            with self._lock:
                self._created[(namespace, name)] = (view, time.monotonic())
            return
        live = read()
        if live is None:
            self.apply_claim(claim, exists=False)
            return

        def send(patch: list[dict[str, Any]]) -> None:
            self.rest.call("PATCH", CLAIMS, namespace, name, body=patch, content_type=JSON_PATCH)

        patch_owned("PersistentVolumeClaim", name, owner, read, send, claim_ops(claim, live), live=live)

    def delete_claim(self, namespace: str, name: str, owner: str) -> None:
        """Delete the server's replaced claim (Kubernetes keeps it until no pod uses it), with its uid as a
        precondition; absent is fine. Raises ``guarded.Foreign`` when it is not the server's (uid ``owner``)."""
        delete_if_owned(self.rest, CLAIMS, namespace, name, owner)


def claim_ops(claim: dict[str, Any], live: dict[str, Any]) -> list[dict[str, Any]]:
    """JSON-patch operations that bring the server's ``live`` claim to the rendered ``claim``: a larger request,
    the owner annotation, and the ownerReference present exactly when the rendering has one (``retain``)."""
    ops: list[dict[str, Any]] = []
    want = claim["spec"]["resources"]["requests"]["storage"]
    have = _claim_request(live)
    if have is None or have < quantity_to_bytes(str(want)):
        ops.append({"op": "add", "path": "/spec/resources/requests/storage", "value": want})
    meta, live_meta = claim["metadata"], live.get("metadata") or {}
    marker = (meta.get("annotations") or {}).get(OWNER_UID_ANNOTATION)
    if marker is not None and (live_meta.get("annotations") or {}).get(OWNER_UID_ANNOTATION) != marker:
        if live_meta.get("annotations"):
            ops.append({"op": "add", "path": f"/metadata/annotations/{pointer(OWNER_UID_ANNOTATION)}",
                        "value": marker})
        else:
            ops.append({"op": "add", "path": "/metadata/annotations", "value": {OWNER_UID_ANNOTATION: marker}})
    owner = server_uid_of(claim)
    ours = [i for i, ref in enumerate(live_meta.get("ownerReferences") or []) if ref.get("uid") == owner]
    wanted = meta.get("ownerReferences") or []
    if wanted and not ours:
        if live_meta.get("ownerReferences"):
            ops.append({"op": "add", "path": "/metadata/ownerReferences/-", "value": wanted[0]})
        else:
            ops.append({"op": "add", "path": "/metadata/ownerReferences", "value": wanted})
    elif not wanted:
        ops += [{"op": "remove", "path": f"/metadata/ownerReferences/{i}"} for i in reversed(ours)]
    return ops


def _claim_request(claim: dict[str, Any]) -> int | None:
    view = claim_view(claim)
    return view.request_bytes if view is not None else None
