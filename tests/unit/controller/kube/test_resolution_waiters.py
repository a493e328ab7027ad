"""The shared resolutions keep an entry only while a live server waits on it (``Resolutions.retain``/``forget``):
a server deleted while its resolution runs or after it ended is not woken and not kept, an edited spec lets the
old key go, and servers that come and go leave nothing behind (bounded memory for a long-running operator)."""

from __future__ import annotations

import threading
import time
from typing import Any

from ctxfit.api import InferenceServerSpec
from ctxfit.controller.converge.resolution import need
from ctxfit.controller.converge.types import Need, ResolutionRequest
from ctxfit.controller.kube.resolution import Resolutions
from ctxfit.controller.settings import Settings
from ctxfit.vocab.modelsource import ModelSource

SETTINGS = Settings(metrics_port=0, health_port=0)
BODY = {"metadata": {"namespace": "team-a", "name": "x", "uid": "uid-x"}}


def spec(repo: str) -> dict[str, Any]:
    return {"model": {"name": repo}, "engine": {"kind": "vllm", "version": "0.19.0"},
            "gpu": {"product": "NVIDIA-H100-80GB-HBM3", "count": 1}}


def wanted(repo: str) -> Need:
    return need(InferenceServerSpec.model_validate(spec(repo)), "team-a")


class Hub:
    """A resolve function that holds each resolution until ``release`` is set, and counts them."""

    def __init__(self, hold: bool = False) -> None:
        self.release, self.calls = threading.Event(), 0
        if not hold:
            self.release.set()

    def __call__(self, repo: str, **_: Any) -> ModelSource:
        self.calls += 1
        self.release.wait(10)
        return ModelSource(config={"architectures": ["Qwen2ForCausalLM"]}, repo=repo)


def settled(res: Resolutions, server: tuple[str, str], repo: str) -> Any:
    deadline = time.monotonic() + 10
    while (view := res.view(server, spec(repo))) is not None and view.in_flight:
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.01)
    return view


def test_a_server_deleted_while_its_resolution_runs_is_not_woken_and_the_entry_goes() -> None:
    hub, woken, ended = Hub(hold=True), [], []
    res = Resolutions(None, SETTINGS, woken.append, resolve=hub)
    res.finished = lambda kind, outcome, seconds: ended.append(outcome)
    res.request(("team-a", "gone"), ResolutionRequest(wanted("acme/one")), BODY)
    res.forget(("team-a", "gone"))
    hub.release.set()
    res._pool.shutdown(wait=True)  # the running resolution ends (and is recorded, or not)
    assert hub.calls == 1 and woken == [] and ended == [], "nobody waits on it: its result is discarded"
    fresh = res.view(("team-a", "new"), spec("acme/one"))
    assert fresh is not None and fresh.source is None and not fresh.in_flight, "the entry was dropped"


def test_an_ended_resolution_is_kept_while_a_server_waits_and_dropped_with_the_last() -> None:
    hub, woken = Hub(), []
    res = Resolutions(None, SETTINGS, woken.append, resolve=hub)
    for name in ("one", "two"):
        res.request(("team-a", name), ResolutionRequest(wanted("acme/shared")), BODY)
    assert settled(res, ("team-a", "one"), "acme/shared").source is not None
    res.forget(("team-a", "one"))
    kept = res.view(("team-a", "two"), spec("acme/shared"))
    assert kept is not None and kept.source is not None, "two still waits on it"
    res.forget(("team-a", "two"))
    res.forget(("team-a", "three"))  # a server that never asked: nothing to drop, no error
    gone = res.view(("team-a", "four"), spec("acme/shared"))
    assert gone is not None and gone.source is None and not gone.in_flight
    res.close()


def test_an_edited_model_lets_the_old_key_go() -> None:
    hub = Hub()
    res = Resolutions(None, SETTINGS, lambda key: None, resolve=hub)
    server = ("team-a", "edited")
    res.request(server, ResolutionRequest(wanted("acme/old")), BODY)
    assert settled(res, server, "acme/old").source is not None
    res.retain(server, [wanted("acme/old").key])
    again = res.view(("team-a", "other"), spec("acme/old"))
    assert again is not None and again.source is not None, "still needed: kept"
    res.forget(("team-a", "other"))
    res.retain(server, [wanted("acme/new").key])  # its spec now names another model
    old = res.view(("team-a", "probe"), spec("acme/old"))
    assert old is not None and old.source is None, "no server needs acme/old any more"
    res.close()


def test_churn_leaves_nothing_behind() -> None:
    hub = Hub()
    res = Resolutions(None, SETTINGS, lambda key: None, resolve=hub)
    for i in range(50):
        server, repo = ("team-a", f"s{i}"), f"acme/m{i}"
        res.request(server, ResolutionRequest(wanted(repo)), BODY)
        assert settled(res, server, repo).source is not None
        res.forget(server)
    assert res._entries == {}, "every entry belonged to a deleted server"
    res.close()


def test_reconcile_lets_go_of_an_edited_model_and_of_a_deleted_server() -> None:
    """The wiring: each pass retains only the keys its spec needs (``reconcile.read.snapshot``), and a pass that
    finds the server gone forgets it (the DELETED watch event does too: ``app.handlers.on_server``)."""
    from ctxfit.controller.reconcile import reconcile

    from tests.unit.controller.builders import RTX
    from tests.unit.controller.fakekube import FakeKube, runtime, server

    body = server()
    body["spec"]["model"] = {"name": "acme/old"}
    kube = FakeKube(body)
    rt = runtime(kube)
    rt.resolutions = Resolutions(None, SETTINGS, lambda key: None, resolve=Hub())
    key = (body["metadata"]["namespace"], body["metadata"]["name"])
    reconcile(rt, *key, (RTX,), ())
    assert settled(rt.resolutions, ("ns", "probe"), "acme/old").source is not None
    rt.resolutions.forget(("ns", "probe"))
    body["spec"]["model"] = {"name": "acme/new"}
    reconcile(rt, *key, (RTX,), (), body=body)
    old = rt.resolutions.view(("ns", "probe"), spec("acme/old"))
    assert old is not None and old.source is None, "the edited server no longer waits on acme/old"
    assert settled(rt.resolutions, key, "acme/new").source is not None
    kube.server = None
    reconcile(rt, *key, (RTX,), ())
    assert rt.resolutions._entries == {}, "the deleted server waits on nothing"
    rt.resolutions.close()
