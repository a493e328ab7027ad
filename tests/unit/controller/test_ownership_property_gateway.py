"""No write targets an object the operator does not own, for the write paths that came after the ownership work: the
gateway's InferencePool apply and delete, its pod label patches (``kube/pools.py``), and model resolution's
resolver pods (``kube/resolution.py``). No write ever reaches an object that does not name the server by uid.

Hypothesis draws, under each name the operator writes, nothing, the server's own object, or a foreign one (no owner,
forged ctxfit labels, another server's uid, the server's uid in a reference that is not the controller, our reference
not first); engine pods whose controller chain is the server's (pod -> ReplicaSet -> the server's Deployment), or
looks like it by name only (a forged ReplicaSet reference, a ReplicaSet of the same name controlled by another
Deployment, the server label missing); and a race (the object swapped for a foreign one between the read and the
write). Every request against ``fakeapi.FakeApiServer`` is checked: a change or delete applied only to an object that
is the server's (for a pod: by the uid chain), a request that reached a foreign object changed nothing, and every
foreign object ends exactly as it was.
"""

from __future__ import annotations

import contextlib
import copy
from dataclasses import dataclass
from typing import Any

from ctxfit.api import InferenceServerSpec
from ctxfit.controller.converge.resolution import need
from ctxfit.controller.converge.types import ResolutionRequest
from ctxfit.controller.kube.client import Kube
from ctxfit.controller.kube.guarded import Foreign
from ctxfit.controller.kube.pools import apply_pool, delete_pool, patch_pod_labels
from ctxfit.controller.kube.resolution import Resolutions
from ctxfit.controller.kube.resolver_pod import resolver_pod_name
from ctxfit.controller.settings import Settings
from ctxfit.controller.views.ownership import holder_of
from ctxfit.controller.views.routing import pool_view
from ctxfit.render.inferencepool import CONTEXT_LABEL
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.unit.controller.kube.fakeapi import FakeApiServer

NS, NAME, UID = "team-a", "llama", "uid-the-server"
DEPLOYMENT_UID, RS = "uid-the-deployment", "llama-5d8f7c9b4"
POOL_KEY = ("inference.networking.k8s.io", "inferencepools", NS, "llama-pool")
SERVED = {"inferencepools", "pods", "replicasets", "statefulsets", "deployments"}
OURS = {"apiVersion": "ctxfit.io/v1alpha1", "kind": "InferenceServer", "name": NAME, "uid": UID, "controller": True}
POOL_OWNERSHIPS = ("absent", "ours", "ours-second", "none", "forged-labels", "other-uid", "not-controller-elsewhere")
POD_KINDS = ("chain", "forged-rs-uid", "rs-of-another-deployment", "no-server-label", "no-owner")
SETTINGS = Settings(metrics_port=0, health_port=0, resolve_backoff_seconds=5, resolver_image="ctxfit:test")
TOKEN_SPEC = {"model": {"name": "acme/gated-model", "tokenSecretRef": {"name": "hf", "key": "token"}},
              "engine": {"kind": "vllm"}, "gpu": {"count": 1}}


def pool(ownership: str) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": POOL_KEY[3], "labels": {"team": "billing"}}
    other = {**OURS, "name": "other", "uid": "uid-an-earlier-server"}
    if ownership == "ours":
        meta["ownerReferences"] = [OURS]
    elif ownership == "ours-second":
        meta["ownerReferences"] = [{"apiVersion": "v1", "kind": "ConfigMap", "name": "x", "uid": "uid-x"}, OURS]
    elif ownership == "forged-labels":
        meta["labels"] = {"app.kubernetes.io/managed-by": "ctxfit", "ctxfit.io/server": NAME}
    elif ownership == "other-uid":
        meta["ownerReferences"] = [other]
    elif ownership == "not-controller-elsewhere":
        meta["ownerReferences"] = [{"apiVersion": "apps/v1", "kind": "Deployment", "name": "x", "uid": UID,
                                    "controller": True}]
    return {"apiVersion": "inference.networking.k8s.io/v1", "kind": "InferencePool", "metadata": meta,
            "spec": {"selector": {"matchLabels": {"app": "billing"}}, "targetPorts": [{"number": 8080}]}}


def rendered_pool() -> dict[str, Any]:
    return {"apiVersion": "inference.networking.k8s.io/v1", "kind": "InferencePool",
            "metadata": {"name": POOL_KEY[3], "namespace": NS, "labels": {"app.kubernetes.io/managed-by": "ctxfit"},
                         "annotations": {}, "ownerReferences": [{**OURS, "blockOwnerDeletion": True}]},
            "spec": {"selector": {"matchLabels": {"ctxfit.io/server": NAME}}, "targetPorts": [{"number": 8000}]}}


