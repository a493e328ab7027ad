"""Ownership and refusals with the whole reconcile over ``fakeapi.FakeApiServer`` and a fake clock: a name taken
by a foreign object, and every refusal of every child kind (claims included), stay within the stated bounds
(docs/design/refusals.md): one Warning Event per distinct cause, the backoff of every kind (10 s doubling to
300 s), status writes only when status changes, never an ``OverflowError``; status says what is true (the
claim's own size, Ready held only by what stops the server from serving)."""

from __future__ import annotations

import json
from collections import Counter
from typing import Any

import pytest
from ctxfit.controller import rejections
from ctxfit.controller.reconcile import Runtime, reconcile
from ctxfit.controller.reconcile import passes as reconcile_module
from ctxfit.controller.rejections import RejectionBook, rejection_of
from kubernetes.client.rest import ApiException

from tests.unit.controller.apiworld import (
    H100,
    KEY,
    NAME,
    NS,
    Clock,
    child,
    condition,
    runtime,
    world,
    writes_to,
)
from tests.unit.controller.kube.fakeapi import FakeApiServer, Response, status_response


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> Clock:
    fake = Clock()
    monkeypatch.setattr(reconcile_module.time, "monotonic", fake)
    return fake


def run(rt: Runtime, clock: Clock, seconds: float, every: float = 1.0, nodes: int = 1) -> None:
    """Passes every ``every`` seconds of the fake clock, as a storm of watch events would cause them."""
    end = clock.now + seconds
    while clock.now < end:
        reconcile(rt, NS, NAME, H100[:nodes], ())
        clock.now += every


def events(api: FakeApiServer) -> Counter[tuple[str, str]]:
    return Counter((o["reason"], o["message"]) for k, o in api.objects.items() if k[1] == "events")


def status_writes(api: FakeApiServer) -> int:
    return sum(1 for r in api.writes() if r.key == KEY and r.method == "PUT")


@pytest.mark.parametrize(("which", "plural", "label"), [
    ("service", "services", "Service billing"),
    ("deployment", "deployments", "Deployment billing"),
    ("claim", "persistentvolumeclaims", "PersistentVolumeClaim billing-weights"),
])
def test_a_name_taken_by_a_foreign_object_is_a_condition_and_one_event_never_a_write(
        clock: Clock, which: str, plural: str, label: str) -> None:
    api = world()
    group = "apps" if plural == "deployments" else ""
    original = api.put(group, plural, NS, child(which, NAME, "none"))
    run(api_rt := runtime(api), clock, 900)
    assert api.get(group, plural, NS, original["metadata"]["name"]) == original, "never written"
    cond = condition(api, "ObjectsAccepted")
    assert cond["status"] == "False" and cond["reason"] == "ForeignObject" and label in cond["message"]
    assert "not owned by this InferenceServer" in cond["message"]
    ready = condition(api, "Ready")
    assert ready["status"] == "False" and "endpoint" not in api.objects[KEY]["status"]
    foreign = [e for e in events(api).items() if e[0][0] == "ForeignObject"]
    assert len(foreign) == 1 and foreign[0][1] == 1, events(api)
    # the same backoff as any refusal: 10, 20, 40, 80, 160, 300, 300 s -> at most 9 tries in 15 minutes
    tries = [w for w in writes_to(api, plural, original["metadata"]["name"]) if w.startswith(("POST", "PATCH"))]
    assert 1 <= len(tries) <= 9, tries
    assert status_writes(api) <= 4, status_writes(api)
    if which == "claim":  # never mounted: no workload is written while its claim is not the server's
        assert not [r for r in api.writes() if r.key[1] == "deployments"], "a pod would mount the foreign claim"
    assert api_rt.metrics.registry.get_sample_value("ctxfit_reconcile_errors_total",
                                                    {"reason": "rejected_409"}) == len(tries)


def resize_forbidden(method: str, key: tuple[str, str, str, str], body: Any, stored: dict[str, Any] | None) -> \
        Response | None:
    """kube-apiserver's PersistentVolumeClaimResize admission for a class without ``allowVolumeExpansion``."""
    if method != "PATCH" or key[1] != "persistentvolumeclaims" or stored is None:
        return None
    if any(op.get("path") == "/spec/resources/requests/storage" for op in body if isinstance(op, dict)):
        return status_response(403, f'persistentvolumeclaims "{key[3]}" is forbidden: only dynamically provisioned '
                                    "pvc can be resized and the storageclass that provisions the pvc must support "
                                    "resize", key[3], "Forbidden")
    return None


