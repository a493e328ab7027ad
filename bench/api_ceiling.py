"""The API server's ceiling for the operator's main write: how fast it accepts N Deployments from a plain client.

Used by ``bench/reconcile_bench.py`` in the same run as the operator measurement (same machine, same
control plane, same moment), so the operator's throughput can be printed as a fraction of it. The
Deployments are copies of one the operator wrote (server-set metadata and owner references removed),
created in a scratch namespace with the same client and call style as the operator (raw JSON POSTs over
the ``kubernetes`` client's connection pool, ``ctxfit.controller.kube.rest.Rest``; the generated
``create_namespaced_deployment`` validates each body into pydantic models first, which costs the client
more CPU than the API server spends on the create), from a thread pool.
"""

from __future__ import annotations

import copy
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

from ctxfit.controller.kube.rest import CLAIMS, DEPLOYMENTS, EVENTS, SERVERS, SERVERS_STATUS, SERVICES, Resource, Rest
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


def read_object(api: client.ApiClient, resource: Resource, namespace: str, name: str) -> dict[str, Any]:
    """One object as a plain dict (camelCase, as the operator reads it), e.g. ``(DEPLOYMENTS, ns, name)``.
    Raises ``LookupError`` when it does not exist."""
    got = Rest(api).read(resource, namespace, name)
    if got is None:
        raise LookupError(f"{resource.plural} {namespace}/{name} not found")
    return got


def _mounting(deployment: dict[str, Any], claim: str) -> dict[str, Any]:
    """A shallow copy of ``deployment`` whose claim volumes name ``claim``."""
    pod = deployment["spec"]["template"]["spec"]
    volumes = [{**v, "persistentVolumeClaim": {**v["persistentVolumeClaim"], "claimName": claim}}
               if "persistentVolumeClaim" in v else v for v in pod.get("volumes") or []]
    template = {**deployment["spec"]["template"], "spec": {**pod, "volumes": volumes}}
    return {**deployment, "spec": {**deployment["spec"], "template": template}}


@dataclass(frozen=True)
class Ceiling:
    """``count`` Deployments (each with its claim when ``claims``; with ``full``, each server's claim, Deployment,
    Service, status and Event) written by ``threads`` threads in ``seconds`` (wall, first call to last answer)."""

    threads: int
    count: int
    seconds: float
    claims: bool = False
    full: bool = False

    @property
    def per_second(self) -> float:
        """Deployments accepted per second."""
        return self.count / self.seconds if self.seconds > 0 else 0.0


def measure(api: client.ApiClient, namespace: str, base: dict[str, Any], count: int, threads: int,
            prefix: str, claim: dict[str, Any] | None = None) -> Ceiling:
    """Create ``count`` copies of ``base`` named ``{prefix}-NNNN`` in ``namespace`` (which must exist); with
    ``claim`` (a PersistentVolumeClaim as read), each Deployment is followed by its own copy of the claim
    (``{prefix}-NNNN-weights``, mounted by that Deployment), the writes of the operator's first pass.

    Raises the client's ``ApiException`` when a create fails (the ceiling would be meaningless).
    """
    rest = Rest(api)
    body = template(base)
    body["metadata"]["namespace"] = namespace
    claim_body = template(claim) if claim is not None else None
    if claim_body is not None:
        claim_body["metadata"]["namespace"] = namespace
        claim_body["spec"].pop("volumeName", None)  # set by the binding
        for key in ("annotations",):  # the provisioner's and binder's annotations
            claim_body["metadata"].pop(key, None)

    def create(i: int) -> None:
        name = f"{prefix}-{i:04d}"
        obj = {**body, "metadata": {**body["metadata"], "name": name}}
        if claim_body is not None:
            obj = _mounting(obj, f"{name}-weights")
        rest.call("POST", DEPLOYMENTS, namespace, query={"fieldManager": "ctxfit"}, body=obj)
        if claim_body is not None:
            rest.call("POST", CLAIMS, namespace, body={**claim_body, "metadata": {**claim_body["metadata"],
                                                                              "name": f"{name}-weights"}})

    start = time.monotonic()
    with ThreadPoolExecutor(threads) as pool:
        list(pool.map(create, range(count)))
    return Ceiling(threads=threads, count=count, seconds=time.monotonic() - start, claims=claim is not None)


