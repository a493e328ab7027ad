"""A verdict where one is due, over the whole reconcile (``fakeapi.FakeApiServer``):
``nodes: 2`` where LeaderWorkerSets are not served, a pipeline of more stages than the model has layers."""

from __future__ import annotations

from collections import Counter

import pytest
from ctxfit.controller.reconcile import passes as reconcile_module
from ctxfit.controller.reconcile import reconcile

from tests.unit.controller.apiworld import H100, KEY, NAME, NS, SERVED, Clock, runtime, world


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> Clock:
    fake = Clock()
    monkeypatch.setattr(reconcile_module.time, "monotonic", fake)
    return fake


def test_a_multi_node_server_without_leaderworkersets_says_so_once_and_looks_again_slowly(clock: Clock) -> None:
    api = world(nodes=2)
    api.served = SERVED - {"leaderworkersets"}
    rt = runtime(api)
    for _ in range(300):  # five minutes of passes, one a second
        reconcile(rt, NS, NAME, H100, ())
        clock.now += 1
    status = api.objects[KEY]["status"]
    ready = next(c for c in status["conditions"] if c["type"] == "Ready")
    assert status["phase"] == "Failed" and ready["reason"] == "LeaderWorkerSetNotInstalled"
    assert "install the LeaderWorkerSet controller" in ready["message"]
    events = Counter(o["reason"] for k, o in api.objects.items() if k[1] == "events")
    assert events["LeaderWorkerSetNotInstalled"] == 1, events
    asked = [r for r in api.log if r.key[1] == "leaderworkersets"]
    assert len(asked) <= 6, f"{len(asked)} LWS requests in 5 minutes (was one 404 every 5 s)"
    assert not [r for r in api.log if r.key[1] == "deployments" and r.method != "GET"], "nothing else runs it"
    api.served = SERVED  # LWS installed: planned and started without a spec change
    clock.now += 61
    for _ in range(3):
        reconcile(rt, NS, NAME, H100, ())
    assert api.get("leaderworkerset.x-k8s.io", "leaderworkersets", NS, NAME) is not None
    assert api.objects[KEY]["status"]["phase"] != "Failed"


@pytest.mark.parametrize("pipeline", [64, 33])
def test_a_pipeline_longer_than_the_model_is_a_verdict_not_a_wait_for_nodes(clock: Clock, pipeline: int) -> None:
    api = world(nodes=1)
    spec = api.objects[KEY]["spec"]
    spec["nodes"], spec["gpu"], spec["parallelism"] = pipeline, {"count": 1, "product": "NVIDIA-H100-80GB-HBM3"}, {
        "tensor": 1, "pipeline": pipeline}
    rt = runtime(api)
    reconcile(rt, NS, NAME, H100, ())
    status = api.objects[KEY]["status"]
    assert status["phase"] == "Failed", status
    assert "pipeline stages for a model of 32 layers" in status["message"]
    assert "NoEligibleNode" not in {c["reason"] for c in status["conditions"]}
    # the planner's verdict, as `ctxfit plan` gives it (exit 3), not a spec error
    budget = next(c for c in status["conditions"] if c["type"] == "BudgetFits")
    assert (budget["status"], budget["reason"]) == ("False", "DoesNotFit"), budget