def engine_pod(index: int, kind: str, rs_uid: str) -> dict[str, Any]:
    labels = {"ctxfit.io/server": NAME, "pod-template-hash": "5d8f7c9b4"}
    if kind == "no-server-label":
        labels = {"pod-template-hash": "5d8f7c9b4"}
    ref = {"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": RS, "uid": rs_uid, "controller": True}
    if kind == "forged-rs-uid":
        ref = {**ref, "uid": "uid-forged"}
    meta: dict[str, Any] = {"name": f"llama-pod-{index}", "labels": labels,
                            "ownerReferences": [] if kind == "no-owner" else [ref]}
    return {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": {"containers": [{"name": "engine"}]}}


def owned_pool(obj: dict[str, Any] | None) -> bool:
    holder = holder_of(obj)
    return holder is not None and holder.owns(UID, "InferencePool")


def pod_in_chain(api: FakeApiServer, obj: dict[str, Any] | None) -> bool:
    """The pod's controller is a ReplicaSet whose uid is the stored one's and whose controller is the server's
    Deployment, and the pod carries the server's label."""
    if obj is None:
        return False
    meta = obj["metadata"]
    ref = next((r for r in meta.get("ownerReferences") or [] if r.get("controller")), None)
    rs = api.get("apps", "replicasets", NS, str((ref or {}).get("name")))
    if ref is None or rs is None or rs["metadata"]["uid"] != ref.get("uid"):
        return False
    rs_ref = next((r for r in rs["metadata"].get("ownerReferences") or [] if r.get("controller")), None)
    return rs_ref is not None and rs_ref.get("uid") == DEPLOYMENT_UID and \
        (meta.get("labels") or {}).get("ctxfit.io/server") == NAME


@dataclass
class World:
    pool: str
    resolver: str
    pods: list[str]
    rs_of_another: bool
    race: str


@st.composite
def worlds(draw: st.DrawFn) -> World:
    return World(pool=draw(st.sampled_from(POOL_OWNERSHIPS)),
                 resolver=draw(st.sampled_from(("absent", "ours", "none", "other-uid"))),
                 pods=draw(st.lists(st.sampled_from(POD_KINDS), min_size=1, max_size=4)),
                 rs_of_another=draw(st.booleans()),
                 race=draw(st.sampled_from(("none", "pool", "pod", "resolver"))))


def fake_world(world: World) -> FakeApiServer:
    api = FakeApiServer(served=SERVED)
    api.put("apps", "deployments", NS, {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {
        "name": NAME, "uid": DEPLOYMENT_UID, "ownerReferences": [OURS]}, "spec": {}})
    rs_owner = "uid-another-deployment" if world.rs_of_another else DEPLOYMENT_UID
    rs = api.put("apps", "replicasets", NS, {"apiVersion": "apps/v1", "kind": "ReplicaSet", "metadata": {
        "name": RS, "ownerReferences": [{"apiVersion": "apps/v1", "kind": "Deployment", "name": NAME,
                                         "uid": rs_owner, "controller": True}]}})
    for index, kind in enumerate(world.pods):
        api.put("", "pods", NS, engine_pod(index, kind, rs["metadata"]["uid"]))
    if world.pool != "absent":
        api.put(*POOL_KEY[:3], pool(world.pool))
    if world.resolver != "absent":
        wanted = need(InferenceServerSpec.model_validate(TOKEN_SPEC), NS)
        meta: dict[str, Any] = {"name": resolver_pod_name(NAME, wanted.key), "labels": {"app": "mine"}}
        if world.resolver == "ours":
            meta["ownerReferences"] = [OURS]
        elif world.resolver == "other-uid":
            meta["ownerReferences"] = [{**OURS, "uid": "uid-an-earlier-server"}]
        api.put("", "pods", NS, {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": {},
                                 "status": {"phase": "Running"}})
    return api


def swap_before_write(api: FakeApiServer, which: str, foreign: dict[Any, Any]) -> None:
    """Before the first PATCH/DELETE of ``which`` (pool, engine pod, resolver pod), replace the object by a foreign
    one of the same name (no owner, another uid): the write must change nothing."""
    def swap(fake: FakeApiServer, method: str, key: tuple[str, str, str, str]) -> None:
        plural = key[1]
        hit = (which == "pool" and plural == "inferencepools") or \
            (which == "pod" and plural == "pods" and "-pod-" in key[3]) or \
            (which == "resolver" and plural == "pods" and "-resolve-" in key[3])
        if method not in ("PATCH", "DELETE") or not hit or fake.objects.get(key) is None:
            return
        fake.before_write = None
        replaced = copy.deepcopy(fake.objects[key])
        replaced["metadata"] = {"name": key[3], "namespace": key[2], "uid": "uid-swapped-in", "resourceVersion": "1",
                                "labels": dict(replaced["metadata"].get("labels") or {})}
        fake.objects[key] = replaced
        foreign[key] = copy.deepcopy(replaced)

    api.before_write = swap


SEEN: dict[str, int] = {"worlds": 0, "applied": 0, "refused": 0, "pool-writes": 0, "label-patches": 0,
                        "resolver-deletes": 0, "foreign-kept": 0}


def check_log(api: FakeApiServer, before_objects: dict[Any, Any]) -> None:
    for request in api.writes():
        if request.method == "POST":
            continue  # a create: 409 when the name is taken
        assert request.before is not None or request.status == 404, request
        plural = request.key[1]
        if plural == "inferencepools":
            ok = owned_pool(request.before)
            SEEN["pool-writes"] += 1
        elif "-resolve-" in request.key[3]:
            ok = holder_of(request.before) is not None and holder_of(request.before).owns(UID, "Pod")  # type: ignore[union-attr]
            SEEN["resolver-deletes"] += request.method == "DELETE"
        else:
            ok = pod_in_chain(api, request.before)
            SEEN["label-patches"] += 1
        if 200 <= request.status < 300:
            assert ok, f"a write reached an object that is not the server's: {request}"
            SEEN["applied"] += 1
        else:
            SEEN["refused"] += 1
    del before_objects


def run_world(world: World) -> None:
    api = fake_world(world)
    foreign = {k: copy.deepcopy(o) for k, o in api.objects.items()
               if (k[1] == "inferencepools" and not owned_pool(o))
               or (k[1] == "pods" and "-resolve-" in k[3] and not holder_of(o).owns(UID, "Pod"))  # type: ignore[union-attr]
               or (k[1] == "pods" and "-pod-" in k[3] and not pod_in_chain(api, o))}
    if world.race != "none":
        swap_before_write(api, world.race, foreign)
    kube = Kube(api.api_client(), instance="test")
    # the pool: applied as the routing pass would (with the view it read), then deleted (the server stopped creating)
    live = api.get(*POOL_KEY)
    view = pool_view(live) if live is not None else None
    with contextlib.suppress(Foreign):
        apply_pool(kube, rendered_pool(), view)
    delete_pool(kube, NS, POOL_KEY[3], UID)
    # the context labels of every engine pod the routing pass would name (those whose owner name is the RS)
    for index, _ in enumerate(world.pods):
        patch_pod_labels(kube, NS, f"llama-pod-{index}", NAME, RS, {CONTEXT_LABEL: "32768"}, DEPLOYMENT_UID)
    # the resolver pod: created (or found taken), then deleted once it reported
    res = Resolutions(kube, SETTINGS, lambda key: None)
    wanted = need(InferenceServerSpec.model_validate(TOKEN_SPEC), NS)
    res.request((NS, NAME), ResolutionRequest(wanted), {"metadata": {"namespace": NS, "name": NAME, "uid": UID}})
    res._delete_pod((NS, resolver_pod_name(NAME, wanted.key), UID, ""))
    res.close()
    check_log(api, foreign)
    for key, obj in foreign.items():
        assert api.objects.get(key) == obj, f"foreign {key} changed or vanished"
    SEEN["foreign-kept"] += len(foreign)
    SEEN["worlds"] += 1


@settings(max_examples=150, deadline=None, suppress_health_check=list(HealthCheck))
@given(worlds())
def test_gateway_and_resolver_writes_never_target_an_object_the_server_does_not_own(world: World) -> None:
    run_world(world)


def test_the_property_exercised_both_sides() -> None:
    """Fixed worlds make the checks bite on every side: writes applied to the server's own objects, refused or never
    sent for foreign ones, a race caught by the write's own guard."""
    SEEN.update(dict.fromkeys(SEEN, 0))
    for world in (
        World("ours", "ours", ["chain", "chain"], False, "none"),
        World("ours-second", "absent", ["chain"], False, "none"),
        World("other-uid", "none", ["forged-rs-uid", "no-server-label", "no-owner"], False, "none"),
        World("ours", "ours", ["chain"], True, "none"),
        World("ours", "ours", ["chain"], False, "pool"),
        World("ours", "ours", ["chain"], False, "pod"),
        World("ours", "ours", ["chain"], False, "resolver"),
        World("absent", "other-uid", ["chain"], False, "none"),
    ):
        run_world(world)
    assert SEEN["applied"] >= 6 and SEEN["refused"] >= 3 and SEEN["foreign-kept"] >= 8, SEEN
    assert SEEN["label-patches"] >= 3 and SEEN["resolver-deletes"] >= 2 and SEEN["pool-writes"] >= 4, SEEN
