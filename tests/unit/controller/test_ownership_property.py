"""No write of the operator ever targets an object it does not own.

Hypothesis draws a world: an InferenceServer (single- or multi-node, with or without autoscaling, a weights
claim retained or not, on an expandable StorageClass or not) and, under the name of each of its children
(Deployment, LeaderWorkerSet, Service, ScaledObject, the weights claims ``NAME-weights`` and ``NAME-weights-2``),
nothing, an object of the server's own, or a foreign one (no owner, forged ctxfit labels, another server's uid,
another kind's reference, a ReplicaSet's, a claim marker naming someone else). Then a sequence of what happens to
a server: passes, a download that runs out of space (the claim grows or is replaced and the old one deleted),
``retain`` toggled, autoscaling added or removed, the spec broken (scale to zero, pause) and fixed, and a race
(an object swapped for a foreign one between the operator's read and its write).

The full ``reconcile`` runs against ``fakeapi.FakeApiServer`` (both client stacks go through it). Checked on
every request: a change or delete is only ever *applied* to an object that names the server by uid, a
request that reached a foreign object changed nothing, a workload written mounts no claim that is not the
server's, and every foreign object ends exactly as it was.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass
from typing import Any

from ctxfit.controller.kube.claims import ClaimsApi
from ctxfit.controller.kube.client import Kube
from ctxfit.controller.reconcile import Runtime, reconcile
from ctxfit.controller.settings import Settings
from ctxfit.controller.telemetry.metrics import Metrics
from ctxfit.controller.views.ownership import holder_of
from ctxfit.controller.views.pods import PodView
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.unit.controller.apiworld import CHILDREN, H100, NS, SERVED, UID, child, full_download_pod, spec
from tests.unit.controller.kube.fakeapi import FakeApiServer, Request

SERVER_KEY = ("ctxfit.io", "inferenceservers", NS)
OWNERSHIPS = ("absent", "ours", "none", "forged-labels", "other-uid", "other-kind", "replicaset", "other-marker")


def owned(obj: dict[str, Any] | None, kind: str) -> bool:
    holder = holder_of(obj)
    return holder is not None and holder.owns(UID, kind)


@dataclass
class World:
    name: str
    nodes: int
    autoscaling: bool
    retain: bool
    storage_class: str
    ownership: dict[str, str]
    steps: list[str]
    backoff: bool


STEPS = ("pass", "pass", "pass", "volume-full", "toggle-retain", "toggle-autoscaling", "break-spec", "fix-spec",
         "race", "grow-size")


@st.composite
def worlds(draw: st.DrawFn) -> World:
    nodes = draw(st.sampled_from([1, 1, 2]))
    return World(
        name=draw(st.sampled_from(["billing", "kubernetes", "llama"])),
        nodes=nodes, autoscaling=draw(st.booleans()), retain=draw(st.booleans()),
        storage_class=draw(st.sampled_from(["standard", "fast"])),
        ownership={which: draw(st.sampled_from(("absent", "absent", "absent", "ours", *OWNERSHIPS)))
                   for which in CHILDREN},
        steps=draw(st.lists(st.sampled_from(STEPS), min_size=3, max_size=12)),
        backoff=draw(st.booleans()),
    )


def fake_world(world: World) -> FakeApiServer:
    api = FakeApiServer(served=SERVED)
    api.put("storage.k8s.io", "storageclasses", "", {"metadata": {"name": "standard", "annotations": {
        "storageclass.kubernetes.io/is-default-class": "true"}}, "allowVolumeExpansion": False})
    api.put("storage.k8s.io", "storageclasses", "", {"metadata": {"name": "fast"}, "allowVolumeExpansion": True})
    api.put(*SERVER_KEY[:2], NS, {"apiVersion": "ctxfit.io/v1alpha1", "kind": "InferenceServer",
                                  "metadata": {"name": world.name, "uid": UID},
                                  "spec": spec(nodes=world.nodes, autoscaling=world.autoscaling, retain=world.retain,
                                               storage_class=world.storage_class)})
    for which, ownership in world.ownership.items():
        if ownership != "absent":
            group, plural, *_ = CHILDREN[which]
            api.put(group, plural, NS, child(which, world.name, ownership))
    return api


def _kind_of(request: Request) -> str:
    return {plural: kind for _, plural, _, kind, _ in CHILDREN.values()}.get(request.key[1], request.key[1])


def check_log(api: FakeApiServer, name: str) -> int:
    """Every write of the log: a change applied only to the server's own object. Returns the writes counted."""
    count = 0
    for request in api.writes():
        _group, plural, namespace, obj_name = request.key
        if plural == "events" or (plural == "inferenceservers" and obj_name == name):
            continue
        count += 1
        assert namespace == NS, request
        if request.method == "POST":
            continue  # a create: refused with 409 when the name is taken
        kind = _kind_of(request)
        if request.before is None:
            assert request.status == 404, request
        elif not owned(request.before, kind):
            assert not 200 <= request.status < 300, f"a write reached a foreign object: {request}"
    return count


