"""Raw JSON requests to the API server over the official client's connection pool and credentials.

Skips the generated API classes (their validation cost most of the CPU per server); errors are the client's own
``ApiException``. Why and the figures: docs/design/io-performance.md.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any, cast
from urllib.parse import quote, urlencode

from kubernetes import client
from kubernetes.client.exceptions import ApiException

from ctxfit.api import API_GROUP, API_VERSION, PLURAL
from ctxfit.render.leaderworkerset import LWS_KIND, LWS_PLURAL
from ctxfit.render.scaledobject import SCALED_OBJECT_KIND, SCALED_OBJECT_PLURAL

from .answers import not_found, succeeded

JSON = "application/json"
JSON_PATCH = "application/json-patch+json"
USER_AGENT = "ctxfit-operator"

Observe = Callable[[str, str, int, float], None]
"""``observe(verb, resource, status code, seconds)`` after each request (0: no answer)."""


class Conflict(Exception):
    """The object changed since it was read (HTTP 409, or a failed JSON-patch ``test``): read again and retry."""


def resource_of(path: str) -> str:
    """The resource (and subresource) a path names, for metrics: ``/api/v1/namespaces/ns/pods/p/log`` ->
    ``pods/log``; ``/apis/apps/v1/namespaces/ns/deployments`` -> ``deployments``."""
    parts = [p for p in path.split("?")[0].split("/") if p]
    parts = parts[2:] if parts[:1] == ["api"] else parts[3:]  # drop /api/v1 or /apis/<group>/<version>
    if parts[:1] == ["namespaces"] and len(parts) > 2:
        parts = parts[2:]
    if not parts:
        return "namespaces" if path.rstrip("/").endswith("namespaces") else "-"
    return parts[0] + (f"/{parts[2]}" if len(parts) > 2 else "")


def path_of(*parts: str) -> str:
    """``/a/b/c`` from path segments, each percent-quoted (names are DNS labels; quoting is defence)."""
    return "/" + "/".join(quote(part, safe="") for part in parts)


@dataclass(frozen=True)
class Resource:
    """An API resource the operator calls, declared once in the table below (``tests/unit/chart/test_chart_rbac.py``
    reads every ``Rest.call``/``Rest.read`` of the controller to check the chart's RBAC against them).

    Attributes:
        group: API group ("" for core/v1).
        version: API version.
        plural: resource name.
        subresource: e.g. ``status``, ``scale``, ``log`` ("" for none).
        namespaced: whether objects live in a namespace.
        kind: the kind of its objects, for messages and the ownership check ("" when not written as a child).
    """

    group: str
    version: str
    plural: str
    subresource: str = ""
    namespaced: bool = True
    kind: str = ""

    @property
    def rbac(self) -> str:
        """The resource as RBAC names it: ``plural`` or ``plural/subresource``."""
        return f"{self.plural}/{self.subresource}" if self.subresource else self.plural

    def path(self, namespace: str | None = None, name: str | None = None) -> str:
        """The collection (no ``name``) or object path; a subresource needs ``name``. Raises ``ValueError``
        when a namespaced resource gets no namespace or a subresource no name."""
        prefix = f"/apis/{self.group}/{self.version}" if self.group else f"/api/{self.version}"
        parts: list[str] = []
        if self.namespaced:
            if not namespace:
                raise ValueError(f"{self.plural} is namespaced: a namespace is required")
            parts += ["namespaces", namespace]
        parts.append(self.plural)
        if name:
            parts.append(name)
        if self.subresource:
            if not name:
                raise ValueError(f"{self.rbac} needs an object name")
            parts.append(self.subresource)
        return prefix + path_of(*parts)

    def collection(self, namespace: str | None) -> str:
        """The collection's path in ``namespace``, or across every namespace (None: for a namespaced resource the
        API server's cross-namespace collection, which lists and watches only)."""
        prefix = f"/apis/{self.group}/{self.version}" if self.group else f"/api/{self.version}"
        return prefix + path_of(*(["namespaces", namespace] if self.namespaced and namespace else []), self.plural)


READ_CHUNK_BYTES = 64 * 1024


def _bounded_read(response: Any, max_bytes: int, keep: str) -> bytes:
    """At most ``max_bytes`` of a streamed answer: its head (the rest is not read) or its tail (read through,
    keeping only the last ``max_bytes``)."""
    kept = bytearray()
    for chunk in response.stream(READ_CHUNK_BYTES, decode_content=True):
        kept += chunk
        if keep == "head" and len(kept) >= max_bytes:
            return bytes(kept[:max_bytes])
        if len(kept) > 2 * max_bytes:
            del kept[:len(kept) - max_bytes]
    return bytes(kept[-max_bytes:]) if keep == "tail" else bytes(kept[:max_bytes])


class Rest:
    """Thread-safe raw JSON calls over one ``ApiClient`` (its pool, TLS settings and credentials)."""

    def __init__(self, api_client: client.ApiClient, observe: Observe | None = None) -> None:
        self.configuration = api_client.configuration
        self.pool = api_client.rest_client.pool_manager
        self.host = str(self.configuration.host).rstrip("/")
        self.observe = observe

    def _headers(self, content_type: str | None, accept: str) -> dict[str, str]:
        headers = {"Accept": accept, "User-Agent": USER_AGENT}
        for setting in self.configuration.auth_settings().values():  # the bearer token, refreshed by its hook
            if setting.get("in") == "header" and setting.get("value"):
                headers[str(setting["key"])] = str(setting["value"])
        if content_type:
            headers["Content-Type"] = content_type
        return headers

    def request(self, method: str, path: str, *, query: dict[str, Any] | None = None, body: Any = None,
                content_type: str = JSON, accept: str = JSON, timeout: float | None = None,
                max_bytes: int | None = None, keep: str = "head") -> bytes:
        """Send one request; returns the response body. ``body`` (dict/list) is sent as JSON.

        ``max_bytes``: read the answer in chunks and keep at most this many bytes of it, its first (``keep``
        "head") or its last (``keep`` "tail": a log's end); memory stays bounded whatever the answer's size
        (a crashing engine's log can be one 50 MB line). None: the whole answer (API objects, bounded by etcd).

        Raises ``ApiException`` for a non-2xx answer (``status``, ``reason``, ``body``); connection errors
        propagate from urllib3 as with the generated client.
        """
        url = self.host + path
        if query:
            url += "?" + urlencode({k: v for k, v in query.items() if v is not None})
        data = None if body is None else json.dumps(body, separators=(",", ":")).encode()
        began = time.monotonic()
        code = 0
        try:
            response = self.pool.request(method, url, body=data, preload_content=False, timeout=timeout,
                                         headers=self._headers(content_type if data is not None else None, accept))
            try:
                payload: bytes = response.data if max_bytes is None or not succeeded(response.status) \
                    else _bounded_read(response, max_bytes, keep)
            finally:
                response.release_conn()
            code = response.status
        finally:
            if self.observe is not None:
                self.observe(method, resource_of(path), code, time.monotonic() - began)
        if not succeeded(response.status):
            raise ApiException(http_resp=response)
        return payload

    def json(self, method: str, path: str, **kwargs: Any) -> dict[str, Any]:
        """``request`` and parse the JSON answer (an object)."""
        return cast(dict[str, Any], json.loads(self.request(method, path, **kwargs)))

    def get(self, path: str, **kwargs: Any) -> dict[str, Any] | None:
        """GET an object as a dict; None when it does not exist (404)."""
        try:
            return self.json("GET", path, **kwargs)
        except ApiException as exc:
            if not_found(exc):
                return None
            raise

    def call(self, verb: str, resource: Resource, namespace: str | None = None, name: str | None = None,
             **kwargs: Any) -> bytes:
        """``request`` on ``resource``'s collection or object (the controller's way to call the API: the RBAC
        test reads these calls). Raises as ``request``."""
        return self.request(verb, resource.path(namespace, name), **kwargs)

    def call_json(self, verb: str, resource: Resource, namespace: str | None = None, name: str | None = None,
                  **kwargs: Any) -> dict[str, Any]:
        """``call`` and parse the JSON answer (an object)."""
        return cast(dict[str, Any], json.loads(self.call(verb, resource, namespace, name, **kwargs)))

    def list(self, resource: Resource, namespace: str | None, *, query: dict[str, Any]) -> dict[str, Any]:
        """One page of ``resource``'s collection in ``namespace`` (None: every namespace) as a dict. Raises as
        ``request`` (404: the resource is not served)."""
        return self.json("GET", resource.collection(namespace), query=query)

    def watch(self, resource: Resource, namespace: str | None = None, *, query: dict[str, Any],
              timeout: float) -> Iterator[dict[str, Any]]:
        """The events of one watch of ``resource``'s collection in ``namespace`` (None: every namespace; ``query``
        gains ``watch=true``), one JSON object a
        line (``{"type": ..., "object": ...}``), until the API server ends it (its ``timeoutSeconds``) or no byte
        arrives for ``timeout`` seconds (urllib3's ``ReadTimeoutError``). The RBAC test maps this to list, watch.

        Raises ``ApiException`` for a non-2xx answer (404: the resource is not served, e.g. its CRD is absent)."""
        url = self.host + resource.collection(namespace) + "?" + urlencode({**query, "watch": "true"})
        response = self.pool.request("GET", url, preload_content=False, timeout=timeout,
                                     headers=self._headers(None, JSON))
        try:
            if not succeeded(response.status):
                raise ApiException(http_resp=response)  # reads the answer's body (the API server's Status)
            pending = b""
            for chunk in response.stream(READ_CHUNK_BYTES, decode_content=True):
                pending += chunk
                *lines, pending = pending.split(b"\n")
                for line in lines:
                    if line.strip():
                        yield cast(dict[str, Any], json.loads(line))
        finally:
            response.release_conn()

    def read(self, resource: Resource, namespace: str | None = None, name: str | None = None,
             **kwargs: Any) -> dict[str, Any] | None:
        """GET an object (or list a collection without ``name``) as a dict; None when it does not exist."""
        return self.get(resource.path(namespace, name), **kwargs)


# The resources the operator calls (``Rest.call``/``Rest.read``, and the helpers of ``objects.py`` given one of
# these); chart RBAC: charts/ctxfit/templates/rbac.yaml.
SERVERS = Resource(API_GROUP, API_VERSION, PLURAL)
SERVERS_STATUS = Resource(API_GROUP, API_VERSION, PLURAL, "status")
DEPLOYMENTS = Resource("apps", "v1", "deployments", kind="Deployment")
REPLICASETS = Resource("apps", "v1", "replicasets")
STATEFULSETS = Resource("apps", "v1", "statefulsets")
SERVICES = Resource("", "v1", "services", kind="Service")
EVENTS = Resource("", "v1", "events")
PODS = Resource("", "v1", "pods", kind="Pod")
POD_LOG = Resource("", "v1", "pods", "log")
CLAIMS = Resource("", "v1", "persistentvolumeclaims", kind="PersistentVolumeClaim")
CONFIGMAPS = Resource("", "v1", "configmaps")
STORAGE_CLASSES = Resource("storage.k8s.io", "v1", "storageclasses", namespaced=False)
LEASES = Resource("coordination.k8s.io", "v1", "leases")
LEADER_WORKER_SETS = Resource("leaderworkerset.x-k8s.io", "v1", LWS_PLURAL, kind=LWS_KIND)
SCALED_OBJECTS = Resource("keda.sh", "v1alpha1", SCALED_OBJECT_PLURAL, kind=SCALED_OBJECT_KIND)
INFERENCE_POOLS = Resource("inference.networking.k8s.io", "v1", "inferencepools", kind="InferencePool")
