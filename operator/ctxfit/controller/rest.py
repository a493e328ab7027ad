"""Raw JSON requests to the API server over the official client's connection pool and credentials.

The generated API classes of the ``kubernetes`` client (37.x) validate every body into pydantic models with
``validate_call`` and serialize them back: for a Deployment that was most of the operator's CPU per server
in ``bench/reconcile_bench.py``, and importing ``CoreV1Api``/``AppsV1Api`` alone costs ~30 MiB of RSS.
The operator's objects are already plain dicts rendered for the wire (``ctxfit.render``), so this module
sends them as JSON through the same ``urllib3`` pool (``ApiClient.rest_client.pool_manager``: TLS client
certificates, CA, proxy) with the same credentials (``Configuration.auth_settings()``: bearer token,
refreshed by the kubeconfig/in-cluster hook), and returns parsed JSON. Errors raise the client's own
``ApiException`` (``status``, ``reason``, ``body`` = the API server's Status JSON), so callers handle them
exactly as before. Works with every ``kubernetes`` release the project allows (>= 29): only the pool, the
configuration and the exception are used.
"""

from __future__ import annotations

import json
from typing import Any, cast
from urllib.parse import quote, urlencode

from kubernetes import client
from kubernetes.client.exceptions import ApiException

JSON = "application/json"
MERGE_PATCH = "application/merge-patch+json"
JSON_PATCH = "application/json-patch+json"
USER_AGENT = "ctxfit-operator"


def path_of(*parts: str) -> str:
    """``/a/b/c`` from path segments, each percent-quoted (names are DNS labels; quoting is defence)."""
    return "/" + "/".join(quote(part, safe="") for part in parts)


def namespaced(prefix: str, namespace: str, plural: str, name: str = "", sub: str = "") -> str:
    """The path of a namespaced collection or object, e.g. ``("/apis/apps/v1", ns, "deployments", n)`` ->
    ``/apis/apps/v1/namespaces/<ns>/deployments/<n>``; ``sub`` names a subresource (``status``, ``scale``)."""
    parts = ["namespaces", namespace, plural, *([name] if name else []), *([sub] if sub else [])]
    return prefix + path_of(*parts)


class Rest:
    """Thread-safe raw JSON calls over one ``ApiClient`` (its pool, TLS settings and credentials)."""

    def __init__(self, api_client: client.ApiClient) -> None:
        self.configuration = api_client.configuration
        self.pool = api_client.rest_client.pool_manager
        self.host = str(self.configuration.host).rstrip("/")

    def _headers(self, content_type: str | None, accept: str) -> dict[str, str]:
        headers = {"Accept": accept, "User-Agent": USER_AGENT}
        for setting in self.configuration.auth_settings().values():  # the bearer token, refreshed by its hook
            if setting.get("in") == "header" and setting.get("value"):
                headers[str(setting["key"])] = str(setting["value"])
        if content_type:
            headers["Content-Type"] = content_type
        return headers

    def request(self, method: str, path: str, *, query: dict[str, Any] | None = None, body: Any = None,
                content_type: str = JSON, accept: str = JSON, timeout: float | None = None) -> bytes:
        """Send one request; returns the response body. ``body`` (dict/list) is sent as JSON.

        Raises ``ApiException`` for a non-2xx answer (``status``, ``reason``, ``body``); connection errors
        propagate from urllib3 as with the generated client.
        """
        url = self.host + path
        if query:
            url += "?" + urlencode({k: v for k, v in query.items() if v is not None})
        data = None if body is None else json.dumps(body, separators=(",", ":")).encode()
        response = self.pool.request(method, url, body=data, preload_content=False, timeout=timeout,
                                     headers=self._headers(content_type if data is not None else None, accept))
        try:
            payload: bytes = response.data
        finally:
            response.release_conn()
        if not 200 <= response.status <= 299:
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
            if exc.status == 404:
                return None
            raise
