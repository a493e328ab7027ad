"""The operator's Kubernetes I/O: a small wrapper over the official client (sync; run in worker threads).

Every write the operator does goes through here: the InferenceServer status (replace on the status
subresource with ``resourceVersion``, i.e. compare-and-swap), create/replace of the Deployment and
create of the Service (field manager ``ctxfit``), scaling to zero, Events. Reads: the InferenceServer,
its Deployment, a failed pod's Events and previous log tail. Requests and responses are raw JSON
(``controller/kube/rest.py``): no model validation or (de)serialization on the hot path. Never reads Secrets.
"""

from __future__ import annotations

import contextlib
import json
import uuid
from datetime import UTC, datetime
from functools import cached_property
from typing import Any, cast

from kubernetes import client, config
from kubernetes.client.exceptions import ApiException

from ctxfit.api import API_GROUP, API_VERSION, KIND
from ctxfit.vocab.text import clean_text

from .rest import (
    DEPLOYMENTS,
    DEPLOYMENTS_SCALE,
    EVENTS,
    JSON_PATCH,
    POD_LOG,
    SERVERS,
    SERVERS_STATUS,
    SERVICES,
    Observe,
    Rest,
)
from .rest import MERGE_PATCH as MERGE_PATCH  # re-exported: groupkube and claims import it from here

FIELD_MANAGER = "ctxfit"
COMPONENT = "ctxfit-operator"
WORKLOAD_KINDS = frozenset({"Deployment", "LeaderWorkerSet"})
"""Kinds whose ``spec.replicas`` an autoscaler may own."""


def _pointer(key: str) -> str:
    return key.replace("~", "~0").replace("/", "~1")


def _replace_ops(obj: dict[str, Any]) -> list[dict[str, Any]]:
    """RFC 6902 ops: replace ``/spec`` whole; add each of ctxfit's metadata labels and annotations.

    A workload rendered without ``spec.replicas`` (the autoscaler owns the count, ``converge/autoscaling.py``)
    gets one ``replace`` per other ``spec`` field instead, so the live ``replicas`` is never written (a whole
    ``spec`` without it would be defaulted back to 1 by the API server).
    """
    meta = obj["metadata"]
    spec = obj["spec"]
    if obj.get("kind") in WORKLOAD_KINDS and "replicas" not in spec:
        ops: list[dict[str, Any]] = [{"op": "add", "path": f"/spec/{_pointer(key)}", "value": value}
                                     for key, value in spec.items()]
    else:
        ops = [{"op": "replace", "path": "/spec", "value": spec}]
    for field in ("labels", "annotations"):
        for key, value in meta.get(field, {}).items():
            ops.append({"op": "add", "path": f"/metadata/{field}/{_pointer(key)}", "value": value})
    return ops


def service_port(service: dict[str, Any]) -> int | None:
    """The first port of a Service (dict), None when it has none."""
    ports = (service.get("spec") or {}).get("ports") or []
    return int(ports[0]["port"]) if ports and "port" in ports[0] else None


def _json(response: Any) -> dict[str, Any]:
    """The JSON body of a raw (``_preload_content=False``) response of a generated API call.
    The connection goes back to the pool (see ``_release``)."""
    try:
        return cast(dict[str, Any], json.loads(response.data))
    finally:
        response.release_conn()


def _release(response: Any) -> None:
    """Drain a raw response and return its connection to urllib3's pool. With ``_preload_content=False``
    urllib3 does not release the connection by itself, so every later request would open a new one and pay
    a TLS handshake (the largest CPU cost of a burst in bench/reconcile_bench.py before this)."""
    try:
        response.data  # noqa: B018 - reading the body drains it
    finally:
        response.release_conn()


