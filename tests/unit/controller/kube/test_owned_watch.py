"""The add-on watches (``kube/owned_watch.py``) over a scripted pool: a resource that is not served (404, its CRD
deleted) waits and looks again instead of ending, 410 lists again, bookmarks move the version, and every object
and event reaches ``deliver``. The real API server's side (a CRD deleted while the operator runs):
tests/e2e/test_gateway.py::test_the_crds_absent."""

from __future__ import annotations

import json
import threading
from collections.abc import Callable
from typing import Any
from urllib.parse import parse_qs, urlsplit

import pytest
from ctxfit.controller.app.owned import OWNED_SELECTOR, owned_changed, start_addon_watches
from ctxfit.controller.kube import owned_watch
from ctxfit.controller.kube.owned_watch import run_owned_watch
from ctxfit.controller.kube.rest import INFERENCE_POOLS, LEADER_WORKER_SETS
from ctxfit.controller.settings import Settings

from tests.unit.controller.kube.fakeapi import Response, rest_over, status_response


def obj(name: str, version: str, server: str | None = None) -> dict[str, Any]:
    labels = {"ctxfit.io/server": server} if server else {}
    return {"metadata": {"name": name, "namespace": "ns", "uid": f"uid-{name}", "resourceVersion": version,
                         "labels": labels}, "spec": {"replicas": 1}}


class Lines(Response):
    """A watch answer: one JSON event a line."""

    def __init__(self, events: list[dict[str, Any]]) -> None:
        super().__init__(200, {})
        self.data = b"".join(json.dumps(e).encode() + b"\n" for e in events)


class Script:
    """Answers the requests in order (list or watch, told apart by ``watch=true``); past the end, sets ``done``
    and answers 404 (the watch then waits)."""

    def __init__(self, answers: list[Callable[[dict[str, str]], Response]], done: threading.Event) -> None:
        self.answers, self.done = list(answers), done
        self.seen: list[tuple[str, dict[str, str]]] = []

    def request(self, method: str, url: str, **_: Any) -> Response:
        query = {k: v[0] for k, v in parse_qs(urlsplit(url).query).items()}
        self.seen.append(("watch" if query.get("watch") == "true" else "list", query))
        if not self.answers:
            self.done.set()
            return status_response(404, "the server could not find the requested resource")
        return self.answers.pop(0)(query)


def listing(*items: dict[str, Any], version: str = "10") -> Callable[[dict[str, str]], Response]:
    return lambda _: Response(200, {"items": list(items), "metadata": {"resourceVersion": version}})


def watching(*events: dict[str, Any]) -> Callable[[dict[str, str]], Response]:
    return lambda _: Lines(list(events))


def not_served(_: dict[str, str]) -> Response:
    return status_response(404, "the server could not find the requested resource")


def run(answers: list[Callable[[dict[str, str]], Response]], monkeypatch: pytest.MonkeyPatch,
        ) -> tuple[list[tuple[str | None, str]], Script]:
    """Run one watch over ``answers`` until they are used up; (delivered (type, name), the script)."""
    monkeypatch.setattr(owned_watch, "ABSENT_RETRY_SECONDS", (0.001, 0.001))
    monkeypatch.setattr(owned_watch, "ERROR_RETRY_SECONDS", (0.001, 0.001))
    stopping = threading.Event()
    script = Script(answers, stopping)
    got: list[tuple[str | None, str]] = []
    run_owned_watch(rest_over(script), LEADER_WORKER_SETS, "ns", OWNED_SELECTOR,
                    lambda kind, body: got.append((kind, body["metadata"]["name"])), stopping)
    return got, script


def test_a_listing_then_its_events_reach_deliver_and_the_watch_starts_at_the_listed_version(
        monkeypatch: pytest.MonkeyPatch) -> None:
    got, script = run([listing(obj("a", "5"), version="10"),
                       watching({"type": "MODIFIED", "object": obj("a", "11")},
                                {"type": "BOOKMARK", "object": {"metadata": {"resourceVersion": "15"}}}),
                       watching({"type": "DELETED", "object": obj("a", "16")})], monkeypatch)
    assert got == [(None, "a"), ("MODIFIED", "a"), ("DELETED", "a")]
    kinds = [(k, q.get("resourceVersion")) for k, q in script.seen]
    assert kinds[:3] == [("list", None), ("watch", "10"), ("watch", "15")], kinds
    assert all(q["labelSelector"] == OWNED_SELECTOR for _, q in script.seen)


