"""The operator's Kubernetes I/O: a small wrapper over the official client (sync; run in worker threads).

Every write the operator does goes through here, behind the ownership guard; raw JSON, never reads Secrets.
What it writes and reads: docs/design/ownership.md.
"""

from __future__ import annotations

import contextlib
import json
import uuid
from datetime import UTC, datetime
from typing import Any

from kubernetes import client, config
from kubernetes.client.exceptions import ApiException

from ctxfit.api import API_GROUP, API_VERSION, KIND
from ctxfit.vocab.text import clean_text

from ..views.workloads import ServiceView, service_view
from .answers import conflict
from .objects import create_or_replace, replace_ops, scale_to_zero
from .rest import (
    DEPLOYMENTS,
    EVENTS,
    POD_LOG,
    SERVERS,
    SERVERS_STATUS,
    SERVICES,
    Observe,
    Rest,
)
from .rest import Conflict as Conflict  # re-exported: the unit tests' fakes import it from here

LOG_TAIL_BYTES = 256 * 1024
"""Bytes of a log tail kept (diagnosis reads the last lines; the classifier needs far less)."""
EVENT_LIST_ITEMS = 100
EVENT_LIST_BYTES = 1024 * 1024
EVENT_MESSAGE_BYTES = 2048
"""A failed pod's Events: at most this many asked, this many bytes read, this much of each message kept."""
COMPONENT = "ctxfit-operator"


def service_port(service: dict[str, Any]) -> int | None:
    """The first port of a Service (dict), None when it has none."""
    ports = (service.get("spec") or {}).get("ports") or []
    return int(ports[0]["port"]) if ports and "port" in ports[0] else None


def load_api_client(pool_size: int = 32) -> client.ApiClient:
    """An ApiClient from the in-cluster config, else ``$KUBECONFIG``/~/.kube/config."""
    configuration = client.Configuration()
    try:
        config.load_incluster_config(client_configuration=configuration)  # type: ignore[no-untyped-call]
    except config.ConfigException:
        config.load_kube_config(client_configuration=configuration)  # type: ignore[no-untyped-call]
    configuration.connection_pool_maxsize = pool_size
    return client.ApiClient(configuration)