class Conflict(Exception):
    """The object changed since it was read (HTTP 409): read again and retry."""


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
    """Typed helpers over one ``ApiClient`` (thread-safe for concurrent calls).

    The hot path (server, status, Deployment, Service, Events, scale, pod Events and logs) goes through
    ``rest`` (raw JSON, ``controller/kube/rest.py``). The generated API classes stay available as ``core``,
    ``apps``, ``custom`` and ``coordination`` for the rarer callers (leader election, LeaderWorkerSets); each
    is built, and its module imported, on first use.
    """

    def __init__(self, api_client: client.ApiClient, instance: str = "", observe: Observe | None = None) -> None:
        self.api_client = api_client
        self.rest = Rest(api_client, observe)
        self.instance = instance or uuid.uuid4().hex[:8]

    @cached_property
    def core(self) -> client.CoreV1Api:
        """The generated core/v1 API (imported on first use)."""
        return client.CoreV1Api(self.api_client)

    @cached_property
    def apps(self) -> client.AppsV1Api:
        """The generated apps/v1 API (imported on first use)."""
        return client.AppsV1Api(self.api_client)

    @cached_property
    def custom(self) -> client.CustomObjectsApi:
        """The generated custom-objects API (imported on first use)."""
        return client.CustomObjectsApi(self.api_client)

    @cached_property
    def coordination(self) -> client.CoordinationV1Api:
        """The generated coordination.k8s.io/v1 API (imported on first use)."""
        return client.CoordinationV1Api(self.api_client)

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
            if exc.status == 409:
                raise Conflict(f"{meta['namespace']}/{meta['name']} changed") from exc
            raise

    def get_deployment(self, namespace: str, name: str) -> dict[str, Any] | None:
        """The Deployment as a plain dict (camelCase), None when absent."""
        return self.rest.read(DEPLOYMENTS, namespace, name)

    def service_port(self, namespace: str, name: str) -> int | None:
        """The first port of Service ``name``, None when it does not exist."""
        service = self.rest.read(SERVICES, namespace, name)
        return service_port(service) if service is not None else None

    def apply(self, obj: dict[str, Any], *, exists: bool) -> None:
        """Create or replace a Deployment, or create a Service, as rendered (ctxfit owns these objects).

        A Deployment is created (POST) when absent; otherwise a JSON patch replaces its whole ``spec`` and
        sets ctxfit's labels/annotations, so a field dropped from the rendering (e.g. a pod label removed
        from ``spec.pod``) disappears; both cost the API server about a third of a server-side apply. A
        Service is created, or its type, selector and ports replaced by a JSON patch (a PUT would have to
        carry the allocated clusterIP; a merge patch could not drop a selector key added by hand).
        A stale ``exists`` is corrected by the 409/404 answer.
        """
        meta = obj["metadata"]
        name, namespace, kind = meta["name"], meta["namespace"], obj["kind"]
        manager = {"fieldManager": FIELD_MANAGER}
        if kind == "Service":
            if not exists:
                try:
                    self.rest.call("POST", SERVICES, namespace, query=manager, body=obj)
                    return
                except ApiException as exc:
                    if exc.status != 409:
                        raise
            ops = [op for op in _replace_ops(obj) if op["path"].startswith("/metadata/labels/")]
            ops += [{"op": "replace", "path": f"/spec/{key}", "value": obj["spec"][key]}
                    for key in ("type", "selector", "ports")]
            self.rest.call("PATCH", SERVICES, namespace, name, query=manager, body=ops, content_type=JSON_PATCH)
            return
        if kind != "Deployment":
            raise ValueError(f"cannot apply kind {kind}")
        if not exists:
            try:
                self.rest.call("POST", DEPLOYMENTS, namespace, query=manager, body=obj)
                return
            except ApiException as exc:
                if exc.status != 409:
                    raise
        try:
            self.rest.call("PATCH", DEPLOYMENTS, namespace, name, query=manager, body=_replace_ops(obj),
                           content_type=JSON_PATCH)
        except ApiException as exc:
            if exc.status != 404:
                raise
            self.rest.call("POST", DEPLOYMENTS, namespace, query=manager, body=obj)

    def scale_to_zero(self, namespace: str, name: str) -> None:
        """Set the Deployment's replicas to 0 (GPUs released); absent Deployment is fine."""
        try:
            self.rest.call("PATCH", DEPLOYMENTS_SCALE, namespace, name, body={"spec": {"replicas": 0}},
                           content_type=MERGE_PATCH)
        except ApiException as exc:
            if exc.status != 404:
                raise

    def pod_events(self, namespace: str, pod: str, limit: int = 20) -> list[str]:
        """Messages of the pod's Events (e.g. probe failures), newest last; [] when unreadable."""
        try:
            events = self.rest.call_json("GET", EVENTS, namespace, query={
                "fieldSelector": f"involvedObject.kind=Pod,involvedObject.name={pod}"})
        except ApiException:
            return []
        items = sorted(events.get("items") or [],
                       key=lambda e: str(e.get("lastTimestamp") or e.get("eventTime") or ""))
        return [f"{e.get('reason')}: {e['message']}" for e in items[-limit:] if e.get("message")]

    def _log(self, namespace: str, pod: str, query: dict[str, Any]) -> str:
        try:
            data = self.rest.call("GET", POD_LOG, namespace, pod, query=query, accept="*/*", timeout=10)
            return data.decode("utf-8", errors="replace")
        except Exception:  # noqa: BLE001 - logs are best effort: no kubelet, rotated, permission
            return ""

    def log_tail(self, namespace: str, pod: str, container: str, *, previous: bool, lines: int) -> str:
        """The container's log tail (``previous``: the crashed instance); "" when unavailable."""
        return self._log(namespace, pod, {"container": container, "previous": "true" if previous else "false",
                                          "tailLines": lines})

    def log_head(self, namespace: str, pod: str, container: str, *, limit_bytes: int) -> str:
        """The first ``limit_bytes`` of the container's current log (start-up lines); "" when unavailable."""
        return self._log(namespace, pod, {"container": container, "limitBytes": limit_bytes})

    def post_event(self, server: dict[str, Any], type_: str, reason: str, message: str) -> None:
        """Post a core/v1 Event on the InferenceServer (best effort: failures are swallowed)."""
        meta = server["metadata"]
        now = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        body = {
            "apiVersion": "v1", "kind": "Event",
            "metadata": {"generateName": f"{meta['name']}.", "namespace": meta["namespace"]},
            "involvedObject": {"apiVersion": f"{API_GROUP}/{API_VERSION}", "kind": KIND, "name": meta["name"],
                               "namespace": meta["namespace"], "uid": meta.get("uid"),
                               "resourceVersion": meta.get("resourceVersion")},
            "reason": reason, "message": clean_text(message)[:1024], "type": type_, "count": 1,
            "firstTimestamp": now, "lastTimestamp": now, "source": {"component": COMPONENT},
            "reportingComponent": COMPONENT, "reportingInstance": self.instance,
        }
        with contextlib.suppress(ApiException):
            self.rest.call("POST", EVENTS, meta["namespace"], body=body)
