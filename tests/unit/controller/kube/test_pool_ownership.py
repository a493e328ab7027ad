"""The inference gateway's writes follow the ownership rule every child write follows (``kube/guarded.py``): an
InferencePool is written only when absent or owned by the server's uid, deleted only when it is; a pod is
relabelled only when its controller is controlled by the server's own workload (by uid). Over
``fakeapi.FakeApiServer`` (JSON patch ``test`` semantics, uid preconditions); the real API server runs them in
tests/e2e/test_gateway.py and tests/e2e/test_chart_incluster_gateway.py."""

from __future__ import annotations

import copy
from typing import Any

import pytest
from ctxfit.controller.kube.client import Kube
from ctxfit.controller.kube.guarded import Foreign
from ctxfit.controller.kube.pools import apply_pool, delete_pool, get_pool, patch_pod_labels

from .fakeapi import FakeApiServer

NS = "inference"
SERVER_UID = "server-uid"
GIE = "inference.networking.k8s.io"
LABELS = {"ctxfit.io/served-context-length": "32768", "llm-d.ai/context-length-range": "0-32768"}


def _ref(kind: str, name: str, uid: str, api: str) -> dict[str, Any]:
    return {"apiVersion": api, "kind": kind, "name": name, "uid": uid, "controller": True,
            "blockOwnerDeletion": True}


def _pool(owner_uid: str = SERVER_UID, selector: str = "llama") -> dict[str, Any]:
    return {"apiVersion": f"{GIE}/v1", "kind": "InferencePool",
            "metadata": {"name": "llama", "namespace": NS, "labels": {"app.kubernetes.io/managed-by": "ctxfit"},
                         "ownerReferences": [_ref("InferenceServer", "srv", owner_uid, "ctxfit.io/v1alpha1")]},
            "spec": {"selector": {"matchLabels": {"ctxfit.io/inference-pool": selector}},
                     "targetPorts": [{"number": 8000}],
                     "endpointPickerRef": {"name": "epp", "port": {"number": 9002}}}}


def _setup() -> tuple[FakeApiServer, Kube]:
    fake = FakeApiServer()
    return fake, Kube(fake.api_client())


def _pool_writes(fake: FakeApiServer) -> list[str]:
    return [r.method for r in fake.writes() if r.key[1] == "inferencepools"]


def test_a_created_pool_is_written_then_patched_behind_its_owner_uid() -> None:
    fake, kube = _setup()
    apply_pool(kube, _pool(), None)
    stored = fake.get(GIE, "inferencepools", NS, "llama")
    assert stored is not None and stored["metadata"]["ownerReferences"][0]["uid"] == SERVER_UID
    changed = _pool()
    changed["spec"]["targetPorts"] = [{"number": 8000}, {"number": 8001}]
    apply_pool(kube, changed, get_pool(kube, NS, "llama"))
    patch = fake.writes()[-1]
    assert patch.method == "PATCH"
    assert {"op": "test", "path": "/metadata/uid", "value": stored["metadata"]["uid"]} in patch.body
    assert {"op": "test", "path": "/metadata/ownerReferences/0/uid", "value": SERVER_UID} in patch.body
    assert fake.get(GIE, "inferencepools", NS, "llama")["spec"]["targetPorts"] == changed["spec"]["targetPorts"]


@pytest.mark.parametrize("owner", [None, "another-server-uid"])
def test_a_same_named_pool_not_owned_by_the_server_is_never_written(owner: str | None) -> None:
    """By hand (no ownerReference) or an earlier server of the same name (another uid): Foreign, nothing sent."""
    fake, kube = _setup()
    theirs = _pool(owner or "x", selector="theirs")
    if owner is None:
        del theirs["metadata"]["ownerReferences"]
    fake.put(GIE, "inferencepools", NS, theirs)
    before = copy.deepcopy(fake.get(GIE, "inferencepools", NS, "llama"))
    for live in (get_pool(kube, NS, "llama"), None):  # seen, or not seen yet (the create finds the name taken)
        with pytest.raises(Foreign, match="InferencePool llama already exists and is not owned"):
            apply_pool(kube, _pool(), live)
    assert _pool_writes(fake) == ["POST"]  # only the create that found the name taken
    assert fake.get(GIE, "inferencepools", NS, "llama") == before
    delete_pool(kube, NS, "llama", SERVER_UID)
    assert _pool_writes(fake) == ["POST"] and fake.get(GIE, "inferencepools", NS, "llama") == before


def test_a_pool_replaced_between_read_and_patch_is_not_written() -> None:
    """The server's pool is deleted and someone else's created under the name after the operator read it: the
    patch's tests fail (uid), nothing changes, and the recheck says Foreign."""
    fake, kube = _setup()
    apply_pool(kube, _pool(), None)
    live = get_pool(kube, NS, "llama")

    def swap(api: FakeApiServer, method: str, key: tuple[str, str, str, str]) -> None:
        if method == "PATCH" and key[1] == "inferencepools":
            del api.objects[key]
            foreign = _pool("someone-else", selector="theirs")
            api.put(GIE, "inferencepools", NS, foreign)

    fake.before_write = swap
    with pytest.raises(Foreign):
        apply_pool(kube, _pool(), live)
    assert fake.get(GIE, "inferencepools", NS, "llama")["spec"]["selector"]["matchLabels"] == \
        {"ctxfit.io/inference-pool": "theirs"}