@dataclass(frozen=True)
class ServerObjects:
    """One server's objects as the operator wrote them (read back after its run), the templates of a
    plain client's per-server writes: the InferenceServer (with its status), Deployment, Service, claim."""

    server: dict[str, Any]
    deployment: dict[str, Any]
    service: dict[str, Any]
    claim: dict[str, Any] | None


def _creatable(obj: dict[str, Any], namespace: str) -> dict[str, Any]:
    body = template(obj)
    body["metadata"]["namespace"] = namespace
    return body


def measure_server_writes(api: client.ApiClient, namespace: str, objects: ServerObjects, count: int, threads: int,
                          prefix: str) -> Ceiling:
    """A plain client doing, per server, the writes the operator does for a new one: its claim (when the
    operator wrote one), Deployment, Service, a status replace and a Normal Event, in that order, from
    ``threads`` threads. The ``count`` InferenceServers (``{prefix}-NNNN``) are created first, outside the timed
    window (no operator watches ``namespace``). Raises the client's ``ApiException`` when a write fails."""
    rest = Rest(api)
    server = template(objects.server)
    status = server.pop("status", None) or {"phase": "Starting"}
    server["metadata"]["namespace"] = namespace
    deployment = _creatable(objects.deployment, namespace)
    service = _creatable(objects.service, namespace)
    service["spec"] = {k: v for k, v in service["spec"].items() if k not in ("clusterIP", "clusterIPs")}
    claim = _creatable(objects.claim, namespace) if objects.claim is not None else None
    if claim is not None:
        claim["spec"].pop("volumeName", None)  # set by the binding
        claim["metadata"].pop("annotations", None)  # the provisioner's and binder's
    names = [f"{prefix}-{i:04d}" for i in range(count)]
    stored: dict[str, dict[str, Any]] = {}

    def create_server(name: str) -> None:
        stored[name] = rest.call_json("POST", SERVERS, namespace,
                                      body={**server, "metadata": {**server["metadata"], "name": name}})

    with ThreadPoolExecutor(threads) as pool:
        list(pool.map(create_server, names))
    manager = {"fieldManager": "ctxfit"}

    def write(name: str) -> None:
        body = stored[name]
        meta = {**deployment["metadata"], "name": name}
        obj = {**deployment, "metadata": meta}
        if claim is not None:
            obj = _mounting(obj, f"{name}-weights")
            rest.call("POST", CLAIMS, namespace, query=manager,
                      body={**claim, "metadata": {**claim["metadata"], "name": f"{name}-weights"}})
        rest.call("POST", DEPLOYMENTS, namespace, query=manager, body=obj)
        rest.call("POST", SERVICES, namespace, query=manager,
                  body={**service, "metadata": {**service["metadata"], "name": name}})
        rest.call("PUT", SERVERS_STATUS, namespace, name, body={**body, "status": status})
        rest.call("POST", EVENTS, namespace, body={
            "apiVersion": "v1", "kind": "Event", "metadata": {"generateName": f"{name}.", "namespace": namespace},
            "involvedObject": {"apiVersion": body["apiVersion"], "kind": body["kind"], "name": name,
                               "namespace": namespace, "uid": body["metadata"]["uid"]},
            "reason": "Planned", "message": "planned (plain client)", "type": "Normal", "count": 1,
            "source": {"component": "ctxfit-bench"}})

    start = time.monotonic()
    with ThreadPoolExecutor(threads) as pool:
        list(pool.map(write, names))
    return Ceiling(threads=threads, count=count, seconds=time.monotonic() - start, claims=claim is not None,
                   full=True)
