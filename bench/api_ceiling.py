"""The API server's ceiling for the operator's main write: how fast it accepts N Deployments from a plain client.

Used by ``bench/reconcile_bench.py`` in the same run as the operator measurement (same machine, same
control plane, same moment), so the operator's throughput can be printed as a fraction of it. The
Deployments are copies of one the operator wrote (server-set metadata and owner references removed),
created in a scratch namespace with the same client library and call style as the operator
(``kubernetes`` client, ``create_namespaced_deployment`` with ``_preload_content=False``), from a thread pool.
"""

from __future__ import annotations

import copy
import json
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

from kubernetes import client

SERVER_SET = ("uid", "resourceVersion", "creationTimestamp", "managedFields", "generation", "ownerReferences",
              "selfLink")


def template(deployment: dict[str, Any]) -> dict[str, Any]:
    """A creatable copy of ``deployment`` (a dict as read from the API): no status, no server-set metadata."""
    obj = copy.deepcopy(deployment)
    obj.pop("status", None)
    for key in SERVER_SET:
        obj["metadata"].pop(key, None)
    obj.setdefault("apiVersion", "apps/v1")
    obj.setdefault("kind", "Deployment")
    return obj


def read_deployment(api: client.ApiClient, namespace: str, name: str) -> dict[str, Any]:
    """One Deployment as a plain dict (camelCase, as the operator reads it)."""
    rsp = client.AppsV1Api(api).read_namespaced_deployment(name, namespace, _preload_content=False)
    try:
        return dict(json.loads(rsp.data))
    finally:
        rsp.release_conn()


@dataclass(frozen=True)
class Ceiling:
    """``count`` Deployments created by ``threads`` threads in ``seconds`` (wall, first call to last answer)."""

    threads: int
    count: int
    seconds: float

    @property
    def per_second(self) -> float:
        """Deployments accepted per second."""
        return self.count / self.seconds if self.seconds > 0 else 0.0


def measure(api: client.ApiClient, namespace: str, base: dict[str, Any], count: int, threads: int,
            prefix: str) -> Ceiling:
    """Create ``count`` copies of ``base`` named ``{prefix}-NNNN`` in ``namespace`` (which must exist).

    Raises the client's ``ApiException`` when a create fails (the ceiling would be meaningless).
    """
    apps = client.AppsV1Api(api)
    body = template(base)
    body["metadata"]["namespace"] = namespace

    def create(i: int) -> None:
        obj = {**body, "metadata": {**body["metadata"], "name": f"{prefix}-{i:04d}"}}
        rsp = apps.create_namespaced_deployment(namespace, obj, _preload_content=False)
        rsp.data  # noqa: B018 - drain, so the connection goes back to the pool
        rsp.release_conn()

    start = time.monotonic()
    with ThreadPoolExecutor(threads) as pool:
        list(pool.map(create, range(count)))
    return Ceiling(threads=threads, count=count, seconds=time.monotonic() - start)
