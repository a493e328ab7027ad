"""The operator's Kubernetes I/O: a small wrapper over the official client (sync; run in worker threads).

Every write the operator does goes through here: the InferenceServer status (replace on the status
subresource with ``resourceVersion``, i.e. compare-and-swap), create/replace of the Deployment and
create of the Service (field manager ``ctxfit``), scaling to zero, Events. Reads: the InferenceServer,
its Deployment, a failed pod's Events and previous log tail. Responses are read as raw JSON
(``_preload_content=False``): no model (de)serialization on the hot path. Never reads Secrets.
"""

from __future__ import annotations

import json
import uuid
from datetime import UTC, datetime
from typing import Any, cast

from kubernetes import client, config
from kubernetes.client.exceptions import ApiException

from ctxfit.api import API_GROUP, API_VERSION, KIND, PLURAL
from ctxfit.vocab.text import clean_text

FIELD_MANAGER = "ctxfit"
COMPONENT = "ctxfit-operator"
MERGE_PATCH = "application/merge-patch+json"
WORKLOAD_KINDS = frozenset({"Deployment", "LeaderWorkerSet"})
"""Kinds whose ``spec.replicas`` an autoscaler may own."""


def _pointer(key: str) -> str:
    return key.replace("~", "~0").replace("/", "~1")