SEEN: dict[str, int] = {"worlds": 0, "writes": 0, "foreign": 0, "created": 0, "foreign-reported": 0, "patched": 0,
                        "deleted": 0, "refused-by-test": 0, "mounts-checked": 0}


@settings(max_examples=120, deadline=None, suppress_health_check=list(HealthCheck))
@given(worlds())
def test_no_write_of_the_operator_ever_targets_an_object_it_does_not_own(world: World) -> None:
    run_world(world)


def run_world(world: World) -> None:  # noqa: C901 - one world, every child kind
    """Play ``world`` through the full reconcile and check every request (the module docstring); counts in SEEN."""
    api = fake_world(world)
    api.after_write = check_mounts
    MOUNT_VIOLATIONS.clear()
    foreign = {key: copy.deepcopy(obj) for key, obj in api.objects.items()
               if key[1] in {c[1] for c in CHILDREN.values()} and not owned(obj, obj["kind"])}
    kube = Kube(api.api_client(), instance="test")
    cfg = Settings(metrics_port=0, health_port=0, keda_enabled=True, prometheus_address="http://prom:9090",
                   calibration_configmap="", backoff_seconds=0)
    rt = Runtime(settings=cfg, kube=kube, metrics=Metrics(), claims=ClaimsApi(kube))
    nodes = H100 if world.nodes > 1 else H100[:1]
    key = (*SERVER_KEY[:2], NS, world.name)
    for step in world.steps:
        server = api.objects[key]
        pods: tuple[PodView, ...] = ()
        if step == "volume-full":
            found = full_download_pod(server)
            pods = (found,) if found is not None else ()
        elif step == "toggle-retain":
            template = server["spec"]["model"]["cache"]["volumeClaimTemplate"]
            template["retain"] = not template["retain"]
        elif step == "toggle-autoscaling":
            if "autoscaling" in server["spec"]:
                del server["spec"]["autoscaling"]
            else:
                server["spec"]["autoscaling"] = {"minReplicas": 1, "maxReplicas": 3}
        elif step == "break-spec":
            server["spec"]["context"] = {"target": -1}
        elif step == "fix-spec":
            server["spec"]["context"] = {"target": 32768}
        elif step == "grow-size":
            server["spec"]["model"]["cache"]["volumeClaimTemplate"]["size"] = "200Gi"
        elif step == "race":
            swap_next_write(api, foreign)
        server["metadata"]["generation"] = int(server["metadata"].get("generation") or 1) + 1
        for _ in range(2):  # the pass, and the one its requeue asks for (the refusal book is kept)
            if not world.backoff:  # half the worlds retry every refused write at once (more writes to check)
                for entry in list(rt.rejections._entries.values()):
                    entry.next_try = 0.0
            reconcile(rt, NS, world.name, nodes, pods)
    SEEN["worlds"] += 1
    assert not MOUNT_VIOLATIONS, MOUNT_VIOLATIONS
    SEEN["writes"] += check_log(api, world.name)
    for obj_key, before in foreign.items():
        assert api.objects.get(obj_key) == before, f"foreign {obj_key} changed or vanished"
    SEEN["foreign"] += len(foreign)
    SEEN["created"] += sum(1 for r in api.writes() if r.method == "POST" and r.status == 201
                           and r.key[1] in ("deployments", "leaderworkersets"))
    SEEN["patched"] += sum(1 for r in api.writes() if r.method == "PATCH" and r.status == 200
                           and r.key[1] != "inferenceservers")
    SEEN["deleted"] += sum(1 for r in api.writes() if r.method == "DELETE" and r.status == 200)
    SEEN["refused-by-test"] += sum(1 for r in api.writes() if r.method in ("PATCH", "DELETE") and r.status in (409, 422)
                                   and r.before is not None and not owned(r.before, _kind_of(r)))
    conditions = (api.objects[key].get("status") or {}).get("conditions") or []
    SEEN["foreign-reported"] += any(c.get("reason") == "ForeignObject" for c in conditions)


