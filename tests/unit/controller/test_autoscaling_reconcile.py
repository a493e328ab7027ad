"""Autoscaling in the impure shell, with fakes: the ScaledObject's reads and writes and their order,
KEDA absent (no crash, one look per memo period), a refused ScaledObject, and the workload patch that leaves
``replicas`` to the HPA."""

from __future__ import annotations

import json
from typing import Any
from urllib.parse import urlsplit

import pytest
from ctxfit.api.status import ConditionType, InferenceServerStatus
from ctxfit.controller.kube.answers import resource_missing
from ctxfit.controller.kube.keda import (
    ABSENT_MEMO_SECONDS,
    KedaMemo,
    KedaNotInstalled,
    get_scaled_object,
    read_scaling,
)
from ctxfit.controller.kube.objects import replace_ops
from ctxfit.controller.kube.rest import Rest
from ctxfit.controller.reconcile import Runtime, reconcile
from ctxfit.controller.rejections import RejectionBook
from ctxfit.controller.settings import Settings
from ctxfit.controller.views.pods import DeploymentView, deployment_view
from kubernetes.client.exceptions import ApiException

from tests.unit.controller.builders import RTX
from tests.unit.controller.fakekube import NO_OBJECT, NO_RESOURCE, FakeKube, StoringKube, api_error, runtime, server
from tests.unit.controller.kube.fakeapi import Response, parse_path, rest_over


class FakeKeda:
    """An API server's pool for ScaledObjects only (``Rest`` sends through it): records calls in the FakeKube's
    list; ``crd`` False answers like an API server without KEDA; ``refuse`` makes create/patch fail with that
    error."""

    def __init__(self, calls: list[str], *, crd: bool = True, refuse: ApiException | None = None) -> None:
        self.calls, self.crd, self.refuse = calls, crd, refuse
        self.stored: dict[str, Any] | None = None
        self.patches: list[Any] = []

    def request(self, method: str, url: str, body: Any = None, **_: Any) -> Response:
        (_group, plural, _namespace, _name), _sub = parse_path(urlsplit(url).path)
        data: Any = json.loads(body) if body else None
        verb = {"GET": "get", "POST": "create", "PATCH": "patch", "DELETE": "delete"}[method]
        self.calls.append(f"{verb}:{plural}")
        try:
            return Response(200, self._serve(verb, data))
        except ApiException as exc:
            return Response(int(exc.status), json.loads(exc.body or "{}"))

    def _serve(self, verb: str, data: Any) -> dict[str, Any]:
        if not self.crd and verb in ("get", "create"):
            raise api_error(404, NO_RESOURCE)
        if verb == "get":
            if self.stored is None:
                raise api_error(404, NO_OBJECT)
            return self.stored
        if verb == "delete":
            self.stored = None
            return {}
        if verb == "patch":
            self.patches.append(data)
        if self.refuse is not None:
            raise self.refuse
        if verb == "create":
            self.stored = data
        return self.stored or {}

    def rest(self) -> Rest:
        """A real ``Rest`` whose pool is this fake."""
        return rest_over(self)


KEDA = Settings(metrics_port=0, health_port=0, keda_enabled=True, prometheus_address="http://prometheus:9090")


def autoscaled(**autoscaling: Any) -> dict[str, Any]:
    body = server()
    body["spec"]["autoscaling"] = {"minReplicas": 1, "maxReplicas": 4, **autoscaling}
    return body


def keda_runtime(kube: FakeKube, settings: Settings = KEDA) -> Runtime:
    return runtime(kube, settings)


def with_custom(body: dict[str, Any] | None, **kwargs: Any) -> tuple[FakeKube, FakeKeda]:
    kube = StoringKube(body)
    custom = FakeKeda(kube.calls, **kwargs)
    kube.rest = custom.rest()
    return kube, custom