def _replace_ops(obj: dict[str, Any]) -> list[dict[str, Any]]:
    """RFC 6902 ops: replace ``/spec`` whole; add each of ctxfit's metadata labels and annotations.

    A workload rendered without ``spec.replicas`` (the autoscaler owns the count, ``controller/autoscaling.py``)
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
    """The JSON body of a raw (``_preload_content=False``) response: no model (de)serialization.
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
    """Typed helpers over one ``ApiClient`` (thread-safe for concurrent calls)."""

    def __init__(self, api_client: client.ApiClient, instance: str = "") -> None:
        self.api_client = api_client
        self.core = client.CoreV1Api(api_client)
        self.apps = client.AppsV1Api(api_client)
        self.custom = client.CustomObjectsApi(api_client)
        self.coordination = client.CoordinationV1Api(api_client)
        self.instance = instance or uuid.uuid4().hex[:8]

    def get_server(self, namespace: str, name: str) -> dict[str, Any] | None:
        """The InferenceServer as a dict, None when gone."""
        try:
            rsp = self.custom.get_namespaced_custom_object(API_GROUP, API_VERSION, namespace, PLURAL, name,
                                                           _preload_content=False)
        except ApiException as exc:
            if exc.status == 404:
                return None
            raise
        return _json(rsp)

    def replace_status(self, body: dict[str, Any], status: dict[str, Any]) -> dict[str, Any]:
        """PUT status with the read ``resourceVersion`` (compare-and-swap). Raises ``Conflict`` on 409."""
        meta = body["metadata"]
        new = {"apiVersion": body["apiVersion"], "kind": body["kind"], "metadata": meta,
               "spec": body.get("spec", {}), "status": status}
        try:
            rsp = self.custom.replace_namespaced_custom_object_status(
                API_GROUP, API_VERSION, meta["namespace"], PLURAL, meta["name"], new, _preload_content=False)
        except ApiException as exc:
            if exc.status == 409:
                raise Conflict(f"{meta['namespace']}/{meta['name']} changed") from exc
            raise
        return _json(rsp)

    def get_deployment(self, namespace: str, name: str) -> dict[str, Any] | None:
        """The Deployment as a plain dict (camelCase), None when absent."""
        try:
            rsp = self.apps.read_namespaced_deployment(name, namespace, _preload_content=False)
        except ApiException as exc:
            if exc.status == 404:
                return None
            raise
        return _json(rsp)

    def service_port(self, namespace: str, name: str) -> int | None:
        """The first port of Service ``name``, None when it does not exist."""
        try:
            service = _json(self.core.read_namespaced_service(name, namespace, _preload_content=False))
        except ApiException as exc:
            if exc.status == 404:
                return None
            raise
        return service_port(service)

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
        raw: dict[str, Any] = {"field_manager": FIELD_MANAGER, "_preload_content": False}
        if kind == "Service":
            if not exists:
                try:
                    _release(self.core.create_namespaced_service(namespace, cast(Any, obj), **raw))
                    return
                except ApiException as exc:
                    if exc.status != 409:
                        raise
            ops = [op for op in _replace_ops(obj) if op["path"].startswith("/metadata/labels/")]
            ops += [{"op": "replace", "path": f"/spec/{key}", "value": obj["spec"][key]}
                    for key in ("type", "selector", "ports")]
            _release(self.core.patch_namespaced_service(name, namespace, cast(Any, ops), **raw))
            return
        if kind != "Deployment":
            raise ValueError(f"cannot apply kind {kind}")
        if not exists:
            try:
                _release(self.apps.create_namespaced_deployment(namespace, cast(Any, obj), **raw))
                return
            except ApiException as exc:
                if exc.status != 409:
                    raise
        try:
            _release(self.apps.patch_namespaced_deployment(name, namespace, cast(Any, _replace_ops(obj)), **raw))
        except ApiException as exc:
            if exc.status != 404:
                raise
            _release(self.apps.create_namespaced_deployment(namespace, cast(Any, obj), **raw))

    def scale_to_zero(self, namespace: str, name: str) -> None:
        """Set the Deployment's replicas to 0 (GPUs released); absent Deployment is fine."""
        try:
            _release(self.apps.patch_namespaced_deployment_scale(name, namespace, {"spec": {"replicas": 0}},
                                                                 _preload_content=False))
        except ApiException as exc:
            if exc.status != 404:
                raise

    def pod_events(self, namespace: str, pod: str, limit: int = 20) -> list[str]:
        """Messages of the pod's Events (e.g. probe failures), newest last; [] when unreadable."""
        try:
            events = self.core.list_namespaced_event(
                namespace, field_selector=f"involvedObject.kind=Pod,involvedObject.name={pod}")
        except ApiException:
            return []
        items = sorted(events.items, key=lambda e: str(e.last_timestamp or e.event_time or ""))
        return [f"{e.reason}: {e.message}" for e in items[-limit:] if e.message]

    def log_tail(self, namespace: str, pod: str, container: str, *, previous: bool, lines: int) -> str:
        """The container's log tail (``previous``: the crashed instance); "" when unavailable."""
        try:
            text: str = self.core.read_namespaced_pod_log(pod, namespace, container=container, previous=previous,
                                                          tail_lines=lines, _request_timeout=10)
            return text
        except Exception:  # noqa: BLE001 - logs are best effort: no kubelet, rotated, permission
            return ""

    def log_head(self, namespace: str, pod: str, container: str, *, limit_bytes: int) -> str:
        """The first ``limit_bytes`` of the container's current log (start-up lines); "" when unavailable."""
        try:
            text: str = self.core.read_namespaced_pod_log(pod, namespace, container=container,
                                                          limit_bytes=limit_bytes, _request_timeout=10)
            return text
        except Exception:  # noqa: BLE001 - logs are best effort: no kubelet, rotated, permission
            return ""

    def post_event(self, server: dict[str, Any], type_: str, reason: str, message: str) -> None:
        """Post a core/v1 Event on the InferenceServer (best effort: failures are swallowed)."""
        meta = server["metadata"]
        now = datetime.now(UTC)
        body = client.CoreV1Event(
            metadata=client.V1ObjectMeta(generate_name=f"{meta['name']}.", namespace=meta["namespace"]),
            involved_object=client.V1ObjectReference(
                api_version=f"{API_GROUP}/{API_VERSION}", kind=KIND, name=meta["name"],
                namespace=meta["namespace"], uid=meta.get("uid"), resource_version=meta.get("resourceVersion")),
            reason=reason, message=clean_text(message)[:1024], type=type_, count=1,
            first_timestamp=now, last_timestamp=now,
            source=client.V1EventSource(component=COMPONENT),
            reporting_component=COMPONENT, reporting_instance=self.instance,
        )
        try:
            _release(self.core.create_namespaced_event(meta["namespace"], body, _preload_content=False))
        except ApiException:
            pass