def mounted_claims(workload: dict[str, Any]) -> set[str]:
    """Claim names the pod templates of a Deployment or LeaderWorkerSet mount."""
    spec_ = workload.get("spec") or {}
    templates = [spec_.get("template") or {}]
    group = spec_.get("leaderWorkerTemplate") or {}
    templates += [group.get("leaderTemplate") or {}, group.get("workerTemplate") or {}]
    return {str(v["persistentVolumeClaim"]["claimName"]) for t in templates
            for v in (t.get("spec") or {}).get("volumes") or [] if "persistentVolumeClaim" in v}


MOUNT_VIOLATIONS: list[str] = []
"""Filled by ``check_mounts`` (an assertion inside the fake would be caught by reconcile, which never raises)."""


def check_mounts(fake: FakeApiServer, request: Request) -> None:
    """A workload whose pod template is written with success mounts only claims that are the server's at that
    moment (a scale to zero of a workload whose claim was swapped for a foreign one since is the safe move)."""
    if request.key[1] not in ("deployments", "leaderworkersets") or not 200 <= request.status < 300:
        return
    ops = request.body if isinstance(request.body, list) else []
    if request.method == "PATCH" and all(op["op"] == "test" or op["path"] == "/spec/replicas" for op in ops):
        return  # a scale (to zero): it writes no pod template
    workload = fake.objects.get(request.key) if request.method != "DELETE" else None
    for claim in mounted_claims(workload or {}):
        obj = fake.objects.get(("", "persistentvolumeclaims", NS, claim))
        if obj is not None and not owned(obj, "PersistentVolumeClaim"):
            MOUNT_VIOLATIONS.append(f"{request.method} {request.key} mounts foreign claim {claim}")
        SEEN["mounts-checked"] += 1


def swap_next_write(api: FakeApiServer, foreign: dict[Any, Any]) -> None:
    """Before the operator's next PATCH or DELETE of a child, replace that object by a foreign one of the same name
    (a race between its read and its write): the write must change nothing."""
    def swap(fake: FakeApiServer, method: str, key: tuple[str, str, str, str]) -> None:
        if method not in ("PATCH", "DELETE") or key[1] not in {c[1] for c in CHILDREN.values()}:
            return
        stored = fake.objects.get(key)
        if stored is None:
            return
        fake.before_write = None
        replaced = copy.deepcopy(stored)
        replaced["metadata"] = {"name": key[3], "namespace": key[2], "uid": "uid-swapped-in",
                                "resourceVersion": "1", "labels": {"team": "billing"}}
        fake.objects[key] = replaced
        foreign[key] = copy.deepcopy(replaced)

    api.before_write = swap


def test_the_property_exercised_both_sides() -> None:
    """Fixed worlds make the checks bite on every side: the operator creates, patches and deletes its own objects,
    meets foreign ones and reports them, a race is caught by the write's own guard, workloads mount claims."""
    SEEN.update(dict.fromkeys(SEEN, 0))
    every = dict.fromkeys(CHILDREN, "absent")
    for world in (
        World("llama", 1, True, False, "standard", every, ["pass", "pass", "volume-full", "pass", "toggle-autoscaling",
                                                         "pass"], True),
        World("billing", 1, False, False, "standard", {**every, "service": "none", "claim2": "other-uid"},
              ["pass", "volume-full", "pass"], False),
        World("llama", 1, False, False, "fast", {**every, "deployment": "ours", "claim": "ours"},
              ["race", "pass", "grow-size", "pass"], False),
        World("llama", 1, False, False, "standard", {**every, "deployment": "ours"}, ["race", "pass", "pass"], False),
        World("kubernetes", 2, True, True, "standard", {**every, "lws": "forged-labels", "scaledobject": "other-uid"},
              ["pass", "pass"], False),
        World("llama", 1, False, False, "standard", every, ["pass", "toggle-retain", "pass", "toggle-retain"], False),
    ):
        run_world(world)
    assert SEEN["writes"] > 10 and SEEN["foreign"] >= 4 and SEEN["created"] >= 2, SEEN
    assert SEEN["foreign-reported"] >= 2 and SEEN["patched"] >= 2 and SEEN["deleted"] >= 1, SEEN
    assert SEEN["refused-by-test"] >= 1, SEEN  # the race: the guard of the write itself held
    assert SEEN["mounts-checked"] >= 2, SEEN