def test_a_plain_server_reads_nothing_of_keda() -> None:
    kube, _ = with_custom(server())
    reconcile(keda_runtime(kube), "ns", "kimi-k25", (RTX,), ())
    assert not [c for c in kube.calls if "scaledobjects" in c]


def test_keda_off_in_the_settings_reads_nothing_and_says_so() -> None:
    kube, _ = with_custom(autoscaled())
    result = reconcile(keda_runtime(kube, Settings(metrics_port=0, health_port=0)), "ns", "kimi-k25", (RTX,), ())
    assert not [c for c in kube.calls if "scaledobjects" in c]
    assert result.stored is not None
    cond = InferenceServerStatus.from_body(result.stored["status"]).condition(ConditionType.AUTOSCALING)
    assert cond is not None and cond.reason.value == "KEDADisabled"


def test_the_scaled_object_is_created_after_the_deployment_exists() -> None:
    kube, custom = with_custom(autoscaled())
    rt = keda_runtime(kube)
    first = reconcile(rt, "ns", "kimi-k25", (RTX,), (), deployment=None, service_port=None)
    assert "create:scaledobjects" not in kube.calls, "KEDA checks its scale target at once"
    assert first.stored is not None
    kube.server, kube.calls[:] = first.stored, []
    live = kube.server["status"]
    assert live["autoscaling"]["minReplicas"] == 1
    second = reconcile(rt, "ns", "kimi-k25", (RTX,), (), deployment=DeploymentView("h", 1, current_replicas=1),
                       service_port=8000)
    assert kube.calls.index("get:scaledobjects") < kube.calls.index("status")
    assert kube.calls.index("status") < kube.calls.index("create:scaledobjects")
    assert "event:ScaledObjectCreated" in kube.calls
    assert custom.stored is not None and custom.stored["spec"]["maxReplicaCount"] == 4
    assert second.requeue_after is not None and second.requeue_after <= 10


def test_a_failed_server_is_paused_before_its_replicas_drop() -> None:
    kube, custom = with_custom(autoscaled())
    rt = keda_runtime(kube)
    first = reconcile(rt, "ns", "kimi-k25", (RTX,), (), deployment=None, service_port=None)
    assert first.stored is not None
    kube.server = first.stored
    reconcile(rt, "ns", "kimi-k25", (RTX,), (), deployment=DeploymentView("h", 3, current_replicas=3),
              service_port=8000)
    assert custom.stored is not None
    failed = kube.server["status"]
    failed["phase"] = "Failed"
    attempt = failed["attempts"][0]
    attempt.update(outcome="Failed", failureKind="WeightsDoNotFit", finishedAt=attempt["startedAt"])
    kube.calls[:] = []
    reconcile(rt, "ns", "kimi-k25", (RTX,), (), deployment=DeploymentView("h", 3, current_replicas=3),
              service_port=8000)
    assert kube.calls.index("patch:scaledobjects") < kube.calls.index("apply:Deployment"), \
        "KEDA is paused first, so nothing scales the workload up again"
    paused = [op for op in custom.patches[-1] if op["path"] == "/metadata/annotations/autoscaling.keda.sh~1paused"]
    assert paused == [{"op": "add", "path": "/metadata/annotations/autoscaling.keda.sh~1paused", "value": "true"}]


def test_keda_absent_is_a_condition_and_one_look_per_memo_period() -> None:
    kube, _ = with_custom(autoscaled(), crd=False)
    rt = keda_runtime(kube)
    first = reconcile(rt, "ns", "kimi-k25", (RTX,), (), deployment=None, service_port=None)
    assert first.stored is not None and not first.conflict
    cond = InferenceServerStatus.from_body(first.stored["status"]).condition(ConditionType.AUTOSCALING)
    assert cond is not None and cond.reason.value == "KEDANotInstalled"
    kube.server = first.stored
    for _ in range(3):
        again = reconcile(rt, "ns", "kimi-k25", (RTX,), (), deployment=DeploymentView("h", 1), service_port=8000)
        assert not again.conflict and again.requeue_after is not None and again.requeue_after >= 1
    assert kube.calls.count("get:scaledobjects") == 1, "no retry storm: one GET per memo period for all servers"


