"""An in-memory API server behind a urllib3-style pool, for the operator's whole I/O in unit tests (``kube.rest.Rest``
sends through ``pool_manager.request``; so would the generated client, which the tests' own setup may use).

Enough of kube-apiserver's semantics for what the operator sends: POST answers 409 when the name is taken (and
fills ``uid``, ``resourceVersion``, ``generation``, ``generateName``), GET 404 for an absent object, JSON patch
(RFC 6902 via ``jsonpatch``: a failed ``test`` or a bad path -> 422, nothing changed), merge patch, PUT with a
stale ``resourceVersion`` -> 409, DELETE honouring ``preconditions.uid`` (409). Every request is logged with the
object as it was just before it (``Request.before``). Not a stand-in for e2e tests: those run the real API server.
"""

from __future__ import annotations

import copy
import itertools
import json
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import parse_qs, urlsplit

import jsonpatch
from ctxfit.controller.kube.rest import Rest
from kubernetes import client

WRITES = frozenset({"POST", "PUT", "PATCH", "DELETE"})


@dataclass
class Request:
    """One request as the fake served it: ``key`` (group, plural, namespace, name; name "" for a collection; a
    POST names the object it created or found taken),
    ``sub`` (subresource), the parsed ``body``, the answer's ``status``, and the object before it (None: absent)."""

    method: str
    key: tuple[str, str, str, str]
    sub: str
    body: Any
    status: int
    before: dict[str, Any] | None


class Response:
    def __init__(self, status: int, body: Any) -> None:
        self.status = status
        self.reason = {200: "OK", 201: "Created", 404: "Not Found", 409: "Conflict", 422: "Unprocessable Entity"}.get(
            status, "")
        self.data = json.dumps(body).encode()
        self.headers: dict[str, str] = {"Content-Type": "application/json"}

    def release_conn(self) -> None:
        pass

    def read(self) -> bytes:
        return self.data

    def stream(self, amount: int, decode_content: bool = True) -> Any:
        for start in range(0, len(self.data), amount):
            yield self.data[start:start + amount]


def status_response(code: int, message: str, name: str = "", reason: str = "") -> Response:
    """A ``Status`` answer as kube-apiserver sends it."""
    return Response(code, {"kind": "Status", "apiVersion": "v1", "status": "Failure", "code": code,
                           "message": message, "reason": reason, "details": {"name": name} if name else {}})


def parse_path(path: str) -> tuple[tuple[str, str, str, str], str]:
    """``(group, plural, namespace, name), subresource`` of an API path."""
    parts = [p for p in path.split("/") if p]
    if parts[0] == "api":
        group, rest = "", parts[2:]
    else:
        group, rest = parts[1], parts[3:]
    namespace = ""
    if rest[:1] == ["namespaces"] and len(rest) > 2:
        namespace, rest = rest[1], rest[2:]
    plural = rest[0]
    name = rest[1] if len(rest) > 1 else ""
    sub = rest[2] if len(rest) > 2 else ""
    return (group, plural, namespace, name), sub


