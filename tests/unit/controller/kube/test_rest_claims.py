"""Raw JSON requests (kube/rest.py) and the claim calls over them (kube/claims.py): the bearer token
and JSON bodies go out as the generated client sent them, errors come back as its ``ApiException``; a burst of
reconciles shares one StorageClass list; a fresh plan's claim is created once, not on every pass before its
status records it."""

from __future__ import annotations

import json
import threading
import time
from types import SimpleNamespace
from typing import Any

import pytest
from ctxfit.controller.kube.claims import ClaimsApi
from ctxfit.controller.kube.guarded import Foreign
from ctxfit.controller.kube.rest import DEPLOYMENTS, JSON_PATCH, SERVICES, Rest
from kubernetes.client.exceptions import ApiException


class FakeResponse:
    def __init__(self, status: int, body: Any, reason: str = "OK") -> None:
        self.status, self.reason = status, reason
        self.data = json.dumps(body).encode()
        self.headers: dict[str, str] = {}
        self.released = False

    def release_conn(self) -> None:
        self.released = True


class FakePool:
    def __init__(self, answer: FakeResponse) -> None:
        self.answer = answer
        self.sent: list[dict[str, Any]] = []

    def request(self, method: str, url: str, **kwargs: Any) -> FakeResponse:
        self.sent.append({"method": method, "url": url, **kwargs})
        return self.answer


def rest_with(answer: FakeResponse, token: str | None = "sekret") -> tuple[Rest, FakePool]:
    pool = FakePool(answer)
    auth = {"BearerToken": {"in": "header", "key": "authorization", "value": f"Bearer {token}"}} if token else {}
    configuration = SimpleNamespace(host="https://api:6443/", auth_settings=lambda: auth)
    api_client = SimpleNamespace(configuration=configuration, rest_client=SimpleNamespace(pool_manager=pool))
    return Rest(api_client), pool  # type: ignore[arg-type]


def test_a_request_carries_json_the_token_and_releases_its_connection() -> None:
    rest, pool = rest_with(FakeResponse(201, {"metadata": {"name": "a"}}))
    ops = [{"op": "replace", "path": "/spec", "value": {}}]
    got = rest.call_json("PATCH", DEPLOYMENTS, "ns", "a", query={"fieldManager": "ctxfit"}, body=ops,
                         content_type=JSON_PATCH)
    assert got == {"metadata": {"name": "a"}}
    sent = pool.sent[0]
    assert sent["url"] == "https://api:6443/apis/apps/v1/namespaces/ns/deployments/a?fieldManager=ctxfit"
    assert json.loads(sent["body"]) == ops
    assert sent["headers"]["authorization"] == "Bearer sekret"
    assert sent["headers"]["Content-Type"] == JSON_PATCH and sent["preload_content"] is False
    assert pool.answer.released


def test_resource_paths() -> None:
    from ctxfit.controller.kube.rest import POD_LOG, SERVERS_STATUS, STORAGE_CLASSES

    assert POD_LOG.path("ns", "p") == "/api/v1/namespaces/ns/pods/p/log" and POD_LOG.rbac == "pods/log"
    assert SERVERS_STATUS.path("ns", "s") == "/apis/ctxfit.io/v1alpha1/namespaces/ns/inferenceservers/s/status"
    assert STORAGE_CLASSES.path() == "/apis/storage.k8s.io/v1/storageclasses"
    with pytest.raises(ValueError, match="namespace"):
        DEPLOYMENTS.path()
    with pytest.raises(ValueError, match="name"):
        POD_LOG.path("ns")


def test_errors_are_the_clients_api_exception_with_the_servers_message() -> None:
    status = {"kind": "Status", "message": "Deployment.apps \"x\" is invalid", "code": 422}
    rest, _ = rest_with(FakeResponse(422, status, "Unprocessable Entity"))
    with pytest.raises(ApiException) as caught:
        rest.call("POST", DEPLOYMENTS, "ns", body={})
    assert caught.value.status == 422 and json.loads(caught.value.body)["message"] == status["message"]
    missing, _ = rest_with(FakeResponse(404, {"kind": "Status", "code": 404}, "Not Found"), token=None)
    assert missing.read(SERVICES, "ns", "x") is None


class FakeRest:
    """The PVC and StorageClass endpoints, counting calls."""

    def __init__(self) -> None:
        self.calls: list[str] = []
        self.claims: dict[str, dict[str, Any]] = {}
        self.lock = threading.Lock()

    def call_json(self, method: str, resource: Any, *args: Any, **_: Any) -> dict[str, Any]:
        assert (method, resource.plural, args) == ("GET", "storageclasses", ())
        time.sleep(0.05)
        with self.lock:
            self.calls.append("list-classes")
        return {"items": [{"metadata": {"name": "standard", "annotations": {
            "storageclass.kubernetes.io/is-default-class": "true"}}, "allowVolumeExpansion": False}]}

    def read(self, resource: Any, namespace: str, name: str) -> dict[str, Any] | None:
        self.calls.append("get-claim")
        return self.claims.get(name)

    def call(self, method: str, resource: Any, namespace: str, name: str | None = None, *, body: Any = None,
             **_: Any) -> bytes:
        assert resource.plural == "persistentvolumeclaims"
        self.calls.append(f"{method} {name or resource.plural}")
        if method == "POST":
            if body["metadata"]["name"] in self.claims:
                raise ApiException(status=409, reason="AlreadyExists")
            self.claims[body["metadata"]["name"]] = body
        return b"{}"