def test_a_resource_that_is_not_served_is_looked_at_again_not_an_end(monkeypatch: pytest.MonkeyPatch) -> None:
    """A 404 (the CRD absent, or deleted while watching) waits and lists again when it is back."""
    got, script = run([not_served, not_served, listing(obj("b", "3")),
                       watching({"type": "ADDED", "object": obj("c", "4")}), not_served,
                       listing(obj("c", "9"), version="9")], monkeypatch)
    assert got == [(None, "b"), ("ADDED", "c"), (None, "c")]
    assert [k for k, _ in script.seen][:6] == ["list", "list", "list", "watch", "watch", "list"]


def test_gone_lists_again(monkeypatch: pytest.MonkeyPatch) -> None:
    got, script = run([listing(obj("a", "1")), watching({"type": "ERROR", "object": {"code": 410}}),
                       listing(obj("a", "20"), version="20"),
                       watching({"type": "MODIFIED", "object": obj("a", "21")})], monkeypatch)
    assert got == [(None, "a"), (None, "a"), ("MODIFIED", "a")]
    assert [(k, q.get("resourceVersion")) for k, q in script.seen][:4] == [
        ("list", None), ("watch", "10"), ("list", None), ("watch", "20")]


def test_a_refusal_or_a_receiver_bug_does_not_end_the_watch(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(owned_watch, "ERROR_RETRY_SECONDS", (0.001, 0.001))
    monkeypatch.setattr(owned_watch, "ABSENT_RETRY_SECONDS", (0.001, 0.001))
    stopping = threading.Event()
    script = Script([lambda _: status_response(403, "forbidden"), listing(obj("x", "1"), obj("y", "1"))], stopping)
    got: list[str] = []

    def deliver(_: str | None, body: dict[str, Any]) -> None:
        if body["metadata"]["name"] == "x":
            raise RuntimeError("a bug of the receiver")
        got.append(body["metadata"]["name"])

    run_owned_watch(rest_over(script), LEADER_WORKER_SETS, None, OWNED_SELECTOR, deliver, stopping)
    assert got == ["y"]


def test_an_owned_object_enqueues_its_server_only_when_its_view_changed() -> None:
    views: dict[str, int] = {}
    group = obj("srv", "1")
    assert owned_changed(views, None, group, LEADER_WORKER_SETS.plural) == ("ns", "srv")
    assert owned_changed(views, "MODIFIED", {**group, "status": {}}, LEADER_WORKER_SETS.plural) is None
    assert owned_changed(views, "MODIFIED", {**group, "spec": {"replicas": 2}}, LEADER_WORKER_SETS.plural) == \
        ("ns", "srv")
    assert owned_changed(views, "DELETED", group, LEADER_WORKER_SETS.plural) == ("ns", "srv") and not views
    pool = obj("llama", "1", server="llama-h200")
    assert owned_changed(views, "DELETED", pool, INFERENCE_POOLS.plural) == ("ns", "llama-h200")
    assert owned_changed(views, "ADDED", obj("foreign", "1"), INFERENCE_POOLS.plural) is None


@pytest.mark.parametrize(("keda", "gateway", "plurals"), [
    (False, False, ["leaderworkersets"]), (True, False, ["leaderworkersets", "scaledobjects"]),
    (True, True, ["leaderworkersets", "scaledobjects", "inferencepools"])])
def test_the_add_on_watches_follow_the_settings(monkeypatch: pytest.MonkeyPatch, keda: bool, gateway: bool,
                                                 plurals: list[str]) -> None:
    started: list[tuple[str, str | None]] = []
    monkeypatch.setattr("ctxfit.controller.app.owned.start_owned_watch",
                        lambda rest, resource, namespace, *_: started.append((resource.plural, namespace)))
    settings = Settings(metrics_port=0, health_port=0, keda_enabled=keda, gateway_enabled=gateway,
                        watch_namespaces=("a", "b"))
    count = start_addon_watches(rest_over(Script([], threading.Event())), settings, lambda *_: None,
                                threading.Event())
    assert count == len(started) == 2 * len(plurals)
    assert started == [(p, ns) for ns in ("a", "b") for p in plurals]