def test_a_refused_scaled_object_is_reported_without_holding_ready() -> None:
    forbidden = api_error(403, {"kind": "Status", "code": 403, "reason": "Forbidden",
                                "message": 'scaledobjects.keda.sh is forbidden: User "ctxfit" cannot create'})
    kube, _ = with_custom(autoscaled(), refuse=forbidden)
    rt = keda_runtime(kube)
    first = reconcile(rt, "ns", "kimi-k25", (RTX,), (), deployment=None, service_port=None)
    assert first.stored is not None
    kube.server = first.stored
    result = reconcile(rt, "ns", "kimi-k25", (RTX,), (), deployment=DeploymentView("h", 1), service_port=8000)
    assert result.stored is not None and result.requeue_after == 10
    assert "event:ObjectRejected" in kube.calls
    assert kube.server is not None
    status = InferenceServerStatus.from_body(kube.server["status"])
    accepted = status.condition(ConditionType.OBJECTS_ACCEPTED)
    assert accepted is not None and accepted.status == "False" and "ScaledObject kimi-k25" in accepted.message
    ready = status.condition(ConditionType.READY)
    assert ready is not None and ready.reason.value != "ObjectRejected", "the server still serves"
    again = reconcile(rt, "ns", "kimi-k25", (RTX,), (), deployment=DeploymentView("h", 1), service_port=8000)
    assert again.requeue_after is not None and again.requeue_after <= 10, "retried after the backoff"
    assert kube.calls.count("create:scaledobjects") == 1, "not before"
    assert rt.metrics.registry.get_sample_value("ctxfit_reconcile_errors_total", {"reason": "rejected_403"}) == 1


def test_a_refused_scaled_object_is_not_reported_as_created() -> None:
    """The Autoscaling condition agrees with ObjectsAccepted: refused, not "created ... waiting for KEDA"."""
    invalid = api_error(422, {"kind": "Status", "code": 422, "reason": "Invalid",
                              "message": 'admission webhook "vscaledobject.kb.io" denied the request'})
    kube, custom = with_custom(autoscaled(), refuse=invalid)
    rt = keda_runtime(kube)
    first = reconcile(rt, "ns", "kimi-k25", (RTX,), (), deployment=None, service_port=None)
    assert first.stored is not None
    kube.server = first.stored
    reconcile(rt, "ns", "kimi-k25", (RTX,), (), deployment=DeploymentView("h", 1), service_port=8000)
    assert kube.server is not None
    kube.calls[:] = []
    reconcile(rt, "ns", "kimi-k25", (RTX,), (), deployment=DeploymentView("h", 1), service_port=8000)
    status = InferenceServerStatus.from_body(kube.server["status"])
    cond = status.condition(ConditionType.AUTOSCALING)
    assert cond is not None and (cond.status, cond.reason.value) == ("False", "ObjectRejected"), cond
    assert "vscaledobject.kb.io" in cond.message
    assert "event:ScaledObjectCreated" not in kube.calls, "not announced again while refused"
    custom.refuse = None  # the webhook is fixed; the backoff ends
    rt.rejections = RejectionBook()
    reconcile(rt, "ns", "kimi-k25", (RTX,), (), deployment=DeploymentView("h", 1), service_port=8000)
    assert custom.stored is not None
    reconcile(rt, "ns", "kimi-k25", (RTX,), (), deployment=DeploymentView("h", 1), service_port=8000)
    status = InferenceServerStatus.from_body(kube.server["status"])
    accepted, cond = status.condition(ConditionType.OBJECTS_ACCEPTED), status.condition(ConditionType.AUTOSCALING)
    assert accepted is not None and accepted.status == "True"
    assert cond is not None and cond.reason.value == "ScaledObjectPending", "KEDA has not reported Ready yet"