def claims_api() -> tuple[ClaimsApi, FakeRest]:
    fake = FakeRest()
    return ClaimsApi(SimpleNamespace(rest=fake)), fake  # type: ignore[arg-type]


def test_a_burst_shares_one_storage_class_list() -> None:
    api, fake = claims_api()
    views: list[Any] = []
    threads = [threading.Thread(target=lambda: views.append(api.storage())) for _ in range(12)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert fake.calls == ["list-classes"]
    assert {v.default_class for v in views} == {"standard"}


def claim(name: str = "s-weights", size: str = "20Gi", owners: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name, "namespace": "ns", **({"ownerReferences": owners} if owners else {})}
    return {"apiVersion": "v1", "kind": "PersistentVolumeClaim", "metadata": meta,
            "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": size}}}}


def test_a_created_claim_is_remembered_for_the_passes_before_the_status_records_it() -> None:
    api, fake = claims_api()
    assert api.created("ns", "s-weights") is None
    api.apply_claim(claim(), exists=False)
    seen = api.created("ns", "s-weights")
    assert seen is not None and seen.request_bytes == 20 << 30
    assert fake.calls == ["POST persistentvolumeclaims"]


OWNER = {"apiVersion": "ctxfit.io/v1alpha1", "kind": "InferenceServer", "name": "s", "uid": "uid-s",
         "controller": True}


def test_a_claim_found_existing_is_not_remembered() -> None:
    """A 409 means a claim of that name exists (its size may differ): when it is the server's, the next pass
    reads it; when it is not, nothing is written to it (``guarded.Foreign``)."""
    api, fake = claims_api()
    fake.claims["s-weights"] = claim(size="1Gi", owners=[OWNER])
    api.apply_claim(claim(owners=[OWNER]), exists=False)
    assert api.created("ns", "s-weights") is None
    fake.claims["s-weights"] = claim(size="1Gi")
    with pytest.raises(Foreign):
        api.apply_claim(claim(owners=[OWNER]), exists=False)
    assert fake.calls == ["POST persistentvolumeclaims", "get-claim"] * 2


def test_a_new_servers_passes_create_its_claim_once() -> None:
    """The first pass creates the Deployment and the claim and defers the status; the next pass (still a fresh
    plan: no attempt in status yet) writes the status and the Service, not the claim again (bench/README.md:
    300 claim POSTs for 200 servers before)."""
    from ctxfit.controller.reconcile import reconcile

    from tests.unit.controller.builders import RTX
    from tests.unit.controller.fakekube import FakeKube, runtime, server

    kube = FakeKube(server())
    rt = runtime(kube)
    rt.defer_status_after_create = True
    api, fake = claims_api()
    rt.claims = api
    first = reconcile(rt, "ns", "kimi-k25", (RTX,), (), deployment=None, service_port=None)
    assert first.applied is not None and first.stored is None
    second = reconcile(rt, "ns", "kimi-k25", (RTX,), (), deployment=first.applied, service_port=None)
    assert second.stored is not None
    assert [c for c in fake.calls if c.startswith("POST")] == ["POST persistentvolumeclaims"]
    assert kube.calls == ["apply:Deployment", "status", "event:Planned", "apply:Service"]


def test_a_watched_claim_is_not_read_again() -> None:
    """With the claims index (``claim_seen``) a pass reads no claim; a claim not seen yet but just created by this
    process counts as existing (no second create)."""
    from ctxfit.controller.reconcile import reconcile
    from ctxfit.controller.views.cache import ClaimView

    from tests.unit.controller.builders import RTX
    from tests.unit.controller.fakekube import FakeClaims, FakeKube, runtime, server

    first_kube = FakeKube(server())
    rt = runtime(first_kube)
    rt.claims = FakeClaims(first_kube)
    first = reconcile(rt, "ns", "kimi-k25", (RTX,), ())
    assert first.stored is not None and "apply:PersistentVolumeClaim:kimi-k25-weights" in first_kube.calls
    kube = FakeKube(first.stored)
    rt.kube = kube
    rt.claims = FakeClaims(kube)
    size = 1 << 50  # larger than any rendering: nothing to expand
    seen = ClaimView("kimi-k25-weights", size, "Bound", "standard", size)
    reconcile(rt, "ns", "kimi-k25", (RTX,), (), claim_seen={"kimi-k25-weights": seen}.get)
    assert not [c for c in kube.calls if "claim" in c.lower()], kube.calls