def test_growing_a_claim_its_class_cannot_expand_is_bounded_and_status_says_its_size(clock: Clock) -> None:
    """The reported storm: 512 Events in 30 s, ~2,200 status writes, then an OverflowError every 10 s, and a status
    with a size the claim does not have. Now: one Event, a few status writes, the backoff, the claim's size."""
    api = world()
    api.refuse = resize_forbidden
    rt = runtime(api)
    run(rt, clock, 5)
    claim = api.get("", "persistentvolumeclaims", NS, f"{NAME}-weights")
    assert claim is not None
    claim["status"] = {"phase": "Bound", "capacity": claim["spec"]["resources"]["requests"]}
    have = claim["spec"]["resources"]["requests"]["storage"]
    api.objects[KEY]["spec"]["model"]["cache"]["volumeClaimTemplate"]["size"] = "900Gi"
    api.objects[KEY]["metadata"]["generation"] = 2
    before_events, before_writes = sum(events(api).values()), status_writes(api)
    run(rt, clock, 1800)
    refusals = [e for e in events(api).items() if e[0][0] == "ObjectRejected"]
    assert len(refusals) == 1 and refusals[0][1] == 1, events(api)
    assert "PersistentVolumeClaim/expand billing-weights (403)" in refusals[0][0][1]
    tries = [w for w in writes_to(api, "persistentvolumeclaims", f"{NAME}-weights") if w.startswith("PATCH")]
    assert 5 <= len(tries) <= 12, tries  # 10+20+40+80+160 s, then every 300 s
    # the plan changed with the spec (a new attempt), the refusal was written once: a handful of status writes
    assert status_writes(api) - before_writes <= 6, status_writes(api) - before_writes
    assert sum(events(api).values()) - before_events <= 4, events(api)
    model = api.objects[KEY]["status"]["model"]
    assert model["claimBytes"] == _bytes(have) and model["claimWantedBytes"] == 900 << 30, model
    assert api.get("", "persistentvolumeclaims", NS, f"{NAME}-weights")["spec"]["resources"]["requests"][
        "storage"] == have
    cond = condition(api, "ObjectsAccepted")
    assert cond["status"] == "False" and "must support resize" in cond["message"]
    assert condition(api, "Ready")["reason"] != "ObjectRejected", "a claim it already mounts does not stop serving"


def _bytes(quantity: str) -> int:
    from ctxfit.api import quantity_to_bytes

    return quantity_to_bytes(quantity)


@pytest.mark.parametrize(("plural", "code"), [("deployments", 403), ("services", 422),
                                              ("persistentvolumeclaims", 403)])
def test_every_kind_gets_the_same_backoff_and_one_event_per_cause(clock: Clock, plural: str, code: int) -> None:
    api = world()

    def refuse(method: str, key: tuple[str, str, str, str], body: Any, stored: Any) -> Response | None:
        if key[1] == plural and method in ("POST", "PATCH"):
            return status_response(code, f'{plural} "{NAME}" is forbidden: exceeded quota: no-more', NAME, "Forbidden")
        return None

    api.refuse = refuse
    run(runtime(api), clock, 900)
    tries = [w for w in writes_to(api, plural, NAME) + writes_to(api, plural, f"{NAME}-weights")
             if w.startswith(("POST", "PATCH"))]
    assert 1 <= len(tries) <= 9, tries
    refusals = [n for (reason, _), n in events(api).items() if reason == "ObjectRejected"]
    assert refusals == [1], events(api)
    assert status_writes(api) <= 4


def test_the_backoff_never_overflows() -> None:
    book = RejectionBook()
    exc = ApiException(status=403, reason="Forbidden")
    exc.body = json.dumps({"message": "no"})
    rejected = rejection_of(exc, "PersistentVolumeClaim/expand", "x", {"a": 1})
    assert rejected is not None
    delays = [book.failed(("ns", "x"), rejected, 0.0) for _ in range(5000)]
    assert delays[:6] == [10, 20, 40, 80, 160, 300] and set(delays[6:]) == {300.0}


def test_one_event_per_cause_per_hour_however_the_causes_alternate() -> None:
    book = RejectionBook()
    posted = [book.should_post(("ns", "x"), cause, t) for t in range(0, 3600, 5) for cause in ("a", "b")]
    assert posted.count(True) == 2
    assert book.should_post(("ns", "x"), "a", 3601.0)
    many = [book.should_post(("ns", "y"), f"cause {i}", 0.0) for i in range(1000)]
    assert all(many) and len(book._posted[("ns", "y")]) == rejections.CAUSES_KEPT, "memory bounded"


def test_a_multi_node_servers_service_is_the_headless_one_its_own_group_created(clock: Clock) -> None:
    """The LeaderWorkerSet controller creates a headless Service under the group's (= the server's) name; it is
    controlled by the server's own LeaderWorkerSet, so it is the server's Service. The same Service controlled by
    a LeaderWorkerSet that is not the server's is foreign."""
    for ours in (True, False):
        api = world(nodes=2)
        rt = runtime(api)
        run(rt, clock, 2, nodes=2)
        group = api.get("leaderworkerset.x-k8s.io", "leaderworkersets", NS, NAME)
        assert group is not None
        controller = group["metadata"]["uid"] if ours else "uid-another-group"
        api.put("", "services", NS, {"apiVersion": "v1", "kind": "Service", "metadata": {
            "name": NAME, "labels": {"leaderworkerset.sigs.k8s.io/name": NAME}, "ownerReferences": [{
                "apiVersion": "leaderworkerset.x-k8s.io/v1", "kind": "LeaderWorkerSet", "name": NAME,
                "uid": controller, "controller": True}]},
            "spec": {"type": "ClusterIP", "clusterIP": "None", "selector": {"leaderworkerset.sigs.k8s.io/name": NAME},
                     "publishNotReadyAddresses": True}})  # as the API server stores it (type defaulted)
        run(rt, clock, 30, nodes=2)
        service = api.get("", "services", NS, NAME)
        assert service is not None
        reasons = {c["reason"] for c in api.objects[KEY]["status"]["conditions"]}
        if ours:
            assert service["spec"]["selector"].get("ctxfit.io/server") == NAME, "pointed at the leaders"
            assert "ForeignObject" not in reasons
        else:
            assert service["spec"]["selector"] == {"leaderworkerset.sigs.k8s.io/name": NAME}, "never written"
            assert "ForeignObject" in reasons