def test_resource_missing_tells_the_resource_from_the_object() -> None:
    assert resource_missing(api_error(404, NO_RESOURCE))
    assert not resource_missing(api_error(404, NO_OBJECT))
    assert not resource_missing(api_error(403, NO_RESOURCE))


def test_read_scaling_remembers_an_absent_keda() -> None:
    kube, _ = with_custom(None, crd=False)
    memo = KedaMemo()
    first = read_scaling(kube, memo, True, "ns", "a", True, False)
    second = read_scaling(kube, memo, True, "ns", "b", True, False)
    assert first is not None and second is not None and first.keda.value == second.keda.value == "Absent"
    assert kube.calls == ["get:scaledobjects"]
    memo.absent_until -= ABSENT_MEMO_SECONDS
    read_scaling(kube, memo, True, "ns", "a", True, False)
    assert kube.calls == ["get:scaledobjects"] * 2
    assert read_scaling(kube, memo, True, "ns", "a", False, False) is None
    with pytest.raises(KedaNotInstalled):
        get_scaled_object(kube, "ns", "a")


def test_a_workload_without_replicas_is_patched_field_by_field() -> None:
    """The HPA's count survives a template change: no ``replace /spec`` that would default replicas to 1."""
    deployment: dict[str, Any] = {
        "kind": "Deployment", "metadata": {"labels": {"a": "b"}, "annotations": {"c": "d"}},
        "spec": {"strategy": {"type": "Recreate"}, "template": {"spec": {}}}}
    ops = replace_ops(deployment)
    assert {op["path"] for op in ops} == {"/spec/strategy", "/spec/template", "/metadata/labels/a",
                                          "/metadata/annotations/c"}
    assert all(op["op"] == "add" for op in ops)
    deployment["spec"]["replicas"] = 2
    assert replace_ops(deployment)[0] == {"op": "replace", "path": "/spec", "value": deployment["spec"]}


def test_current_replicas_come_from_the_workload_status() -> None:
    base = {"metadata": {}, "spec": {"replicas": 3}}
    assert deployment_view({**base, "status": {"observedGeneration": 1, "replicas": 2}}).current_replicas == 2  # type: ignore[union-attr]
    assert deployment_view({**base, "status": {"observedGeneration": 1}}).current_replicas == 0  # type: ignore[union-attr]
    assert deployment_view(base).current_replicas is None  # type: ignore[union-attr]


def test_thresholds_read_only_the_current_attempts_observed_pool() -> None:
    """After a step-down, attempt 1's engine report (its pool was for another context) is not the capacity of
    attempt 2: the thresholds are planned until attempt 2's own start-up is read."""
    from ctxfit.controller.converge.autoscaling import _thresholds

    body = autoscaled()
    kube, _ = with_custom(body)
    first = reconcile(keda_runtime(kube), "ns", "kimi-k25", (RTX,), (), deployment=None, service_port=None)
    assert first.stored is not None
    raw = first.stored["status"]
    one = raw["attempts"][0]
    raw["attempts"] = [{**one, "outcome": "Failed", "finishedAt": one["startedAt"]},
                       {**one, "number": 2, "effective": {**one["effective"], "contextLength": 65536}}]
    from ctxfit.api import InferenceServerSpec

    spec = InferenceServerSpec.model_validate(body["spec"])
    for attempt, source in [(1, "planned"), (2, "observed")]:
        raw["observed"] = {"attempt": attempt, "kvCacheTokens": 300000, "servedContextLength": 131072 // attempt}
        found = _thresholds(spec, InferenceServerStatus.from_body(raw))
        assert found is not None and found.capacity.source == source, (attempt, found)
        assert (found.capacity.pool_tokens == 300000) is (source == "observed"), found.capacity
