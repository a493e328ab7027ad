"""Services written off the reconcile path (controller/kube/service_lane.py): a refusal still becomes
ObjectsAccepted=False + one Warning Event with backoff and no endpoint (one pass later than inline), an accepted
Service clears it, a just-written rendering is not written twice, and the server is enqueued after a failure."""

from __future__ import annotations

import time
from typing import Any

from ctxfit.controller.kube.service_lane import WRITTEN_MEMORY_SECONDS, ServiceLane
from ctxfit.controller.reconcile import reconcile
from ctxfit.controller.rejections import RejectionBook
from ctxfit.controller.views.pods import deployment_view

from tests.unit.controller.builders import RTX
from tests.unit.controller.fakekube import OWNED_BY, RefusingKube, conditions, runtime, server


def drain(lane: ServiceLane, key: tuple[str, str]) -> None:
    deadline = time.monotonic() + 5
    while lane.busy(key) and time.monotonic() < deadline:
        time.sleep(0.01)


def test_a_refused_service_through_the_lane_holds_ready_and_recovers() -> None:
    kube = RefusingKube(server(), "Service")
    rt = runtime(kube)
    enqueued: list[tuple[str, str]] = []
    rt.services = ServiceLane(kube.apply, rt.rejections, enqueued.append)
    key = ("ns", "kimi-k25")
    reconcile(rt, "ns", "kimi-k25", (RTX,), ())  # plan + Deployment
    deployment = deployment_view({"metadata": {"annotations": {}, "ownerReferences": [OWNED_BY]},
                                  "spec": {"replicas": 1}})
    assert kube.server is not None
    reconcile(rt, "ns", "kimi-k25", (RTX,), (), body=kube.server, deployment=deployment, service_port=None)
    drain(rt.services, key)
    assert "refused:Service" in kube.calls and enqueued == [key], "the failure enqueues the server"
    kube.calls.clear()
    result = reconcile(rt, "ns", "kimi-k25", (RTX,), (), body=kube.server, deployment=deployment,
                       service_port=None)
    assert kube.calls.count("event:ObjectRejected") == 1 and "refused:Service" not in kube.calls
    conds = conditions(kube)
    assert conds["ObjectsAccepted"]["status"] == "False" and "Service kimi-k25 (403)" in \
        conds["ObjectsAccepted"]["message"]
    assert "endpoint" not in kube.server["status"] and result.requeue_after == 10.0
    # within the backoff nothing is written again
    kube.calls.clear()
    reconcile(rt, "ns", "kimi-k25", (RTX,), (), body=kube.server, deployment=deployment, service_port=None)
    drain(rt.services, key)
    assert not [c for c in kube.calls if c.startswith(("refused", "apply:Service", "event"))], kube.calls
    # accepted once the backoff has passed: the lane tells the book, the next pass marks ObjectsAccepted True
    kube.refuse = None
    for entry in rt.rejections._entries.values():
        entry.next_try = 0.0
    reconcile(rt, "ns", "kimi-k25", (RTX,), (), body=kube.server, deployment=deployment, service_port=None)
    drain(rt.services, key)
    assert "apply:Service" in kube.calls and not rt.rejections.pending(key)
    reconcile(rt, "ns", "kimi-k25", (RTX,), (), body=kube.server, deployment=deployment, service_port=8000)
    conds = conditions(kube)
    assert conds["ObjectsAccepted"]["status"] == "True" and conds["Ready"]["reason"] != "ObjectRejected"
    rt.services.close()


def test_a_rendering_is_written_once_and_another_drops_the_old_error() -> None:
    written: list[dict[str, Any]] = []
    failures = {"fail": True}

    def apply(service: dict[str, Any], *, exists: bool) -> None:
        if failures["fail"]:
            raise RuntimeError("API server unreachable")
        written.append(service)

    lane = ServiceLane(apply, RejectionBook(), lambda key: None, threads=1)
    key = ("ns", "s")
    first = {"kind": "Service", "metadata": {"name": "s"}, "spec": {"ports": [{"port": 8000}]}}
    assert lane.submit(key, first, exists=False) == 0.0
    drain(lane, key)
    second = {**first, "spec": {"ports": [{"port": 9000}]}}
    assert lane.take_failure(key, second) is None, "an error of another rendering is dropped"
    failures["fail"] = False
    lane.submit(key, first, exists=False)
    drain(lane, key)
    again = lane.submit(key, first, exists=False)
    assert written == [first] and again is not None and 0 < again <= WRITTEN_MEMORY_SECONDS
    assert lane.submit(key, second, exists=True) == 0.0, "a new rendering is written at once"
    drain(lane, key)
    assert written == [first, second]
    lane.seen(key)  # the watch shows the Service (e.g. deleted by hand): no longer held back
    assert lane.submit(key, second, exists=False) == 0.0
    drain(lane, key)
    assert written == [first, second, second]
    lane.close()
    assert lane.submit(key, {**first, "spec": {}}, exists=True) is None, "stopped: not queued"
