"""The refusal rules of the pure pass (converge/refusals.py): typed kinds decide, never the message; Ready is never
said through a Service not yet seen as the server's."""

from __future__ import annotations

from dataclasses import replace

from ctxfit.api.status import ConditionType, Phase
from ctxfit.controller.converge import converge
from ctxfit.controller.converge.refusals import Refusal, Write, fingerprint

from tests.unit.controller.builders import SETTINGS, applied, never, pod, snapshot, spec


def test_ready_waits_for_a_service_the_lane_writes_to_be_seen_as_the_servers() -> None:
    body = spec()
    first = converge(snapshot(body), SETTINGS, never)
    deployment = applied(first)
    ready = (pod(1, ready=True),)
    seen = converge(snapshot(body, first.status, pods=ready, deployment=deployment, service_port=8000), SETTINGS, never)
    assert seen.status.phase is Phase.READY
    unseen = snapshot(body, first.status, pods=ready, deployment=deployment)
    inline = converge(unseen, SETTINGS, never)
    assert inline.status.phase is Phase.READY and inline.service is not None, "inline: written in this very pass"
    lane = converge(replace(unseen, service_lane=True), SETTINGS, never)
    assert lane.service is not None and lane.status.phase is Phase.STARTING, "the lane writes it after the pass"
    assert lane.requeue_after is not None and lane.requeue_after <= 1.0


def test_whether_a_refusal_holds_ready_is_its_kind_not_its_wording() -> None:
    body = spec()
    first = converge(snapshot(body), SETTINGS, never)
    deployment = applied(first)
    ready = (pod(1, ready=True),)
    base = snapshot(body, first.status, pods=ready, deployment=deployment, service_port=8000)
    for write, holds in ((Write.SERVICE, True), (Write.SCALED_OBJECT, False), (Write.CLAIM_EXPAND, False)):
        refusal = Refusal(write, fingerprint(None), 30.0, "the API server refused ScaledObject x (403): no",
                          announce=True)
        out = converge(replace(base, refusals=(refusal,)), SETTINGS, never)
        accepted = out.status.condition(ConditionType.OBJECTS_ACCEPTED)
        assert accepted is not None and accepted.status == "False"
        assert (out.status.phase is not Phase.READY) is holds, write
        assert [e.reason.value for e in out.events if e.type == "Warning"] == ["ObjectRejected"]
