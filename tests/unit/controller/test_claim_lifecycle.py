"""The weights claim: retention follows the spec at every change, and a cache-mode round trip
never abandons a filled claim. The whole reconcile over ``fakeapi.FakeApiServer``."""

from __future__ import annotations

from typing import Any

from ctxfit.controller.reconcile import reconcile

from tests.unit.controller.apiworld import H100, KEY, NAME, NS, UID, full_download_pod, runtime, world
from tests.unit.controller.kube.fakeapi import FakeApiServer

CLAIMS = ("", "persistentvolumeclaims", NS)


def passes(api: FakeApiServer, rt: Any, count: int = 3, pods: tuple[Any, ...] = ()) -> None:
    for _ in range(count):
        reconcile(rt, NS, NAME, H100[:1], pods)


def claim(api: FakeApiServer, name: str = f"{NAME}-weights") -> dict[str, Any]:
    found = api.get(*CLAIMS, name)
    assert found is not None, sorted(k[3] for k in api.objects if k[1] == "persistentvolumeclaims")
    return found


def referenced(obj: dict[str, Any]) -> bool:
    return any(ref.get("uid") == UID for ref in obj["metadata"].get("ownerReferences") or [])


def edit(api: FakeApiServer, change: Any) -> None:
    server = api.objects[KEY]
    change(server["spec"])
    server["metadata"]["generation"] = int(server["metadata"]["generation"]) + 1


def set_retain(value: bool) -> Any:
    def change(spec: dict[str, Any]) -> None:
        spec["model"]["cache"]["volumeClaimTemplate"]["retain"] = value
    return change


def test_retain_follows_the_spec_at_every_change_without_a_restart() -> None:
    api = world()
    rt = runtime(api)
    passes(api, rt)
    assert referenced(claim(api)) and claim(api)["metadata"]["annotations"]["ctxfit.io/owner-uid"] == UID
    attempts = len(api.objects[KEY]["status"]["attempts"])
    template = api.get("apps", "deployments", NS, NAME)["spec"]["template"]  # type: ignore[index]
    edit(api, set_retain(True))
    passes(api, rt)
    kept = claim(api)
    assert not referenced(kept), "retain: true added later: the claim outlives the server"
    assert kept["metadata"]["annotations"]["ctxfit.io/owner-uid"] == UID, "still known as the server's"
    assert len(api.objects[KEY]["status"]["attempts"]) == attempts, "retain changes no engine"
    assert api.get("apps", "deployments", NS, NAME)["spec"]["template"] == template  # type: ignore[index]
    edit(api, set_retain(False))
    passes(api, rt)
    assert referenced(claim(api)), "retain: false again: deleted with the server"
    assert len(claim(api)["metadata"]["ownerReferences"]) == 1


def test_a_claim_without_the_marker_gets_it_once() -> None:
    api = world()
    rt = runtime(api)
    passes(api, rt)
    del claim(api)["metadata"]["annotations"]  # a claim an older ctxfit created
    passes(api, rt)
    assert claim(api)["metadata"]["annotations"] == {"ctxfit.io/owner-uid": UID}
    patches = [r for r in api.writes() if r.key[1] == "persistentvolumeclaims" and r.method == "PATCH"]
    passes(api, rt)
    assert [r for r in api.writes() if r.key[1] == "persistentvolumeclaims" and r.method == "PATCH"] == patches


def test_a_cache_mode_round_trip_keeps_the_filled_claim() -> None:
    """The claim was replaced by a larger one (``-weights-2``, hours of download in it); emptyDir, then the
    claim template again: the same filled claim is mounted, none is created or deleted."""
    api = world()
    rt = runtime(api)
    passes(api, rt)
    full = full_download_pod(api.objects[KEY])
    assert full is not None
    passes(api, rt, pods=(full,))
    passes(api, rt)
    assert api.objects[KEY]["status"]["model"]["claimName"] == f"{NAME}-weights-2"
    filled = claim(api, f"{NAME}-weights-2")
    edit(api, lambda spec: spec["model"].update(cache={"emptyDir": {}}))
    passes(api, rt)
    assert api.objects[KEY]["status"]["model"]["cache"] == "emptyDir"
    assert api.objects[KEY]["status"]["model"]["ownedClaim"] == f"{NAME}-weights-2", "remembered"
    assert claim(api, f"{NAME}-weights-2")["metadata"]["uid"] == filled["metadata"]["uid"], "kept"
    edit(api, lambda spec: spec["model"].update(cache={"volumeClaimTemplate": {"storageClassName": "standard"}}))
    writes = len(api.writes())
    passes(api, rt)
    model = api.objects[KEY]["status"]["model"]
    assert model["claimName"] == f"{NAME}-weights-2" and model["cache"] == "volumeClaimTemplate", model
    volumes = api.get("apps", "deployments", NS, NAME)["spec"]["template"]["spec"]["volumes"]  # type: ignore[index]
    assert {"name": "model-cache", "persistentVolumeClaim": {"claimName": f"{NAME}-weights-2"}} in volumes
    created = [r for r in api.writes()[writes:] if r.key[1] == "persistentvolumeclaims" and r.method == "POST"]
    assert not created, "no new, empty claim"
    assert api.get(*CLAIMS, f"{NAME}-weights") is None
