"""Raw JSON requests (kube/rest.py) and the claim calls over them (kube/claims.py): the bearer token
and JSON bodies go out as the generated client sent them, errors come back as its ``ApiException``; a burst of
reconciles shares one StorageClass list; a fresh plan's claim is created once, not on every pass before its
status records it."""

from __future__ import annotations

import json
import threading
import time
from typing import Any
from urllib.parse import urlsplit

import pytest
from ctxfit.controller.kube.claims import ClaimsApi
from ctxfit.controller.kube.guarded import Foreign
from ctxfit.controller.kube.rest import DEPLOYMENTS, JSON_PATCH, SERVICES, Rest
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from tests.unit.controller.fakekube import FakeKube
from tests.unit.controller.kube.fakeapi import FakeApiServer, Request, Response, parse_path, rest_over


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
    configuration = client.Configuration(host="https://api:6443/")
    if token:  # the kubeconfig's bearer token, as config.load_kube_config sets it
        configuration.api_key = {"authorization": token}
        configuration.api_key_prefix = {"authorization": "Bearer"}
    return rest_over(pool, configuration), pool


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
    assert caught.value.status == 422 and json.loads(caught.value.body or "{}")["message"] == status["message"]
    missing, _ = rest_with(FakeResponse(404, {"kind": "Status", "code": 404}, "Not Found"), token=None)
    assert missing.read(SERVICES, "ns", "x") is None


class SlowClasses(FakeApiServer):
    """The API server, slow to list StorageClasses (a burst of readers overlaps the first list)."""

    def request(self, method: str, url: str, body: Any = None, headers: dict[str, str] | None = None,
                **kwargs: Any) -> Response:
        if method == "GET" and parse_path(urlsplit(url).path)[0][1] == "storageclasses":
            time.sleep(0.05)
        return super().request(method, url, body, headers, **kwargs)


STANDARD = {"metadata": {"name": "standard", "annotations": {"storageclass.kubernetes.io/is-default-class": "true"}},
            "allowVolumeExpansion": False}
CLAIMS = ("", "persistentvolumeclaims", "ns")


def calls(fake: FakeApiServer) -> list[str]:
    """The requests served, as ``list-classes``, ``get-claim`` or ``<METHOD> <name, or the plural on POST>``."""
    def said(r: Request) -> str:
        if r.key[1] == "storageclasses":
            return "list-classes"
        if r.method == "GET":
            return "get-claim"
        return f"{r.method} {r.key[1] if r.method == 'POST' else r.key[3]}"
    return [said(r) for r in fake.log]


def claims_api() -> tuple[ClaimsApi, FakeApiServer]:
    """``ClaimsApi`` over the shared ``FakeKube`` and the API server it calls (one default StorageClass)."""
    fake = SlowClasses()
    fake.put("storage.k8s.io", "storageclasses", "", STANDARD)
    return ClaimsApi(FakeKube(None, api=fake)), fake


def test_a_burst_shares_one_storage_class_list() -> None:
    api, fake = claims_api()
    views: list[Any] = []
    threads = [threading.Thread(target=lambda: views.append(api.storage())) for _ in range(12)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert calls(fake) == ["list-classes"]
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
    assert calls(fake) == ["POST persistentvolumeclaims"]


OWNER = {"apiVersion": "ctxfit.io/v1alpha1", "kind": "InferenceServer", "name": "s", "uid": "uid-s",
         "controller": True}


def test_a_claim_found_existing_is_not_remembered() -> None:
    """A 409 means a claim of that name exists (its size may differ): when it is the server's, the next pass
    reads it; when it is not, nothing is written to it (``guarded.Foreign``)."""
    api, fake = claims_api()
    fake.put(*CLAIMS, claim(size="1Gi", owners=[OWNER]))
    api.apply_claim(claim(owners=[OWNER]), exists=False)
    assert api.created("ns", "s-weights") is None
    fake.put(*CLAIMS, claim(size="1Gi"))
    with pytest.raises(Foreign):
        api.apply_claim(claim(owners=[OWNER]), exists=False)
    assert calls(fake) == ["POST persistentvolumeclaims", "get-claim"] * 2


def test_a_new_servers_passes_create_its_claim_once() -> None:
    """The first pass creates the Deployment and the claim and defers the status; the next pass (still a fresh
    plan: no attempt in status yet) writes the status and the Service, not the claim again (bench/README.md:
    300 claim POSTs for 200 servers before)."""
    from ctxfit.controller.reconcile import reconcile

    from tests.unit.controller.builders import RTX
    from tests.unit.controller.fakekube import runtime, server

    kube = FakeKube(server())
    rt = runtime(kube)
    rt.defer_status_after_create = True
    api, fake = claims_api()
    rt.claims = api
    first = reconcile(rt, "ns", "kimi-k25", (RTX,), (), deployment=None, service_port=None)
    assert first.applied is not None and first.stored is None
    second = reconcile(rt, "ns", "kimi-k25", (RTX,), (), deployment=first.applied, service_port=None)
    assert second.stored is not None
    assert [c for c in calls(fake) if c.startswith("POST")] == ["POST persistentvolumeclaims"]
    assert kube.calls == ["apply:Deployment", "status", "event:Planned", "apply:Service"]


def test_a_watched_claim_is_not_read_again() -> None:
    """With the claims index (``claim_seen``) a pass reads no claim; a claim not seen yet but just created by this
    process counts as existing (no second create)."""
    from ctxfit.controller.reconcile import reconcile
    from ctxfit.controller.views.cache import ClaimView

    from tests.unit.controller.builders import RTX
    from tests.unit.controller.fakekube import FakeClaims, runtime, server

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