class Kube:
    """Typed helpers over one ``ApiClient`` (thread-safe for concurrent calls): every request goes through ``rest``
    (raw JSON, ``controller/kube/rest.py``); the generated API classes are never built. ``KubeClient``
    (``protocol.py``) is what the reconcile uses of it.
    """

    def __init__(self, api_client: client.ApiClient, instance: str = "", observe: Observe | None = None) -> None:
        self.api_client = api_client
        self.rest = Rest(api_client, observe)
        self.instance = instance or uuid.uuid4().hex[:8]

    def get_server(self, namespace: str, name: str) -> dict[str, Any] | None:
        """The InferenceServer as a dict, None when gone."""
        return self.rest.read(SERVERS, namespace, name)

    def replace_status(self, body: dict[str, Any], status: dict[str, Any]) -> dict[str, Any]:
        """PUT status with the read ``resourceVersion`` (compare-and-swap). Raises ``Conflict`` on 409."""
        meta = body["metadata"]
        new = {"apiVersion": body["apiVersion"], "kind": body["kind"], "metadata": meta,
               "spec": body.get("spec", {}), "status": status}
        try:
            return self.rest.call_json("PUT", SERVERS_STATUS, meta["namespace"], meta["name"], body=new)
        except ApiException as exc:
            if conflict(exc):
                raise Conflict(f"{meta['namespace']}/{meta['name']} changed") from exc
            raise

    def get_deployment(self, namespace: str, name: str) -> dict[str, Any] | None:
        """The Deployment as a plain dict (camelCase), None when absent."""
        return self.rest.read(DEPLOYMENTS, namespace, name)

    def service_port(self, namespace: str, name: str) -> ServiceView | None:
        """Service ``name`` as a ``ServiceView`` (its port when it is the one ctxfit renders, and whose it is),
        None when it does not exist."""
        service = self.rest.read(SERVICES, namespace, name)
        return service_view(service, name) if service is not None else None

    def apply(self, obj: dict[str, Any], *, exists: bool, via: tuple[str, ...] = ()) -> None:
        """Create or replace a Deployment, or create a Service, as rendered, when the object is the server's.

        A Deployment is created (POST) when absent; otherwise a JSON patch replaces its whole ``spec`` and
        sets ctxfit's labels/annotations, so a field dropped from the rendering (e.g. a pod label removed
        from ``spec.pod``) disappears; both cost the API server about a third of a server-side apply. A
        Service is created, or its type, selector and ports replaced by a JSON patch (a PUT would have to
        carry the allocated clusterIP; a merge patch could not drop a selector key added by hand).
        A stale ``exists`` is corrected by the 409/404 answer. An existing object is read first and patched
        only when it names the server (the uid in the rendered ownerReference), behind ``test`` operations
        (``guarded``). ``via``: uids of the server's own objects whose controlled children count as its own (a
        multi-node server's Service is the headless Service its LeaderWorkerSet's controller created).

        Raises:
            ownership.Foreign: an object of that name exists and is not the server's (nothing written).
            ApiException: any other refusal.
        """
        kind = obj["kind"]
        if kind == "Service":  # each call names its resource (tests/unit/chart/test_chart_rbac.py reads them)
            ops = [op for op in replace_ops(obj) if op["path"].startswith("/metadata/labels/")]
            ops += [{"op": "add", "path": f"/spec/{key}", "value": obj["spec"][key]}  # add: also where it is
                    for key in ("type", "selector", "ports")]  # missing (a headless Service has no ports)
            create_or_replace(self.rest, SERVICES, obj, exists=exists, ops=ops, via=via)
        elif kind == "Deployment":
            create_or_replace(self.rest, DEPLOYMENTS, obj, exists=exists, via=via)
        else:
            raise ValueError(f"cannot apply kind {kind}")

    def scale_to_zero(self, namespace: str, name: str, owner: str) -> None:
        """Set the server's Deployment's replicas to 0 (GPUs released): a guarded JSON patch of ``spec.replicas``
        (``guarded``; the scale subresource carries no ownerReferences to test). Absent is fine.

        Raises:
            ownership.Foreign: the Deployment of that name is not the server's (uid ``owner``).
        """
        scale_to_zero(self.rest, DEPLOYMENTS, namespace, name, owner)

    def pod_events(self, namespace: str, pod: str, limit: int = 20) -> list[str]:
        """Messages of the pod's Events (e.g. probe failures), newest last, each at most ``EVENT_MESSAGE_BYTES``;
        [] when unreadable or when the list is over ``EVENT_LIST_BYTES`` (at most ``EVENT_LIST_ITEMS`` asked)."""
        try:
            raw = self.rest.call("GET", EVENTS, namespace, query={
                "fieldSelector": f"involvedObject.kind=Pod,involvedObject.name={pod}", "limit": EVENT_LIST_ITEMS},
                max_bytes=EVENT_LIST_BYTES + 1)
            events = json.loads(raw) if len(raw) <= EVENT_LIST_BYTES else {}
        except (ApiException, ValueError):
            return []
        items = sorted(events.get("items") or [],
                       key=lambda e: str(e.get("lastTimestamp") or e.get("eventTime") or ""))
        return [f"{e.get('reason')}: {str(e['message'])[:EVENT_MESSAGE_BYTES]}" for e in items[-limit:]
                if e.get("message")]

    def _log(self, namespace: str, pod: str, query: dict[str, Any], max_bytes: int, keep: str) -> str | None:
        try:
            data = self.rest.call("GET", POD_LOG, namespace, pod, query=query, accept="*/*", timeout=10,
                                  max_bytes=max_bytes, keep=keep)
            return data.decode("utf-8", errors="replace")
        except Exception:  # noqa: BLE001 - logs are best effort: no kubelet, rotated, permission, timeout
            return None

    def log_tail(self, namespace: str, pod: str, container: str, *, previous: bool, lines: int) -> str:
        """The container's log tail (``previous``: the crashed instance): ``lines`` lines and at most
        ``LOG_TAIL_BYTES`` (the end is kept: a crash's last words); "" when unavailable."""
        return self._log(namespace, pod, {"container": container, "previous": "true" if previous else "false",
                                          "tailLines": lines}, LOG_TAIL_BYTES, "tail") or ""

    def log_head(self, namespace: str, pod: str, container: str, *, limit_bytes: int) -> str | None:
        """The first ``limit_bytes`` of the container's current log (start-up lines); None when it could not be
        read (no kubelet, a timeout, no permission): the caller tells that apart from a log without the lines."""
        return self._log(namespace, pod, {"container": container, "limitBytes": limit_bytes}, limit_bytes, "head")

    def post_event(self, server: dict[str, Any], type_: str, reason: str, message: str) -> None:
        """Post a core/v1 Event on the InferenceServer (best effort: failures are swallowed)."""
        meta = server["metadata"]
        self.post_object_event({"apiVersion": f"{API_GROUP}/{API_VERSION}", "kind": KIND, "name": meta["name"],
                                "namespace": meta["namespace"], "uid": meta.get("uid"),
                                "resourceVersion": meta.get("resourceVersion")}, type_, reason, message)

    def post_object_event(self, involved: dict[str, Any], type_: str, reason: str, message: str) -> None:
        """Post a core/v1 Event on ``involved`` (an ObjectReference: apiVersion, kind, name, namespace, uid) in its
        namespace (best effort: failures are swallowed)."""
        now = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        body = {
            "apiVersion": "v1", "kind": "Event",
            "metadata": {"generateName": f"{involved['name']}.", "namespace": involved["namespace"]},
            "involvedObject": involved,
            "reason": reason, "message": clean_text(message)[:1024], "type": type_, "count": 1,
            "firstTimestamp": now, "lastTimestamp": now, "source": {"component": COMPONENT},
            "reportingComponent": COMPONENT, "reportingInstance": self.instance,
        }
        with contextlib.suppress(ApiException):
            self.rest.call("POST", EVENTS, involved["namespace"], body=body)