def _merge(target: Any, patch: Any) -> Any:
    if not isinstance(patch, dict):
        return patch
    out = dict(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            out.pop(key, None)
        else:
            out[key] = _merge(out.get(key), value)
    return out


@dataclass
class FakeApiServer:
    """The store (``objects`` by key) and the request log; ``served``: plurals it serves (others answer 404 with
    no name, as for a CRD not installed); ``before_write``: called with each write request before it is applied
    (tests use it to swap an object between the operator's read and its write); ``after_write``: called with each
write request once it is served (the store shows its effect); ``refuse``: an admission stand-in, called with
``(method, key, body, stored)`` before a write, answers instead when it returns a response."""

    objects: dict[tuple[str, str, str, str], dict[str, Any]] = field(default_factory=dict)
    log: list[Request] = field(default_factory=list)
    served: set[str] | None = None
    before_write: Callable[[FakeApiServer, str, tuple[str, str, str, str]], None] | None = None
    after_write: Callable[[FakeApiServer, Request], None] | None = None
    refuse: Callable[[str, tuple[str, str, str, str], Any, dict[str, Any] | None], Response | None] | None = None
    _ids: itertools.count[int] = field(default_factory=lambda: itertools.count(1))

    # -- store helpers for tests
    def put(self, group: str, plural: str, namespace: str, obj: dict[str, Any]) -> dict[str, Any]:
        """Store ``obj`` as it is (a uid and resourceVersion are added when missing)."""
        obj = copy.deepcopy(obj)
        meta = obj.setdefault("metadata", {})
        meta.setdefault("namespace", namespace) if namespace else None
        meta.setdefault("uid", f"uid-{next(self._ids)}")
        meta.setdefault("resourceVersion", str(next(self._ids)))
        meta.setdefault("generation", 1)
        self.objects[(group, plural, namespace, meta["name"])] = obj
        return obj

    def get(self, group: str, plural: str, namespace: str, name: str) -> dict[str, Any] | None:
        return self.objects.get((group, plural, namespace, name))

    # -- the pool
    def request(self, method: str, url: str, body: Any = None, headers: dict[str, str] | None = None,
                **_: Any) -> Response:
        parts = urlsplit(url)
        key, sub = parse_path(parts.path)
        query = {k: v[0] for k, v in parse_qs(parts.query).items()}
        data = json.loads(body) if body else None
        if method in WRITES and self.before_write is not None:
            self.before_write(self, method, key)
        before = copy.deepcopy(self.objects.get(key)) if key[3] else None
        answer = self._serve(method, key, sub, query, data, (headers or {}).get("Content-Type", ""))
        if method == "POST" and isinstance(data, dict):  # the object created (or the name taken)
            created = json.loads(answer.data)
            name = (created.get("metadata") or {}).get("name") or (created.get("details") or {}).get("name") or ""
            key = (*key[:3], str(name))
        self.log.append(Request(method, key, sub, data, answer.status, before))
        if method in WRITES and self.after_write is not None:
            self.after_write(self, self.log[-1])
        return answer

    def _serve(self, method: str,  # noqa: C901 - one branch per verb, as the API server
               key: tuple[str, str, str, str], sub: str, query: dict[str, str], data: Any,
               content_type: str) -> Response:
        group, plural, namespace, name = key
        if self.served is not None and plural not in self.served:
            return status_response(404, "the server could not find the requested resource", reason="NotFound")
        if plural == "pods" and sub == "log":
            return Response(200, "")
        stored = self.objects.get(key)
        if method in WRITES and self.refuse is not None:
            refused = self.refuse(method, key, data, stored)
            if refused is not None:
                return refused
        if method == "GET":
            if not name:
                items = [o for k, o in self.objects.items() if k[:3] == key[:3] or (k[:2] == key[:2] and not k[2])]
                if plural == "events":
                    items = []
                return Response(200, {"kind": "List", "items": copy.deepcopy(items)})
            if stored is None:
                return status_response(404, f'{plural} "{name}" not found', name, "NotFound")
            return Response(200, copy.deepcopy(stored))
        if method == "POST":
            obj = copy.deepcopy(data)
            meta = obj.setdefault("metadata", {})
            if not meta.get("name") and meta.get("generateName"):
                meta["name"] = f"{meta['generateName']}{next(self._ids)}"
            target = (group, plural, namespace, meta["name"])
            if target in self.objects:
                return status_response(409, f'{plural} "{meta["name"]}" already exists', meta["name"], "AlreadyExists")
            meta["namespace"] = namespace
            meta["uid"], meta["resourceVersion"], meta["generation"] = f"uid-{next(self._ids)}", str(next(self._ids)), 1
            self.objects[target] = obj
            return Response(201, copy.deepcopy(obj))
        if stored is None:
            return status_response(404, f'{plural} "{name}" not found', name, "NotFound")
        if method == "DELETE":
            uid = ((data or {}).get("preconditions") or {}).get("uid")
            if uid and uid != stored["metadata"].get("uid"):
                return status_response(409, f"Precondition failed: UID in precondition: {uid}", name, "Conflict")
            del self.objects[key]
            return Response(200, {"kind": "Status", "status": "Success"})
        if method == "PUT":
            rv = (data.get("metadata") or {}).get("resourceVersion")
            if rv is not None and rv != stored["metadata"].get("resourceVersion"):
                return status_response(409, "the object has been modified", name, "Conflict")
            new = copy.deepcopy(stored)
            if sub == "status":
                new["status"] = data.get("status")
            else:
                new = copy.deepcopy(data)
                new["metadata"] = {**data.get("metadata", {}), "uid": stored["metadata"]["uid"]}
            return self._store(key, stored, new)
        if method == "PATCH":
            try:
                new = jsonpatch.apply_patch(stored, data) if "json-patch" in content_type else _merge(stored, data)
            except (jsonpatch.JsonPatchException, jsonpatch.JsonPointerException) as exc:
                return status_response(422, f"the server rejected our request due to an error in our request: {exc}",
                               name, "Invalid")
            if (new.get("metadata") or {}).get("uid") != stored["metadata"].get("uid"):
                return status_response(422, "metadata.uid: field is immutable", name, "Invalid")
            return self._store(key, stored, new)
        return status_response(405, f"{method} not allowed")

    def _store(self, key: tuple[str, str, str, str], stored: dict[str, Any], new: dict[str, Any]) -> Response:
        if new != stored:
            new["metadata"]["resourceVersion"] = str(next(self._ids))
            if new.get("spec") != stored.get("spec"):
                new["metadata"]["generation"] = int(stored["metadata"].get("generation") or 1) + 1
        self.objects[key] = new
        return Response(200, copy.deepcopy(new))

    # -- clients over it
    def api_client(self) -> client.ApiClient:
        """A real ``ApiClient`` whose pool is this fake."""
        return api_client_over(self)

    def writes(self) -> list[Request]:
        """The write requests served, in order."""
        return [r for r in self.log if r.method in WRITES]



def api_client_over(pool: Any, configuration: client.Configuration | None = None) -> client.ApiClient:
    """A real ``ApiClient`` (``configuration``: host ``https://fake:6443``, no credentials, unless given) whose
    pool is ``pool``: anything with urllib3's ``request(method, url, body=, headers=, ...)`` answering a
    ``Response``-like object (``FakeApiServer``, or a test's own pool that records or fails)."""
    if configuration is None:
        configuration = client.Configuration()
        configuration.host = "https://fake:6443"
    api = client.ApiClient(configuration)
    api.rest_client.pool_manager = pool  # a stand-in for urllib3's PoolManager
    return api


def rest_over(pool: Any, configuration: client.Configuration | None = None) -> Rest:
    """``kube.rest.Rest`` over ``api_client_over(pool, configuration)``."""
    return Rest(api_client_over(pool, configuration))
