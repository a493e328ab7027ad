"""Level-triggered passes write only what changed: a pass over an unchanged server applies no child, and the whole
reconcile over ``fakeapi.FakeApiServer`` writes its status at most once per pass."""

from __future__ import annotations

from typing import Any

import pytest
from ctxfit.controller.reconcile import passes as reconcile_module
from ctxfit.controller.reconcile import reconcile

from tests.unit.controller.apiworld import H100, KEY, NAME, NS, Clock, child, condition, runtime, world, writes_to
from tests.unit.controller.kube.fakeapi import FakeApiServer, Response, status_response


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> Clock:
    fake = Clock()
    monkeypatch.setattr(reconcile_module.time, "monotonic", fake)
    return fake


@pytest.mark.parametrize("nodes", [1, 2])
def test_a_pass_over_an_unchanged_server_applies_no_service(clock: Clock, nodes: int) -> None:
    """Once the Service is as rendered (for a multi-node server: selecting the group leaders, ``worker-index: "0"``),
    later passes see it as the operator's own rendering and write it no more."""
    api = world(nodes=nodes)
    rt = runtime(api)
    for _ in range(20):
        reconcile(rt, NS, NAME, H100[:nodes], ())
        clock.now += 1.0
        if api.get("", "services", NS, NAME) is not None:
            break
    service = api.get("", "services", NS, NAME)
    assert service is not None
    assert ("leaderworkerset.sigs.k8s.io/worker-index" in service["spec"]["selector"]) is (nodes > 1)
    before = len(writes_to(api, "services", NAME))
    for _ in range(10):
        reconcile(rt, NS, NAME, H100[:nodes], ())
        clock.now += 30.0
    assert writes_to(api, "services", NAME)[before:] == [], "an unchanged Service is not applied again"


def count_passes(monkeypatch: pytest.MonkeyPatch, api: FakeApiServer) -> list[int]:
    """The status writes (PUT on the status subresource) of each pass, in order."""
    per_pass: list[int] = []
    one_pass = reconcile_module._pass

    def counted(*args: Any, **kwargs: Any) -> Any:
        before = sum(1 for r in api.writes() if r.key == KEY and r.method == "PUT")
        try:
            return one_pass(*args, **kwargs)
        finally:
            per_pass.append(sum(1 for r in api.writes() if r.key == KEY and r.method == "PUT") - before)

    monkeypatch.setattr(reconcile_module, "_pass", counted)
    return per_pass


def refuse_services(api: FakeApiServer, code: int = 422) -> None:
    def refuse(method: str, key: tuple[str, str, str, str], body: Any, stored: Any) -> Response | None:
        if key[1] == "services" and method in ("POST", "PATCH"):
            return status_response(code, f'services "{NAME}" is forbidden: exceeded quota', NAME, "Forbidden")
        return None

    api.refuse = refuse


@pytest.mark.parametrize("case", ["steady", "refused-then-accepted", "foreign-name", "invalid-stored-status"])
def test_every_pass_writes_status_at_most_once(monkeypatch: pytest.MonkeyPatch, clock: Clock, case: str) -> None:
    """Refusals, acceptance and a discarded stored status are part of the pass's one status write (no separate
    GET+PUT of the refusal, no second PUT after ``ObjectsAccepted``, no PUT of the discarded status first)."""
    api = world()
    if case == "refused-then-accepted":
        refuse_services(api)
    elif case == "foreign-name":
        api.put("", "services", NS, child("service", NAME, "none"))
    elif case == "invalid-stored-status":
        api.objects[KEY]["status"] = {"attempts": [{"number": 1, "effective": {"contextLength": -5}}]}
    per_pass = count_passes(monkeypatch, api)
    rt = runtime(api)
    for second in range(400):
        if case == "refused-then-accepted" and second == 200:
            api.refuse = None  # the quota is raised; the backoff ends within the next 300 s
        reconcile(rt, NS, NAME, H100[:1], ())
        clock.now += 1.0
    assert per_pass and max(per_pass) <= 1, per_pass
    assert sum(per_pass) >= 1
    if case == "refused-then-accepted":
        accepted = condition(api, "ObjectsAccepted")
        assert accepted["status"] == "True", "said in status once the Service was applied"
        assert any(o.get("reason") == "ObjectRejected" for k, o in api.objects.items() if k[1] == "events")
    elif case == "foreign-name":
        accepted = condition(api, "ObjectsAccepted")
        assert (accepted["status"], accepted["reason"]) == ("False", "ForeignObject")
    if case == "invalid-stored-status":
        assert any(o.get("reason") == "InvalidStatus" for k, o in api.objects.items() if k[1] == "events")