def test_delete_takes_only_the_servers_own_pool() -> None:
    fake, kube = _setup()
    apply_pool(kube, _pool(), None)
    uid = fake.get(GIE, "inferencepools", NS, "llama")["metadata"]["uid"]
    delete_pool(kube, NS, "llama", SERVER_UID)
    deletes = [r for r in fake.writes() if r.method == "DELETE"]
    assert len(deletes) == 1 and deletes[0].body["preconditions"] == {"uid": uid}
    assert fake.get(GIE, "inferencepools", NS, "llama") is None
    delete_pool(kube, NS, "llama", SERVER_UID)  # absent: fine, nothing sent
    assert len([r for r in fake.writes() if r.method == "DELETE"]) == 1


# ---- pods: by uid down the owner chain


def _chain(fake: FakeApiServer, workload_uid: str = "deploy-uid", rs_owner: str | None = None) -> dict[str, Any]:
    """A pod of ReplicaSet srv-abc, controlled by the Deployment of uid ``rs_owner`` (default: the server's)."""
    rs = fake.put("apps", "replicasets", NS, {"metadata": {
        "name": "srv-abc", "ownerReferences": [_ref("Deployment", "srv", rs_owner or workload_uid, "apps/v1")]}})
    return fake.put("", "pods", NS, {"metadata": {
        "name": "srv-abc-1", "labels": {"ctxfit.io/server": "srv", "ctxfit.io/inference-pool": "llama"},
        "ownerReferences": [_ref("ReplicaSet", "srv-abc", rs["metadata"]["uid"], "apps/v1")]}})


def test_a_pod_of_the_servers_own_replicaset_is_relabelled_behind_uid_tests() -> None:
    fake, kube = _setup()
    pod = _chain(fake)
    assert patch_pod_labels(kube, NS, "srv-abc-1", "srv", "srv-abc", LABELS, "deploy-uid")
    (patch,) = fake.writes()
    rs_uid = pod["metadata"]["ownerReferences"][0]["uid"]
    assert {"op": "test", "path": "/metadata/uid", "value": pod["metadata"]["uid"]} in patch.body
    assert {"op": "test", "path": "/metadata/ownerReferences/0/uid", "value": rs_uid} in patch.body
    labels = fake.get("", "pods", NS, "srv-abc-1")["metadata"]["labels"]
    assert {k: labels[k] for k in LABELS} == LABELS


def test_a_pod_that_only_looks_like_the_servers_is_never_relabelled() -> None:
    """Same labels and a ReplicaSet of the right name, but the ReplicaSet is another Deployment's (uid), or the
    pod has no controller, or its controller is not a ReplicaSet: nothing is sent."""
    fake, kube = _setup()
    _chain(fake, rs_owner="someone-elses-deployment")
    assert not patch_pod_labels(kube, NS, "srv-abc-1", "srv", "srv-abc", LABELS, "deploy-uid")
    bare = fake.put("", "pods", NS, {"metadata": {"name": "bare", "labels": {"ctxfit.io/server": "srv"}}})
    assert not patch_pod_labels(kube, NS, "bare", "srv", "srv-abc", LABELS, "deploy-uid")
    odd = fake.put("", "pods", NS, {"metadata": {"name": "odd", "ownerReferences": [
        _ref("Job", "srv-abc", fake.get("apps", "replicasets", NS, "srv-abc")["metadata"]["uid"], "batch/v1")]}})
    assert not patch_pod_labels(kube, NS, "odd", "srv", "srv-abc", LABELS, "deploy-uid")
    assert not patch_pod_labels(kube, NS, "gone", "srv", "srv-abc", LABELS, "deploy-uid")
    assert fake.writes() == [] and "ctxfit.io/served-context-length" not in bare["metadata"]["labels"]
    assert "labels" not in fake.get("", "pods", NS, "odd")["metadata"] and odd


def test_a_pod_whose_controller_was_replaced_is_not_relabelled() -> None:
    """The ReplicaSet of that name is another object (uid) than the pod's controller reference names."""
    fake, kube = _setup()
    _chain(fake)
    fake.objects[("apps", "replicasets", NS, "srv-abc")]["metadata"]["uid"] = "a-new-replicaset"
    assert not patch_pod_labels(kube, NS, "srv-abc-1", "srv", "srv-abc", LABELS, "deploy-uid")
    assert fake.writes() == []


def test_a_leader_pod_of_the_servers_leaderworkerset_is_relabelled() -> None:
    fake, kube = _setup()
    sts = fake.put("apps", "statefulsets", NS, {"metadata": {
        "name": "srv", "ownerReferences": [_ref("LeaderWorkerSet", "srv", "lws-uid", "leaderworkerset.x-k8s.io/v1")]}})
    fake.put("", "pods", NS, {"metadata": {"name": "srv-0", "labels": {"ctxfit.io/server": "srv"},
                                           "ownerReferences": [_ref("StatefulSet", "srv", sts["metadata"]["uid"],
                                                                    "apps/v1")]}})
    assert not patch_pod_labels(kube, NS, "srv-0", "srv", "srv", LABELS, "another-lws")
    assert patch_pod_labels(kube, NS, "srv-0", "srv", "srv", LABELS, "lws-uid")
    assert len(fake.writes()) == 1


def test_a_pod_changed_between_read_and_patch_is_left_alone() -> None:
    """The pod is deleted and a same-named one created after the check: the uid test fails (422), nothing
    changes, no error."""
    fake, kube = _setup()
    _chain(fake)

    def swap(api: FakeApiServer, method: str, key: tuple[str, str, str, str]) -> None:
        if method == "PATCH" and key[1] == "pods":
            api.objects[key]["metadata"]["uid"] = "a-new-pod"

    fake.before_write = swap
    assert not patch_pod_labels(kube, NS, "srv-abc-1", "srv", "srv-abc", LABELS, "deploy-uid")
    assert [r.status for r in fake.writes()] == [422]
    assert "ctxfit.io/served-context-length" not in fake.get("", "pods", NS, "srv-abc-1")["metadata"]["labels"]
