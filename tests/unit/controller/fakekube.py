"""The one stand-in for the controller's Kube seam and the one server it serves, shared by the reconcile, fault,
autoscaling, service-lane, calibration, diagnosis, resolution and claim tests (no test module imports another):
``FakeKube`` is a ``KubeClient`` (subclass it for one behaviour: ``StoringKube``, ``RefusingKube``), ``FakeClaims``
a ``ClaimsApi``, ``runtime()`` the ``Runtime`` over them. A fake that drifts from the Protocol fails mypy here and
tests/unit/controller/kube/test_protocol.py."""

from __future__ import annotations

import json
from typing import Any

import yaml
from ctxfit.controller.kube.claims import ClaimsApi
from ctxfit.controller.kube.client import Conflict
from ctxfit.controller.kube.protocol import KubeClient
from ctxfit.controller.kube.rest import Rest
from ctxfit.controller.reconcile import Runtime
from ctxfit.controller.settings import Settings
from ctxfit.controller.telemetry.metrics import Metrics
from ctxfit.controller.views.cache import ClaimView, StorageView
from ctxfit.controller.views.workloads import ServiceView
from kubernetes.client.exceptions import ApiException

from tests.unit.controller.builders import REPO
from tests.unit.controller.kube.fakeapi import FakeApiServer


class FakeKube:
    """``KubeClient`` recording its writes in order; ``conflict`` makes the status write fail like a 409,
    ``error`` the server's read fail with that status; ``events``: every pod's Event messages. ``rest`` is a real
    ``Rest`` over ``api`` (a ``FakeApiServer``, empty unless given): what a test reaches through custom objects,
    pods or claims is served there."""

    def __init__(self, server: dict[str, Any] | None, *, conflict: bool = False, error: int | None = None,
                 events: tuple[str, ...] = (), api: FakeApiServer | None = None) -> None:
        self.server, self.conflict, self.error, self.events = server, conflict, error, events
        self.calls: list[str] = []
        self.api = api if api is not None else FakeApiServer()
        self.rest = Rest(self.api.api_client())
        self.instance = "test"

    def get_server(self, namespace: str, name: str) -> dict[str, Any] | None:
        if self.error:
            raise ApiException(status=self.error, reason="boom")
        return self.server

    def get_deployment(self, namespace: str, name: str) -> dict[str, Any] | None:
        return None

    def service_port(self, namespace: str, name: str) -> ServiceView | None:
        return None

    def replace_status(self, body: dict[str, Any], status: dict[str, Any]) -> dict[str, Any]:
        if self.conflict:
            raise Conflict("changed")
        self.calls.append("status")
        return {**body, "status": status}

    def post_event(self, server: dict[str, Any], type_: str, reason: str, message: str) -> None:
        self.calls.append(f"event:{reason}")

    def post_object_event(self, involved: dict[str, Any], type_: str, reason: str, message: str) -> None:
        self.calls.append(f"object-event:{involved.get('kind')}:{reason}")

    def apply(self, obj: dict[str, Any], *, exists: bool, via: tuple[str, ...] = ()) -> None:
        self.calls.append(f"apply:{obj['kind']}")

    def scale_to_zero(self, namespace: str, name: str, owner: str) -> None:
        self.calls.append("scale0")

    def pod_events(self, namespace: str, pod: str, limit: int = 20) -> list[str]:
        return list(self.events)

    def log_tail(self, namespace: str, pod: str, container: str, *, previous: bool, lines: int) -> str:
        return ""

    def log_head(self, namespace: str, pod: str, container: str, *, limit_bytes: int) -> str | None:
        return None


class StoringKube(FakeKube):
    """FakeKube whose status writes are what the next read returns."""

    def replace_status(self, body: dict[str, Any], status: dict[str, Any]) -> dict[str, Any]:
        stored = super().replace_status(body, status)
        self.server = stored
        return stored


_conforms: KubeClient = FakeKube(None)  # mypy: the fake drifts from the Protocol -> this line fails


OWNED_BY = {"apiVersion": "ctxfit.io/v1alpha1", "kind": "InferenceServer", "name": "kimi-k25", "uid": "uid-1",
            "controller": True}
"""The ownerReference of ``server()``'s children (``controller/views/ownership.py``)."""


def server() -> dict[str, Any]:
    obj: dict[str, Any] = yaml.safe_load((REPO / "manifests" / "kimi-128k.yaml").read_text())
    obj["metadata"].update(namespace="ns", uid="uid-1", generation=1, resourceVersion="7")
    return obj


def runtime(kube: KubeClient, settings: Settings | None = None) -> Runtime:
    return Runtime(settings=settings or Settings(metrics_port=0, health_port=0), kube=kube, metrics=Metrics())


class FakeClaims(ClaimsApi):
    """``ClaimsApi`` with a default StorageClass and no claim: records claim writes in the FakeKube's call list
    (and sends nothing)."""

    def __init__(self, kube: FakeKube) -> None:
        super().__init__(kube)
        self.kube = kube

    def storage(self) -> StorageView | None:
        return StorageView("standard", {"standard": False})

    def get_claim(self, namespace: str, name: str) -> ClaimView | None:
        self.kube.calls.append(f"get-claim:{name}")
        return None

    def created(self, namespace: str, name: str) -> ClaimView | None:
        return None

    def apply_claim(self, claim: dict[str, Any], *, exists: bool) -> None:
        self.kube.calls.append(f"apply:{claim['kind']}:{claim['metadata']['name']}")

    def delete_claim(self, namespace: str, name: str, owner: str) -> None:
        self.kube.calls.append(f"delete-claim:{name}")


class RefusingKube(StoringKube):
    """Refuses ``refuse`` kinds with 403 ``exceeded quota`` until ``refuse`` is set to None."""

    def __init__(self, body: dict[str, Any], refuse: str) -> None:
        super().__init__(body)
        self.refuse: str | None = refuse

    def apply(self, obj: dict[str, Any], *, exists: bool, via: tuple[str, ...] = ()) -> None:
        if obj["kind"] == self.refuse:
            self.calls.append(f"refused:{obj['kind']}")
            exc = ApiException(status=403, reason="Forbidden")
            exc.body = json.dumps({"kind": "Status", "message": f'{obj["kind"].lower()}s "kimi-k25" is forbidden: '
                                   "exceeded quota: no-more, requested: count/x=1, used: 0, limited: 0\x1b[31m"})
            raise exc
        super().apply(obj, exists=exists, via=via)


def conditions(kube: FakeKube) -> dict[str, dict[str, Any]]:
    assert kube.server is not None
    return {c["type"]: c for c in kube.server["status"]["conditions"]}


NO_RESOURCE = {"kind": "Status", "apiVersion": "v1", "status": "Failure", "reason": "NotFound", "code": 404,
               "message": "the server could not find the requested resource", "details": {}}
"""What kube-apiserver answers for a resource it does not serve (no details.name); seen in
tests/e2e/test_autoscaling_operator.py against the real API server."""


NO_OBJECT = {"kind": "Status", "apiVersion": "v1", "status": "Failure", "reason": "NotFound", "code": 404,
             "message": 'scaledobjects.keda.sh "kimi-k25" not found',
             "details": {"name": "kimi-k25", "group": "keda.sh", "kind": "scaledobjects"}}


def api_error(status: int, body: dict[str, Any]) -> ApiException:
    exc = ApiException(status=status, reason=str(body.get("reason", "")))
    exc.body = json.dumps(body)
    return exc
