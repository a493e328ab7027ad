"""Watches and waits of ``bench/reconcile_bench.py``: raw JSON (the generated client's models would cost the
benchmark more CPU than the API server spends on each event, CPU the operator and the API server share here)."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from typing import Any
from urllib.parse import urlencode

import urllib3
from ctxfit.controller.kube.rest import Resource, Rest
from kubernetes import client

CRDS = Resource("apiextensions.k8s.io", "v1", "customresourcedefinitions", namespaced=False)


def wait_established(rest: Rest, crd: str, timeout: float = 60) -> None:
    """Poll until the CRD is Established (``kubectl wait`` fails at once while a new CRD has no conditions)."""
    deadline = time.monotonic() + timeout
    while True:
        got = rest.read(CRDS, name=crd) or {}
        if any(c.get("type") == "Established" and c.get("status") == "True"
               for c in (got.get("status") or {}).get("conditions") or []):
            return
        if time.monotonic() > deadline:
            raise RuntimeError(f"CRD {crd} not Established after {timeout:.0f} s")
        time.sleep(0.25)


def object_events(api: client.ApiClient, path: str, version: str | None) -> Iterator[tuple[str, dict[str, Any]]]:
    """(event type, object) of a 30 s watch of the collection at ``path`` (e.g.
    ``/api/v1/namespaces/ns/services``), from ``version`` on."""
    query = {"watch": "1", "timeoutSeconds": "30", **({"resourceVersion": version} if version else {})}
    url = f"{api.configuration.host}{path}?{urlencode(query)}"
    headers = {"Accept": "application/json"}
    headers.update({s["key"]: s["value"] for s in api.configuration.auth_settings().values() if s.get("value")})
    response = api.rest_client.pool_manager.request("GET", url, headers=headers, preload_content=False,
                                                    timeout=urllib3.Timeout(connect=10, read=60))
    try:
        buffer = b""
        for chunk in response.stream(65536):
            buffer += chunk
            *lines, buffer = buffer.split(b"\n")
            for line in lines:
                if line.strip():
                    event = json.loads(line)
                    yield event.get("type", ""), event.get("object") or {}
    finally:
        response.release_conn()


def deployment_events(api: client.ApiClient, namespace: str,
                      version: str | None) -> Iterator[tuple[str, dict[str, Any]]]:
    """(event type, object metadata) of a 30 s watch of the namespace's Deployments, from ``version`` on."""
    for kind, obj in object_events(api, f"/apis/apps/v1/namespaces/{namespace}/deployments", version):
        yield kind, obj.get("metadata") or {}
