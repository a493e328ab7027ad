"""Level-triggered passes write only what changed: a pass over an unchanged server applies no child, and the whole
reconcile over ``fakeapi.FakeApiServer`` writes its status at most once per pass."""

from __future__ import annotations

import pytest
from ctxfit.controller import reconcile as reconcile_module
from ctxfit.controller import rejections
from ctxfit.controller.reconcile import reconcile

from tests.unit.controller.test_ownership_property import H100
from tests.unit.controller.test_refusal_storms import NAME, NS, Clock, runtime, world, writes_to


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> Clock:
    fake = Clock()
    monkeypatch.setattr(reconcile_module.time, "monotonic", fake)
    monkeypatch.setattr(rejections.time, "monotonic", fake)
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
