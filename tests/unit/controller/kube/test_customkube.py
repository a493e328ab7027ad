"""The shared create-or-replace of a custom object (``controller/kube/custom.py``), with a fake
``CustomObjectsApi``: what each stale belief of the caller leads to, an object of that name that is not the
server's (never written), and a missing resource type (its CRD not installed) raised as it is - by both callers,
the LeaderWorkerSet and the KEDA ScaledObject."""

from __future__ import annotations

import json
from typing import Any

import pytest
from ctxfit.controller.kube.custom import CustomResource, apply_custom_object, resource_missing
from ctxfit.controller.kube.groups import LWS, apply_group
from ctxfit.controller.kube.guarded import Foreign
from ctxfit.controller.kube.keda import KedaNotInstalled, apply_scaled_object
from kubernetes.client.rest import ApiException

from tests.unit.controller.test_autoscaling_reconcile import NO_OBJECT, NO_RESOURCE, api_error

RESOURCE = CustomResource("example.io", "v1", "widgets")
SERVER_UID = "uid-of-the-server"
OURS = [{"apiVersion": "ctxfit.io/v1alpha1", "kind": "InferenceServer", "name": "w", "uid": SERVER_UID,
         "controller": True}]


class Released:
    """A raw response whose connection goes back to the pool."""

    def __init__(self, body: Any = None) -> None:
        self.data = json.dumps(body or {}).encode()

    def release_conn(self) -> None:
        pass


def live(owners: list[dict[str, Any]] | None = OURS, uid: str = "obj-1") -> dict[str, Any]:
    return {"kind": "Widget", "metadata": {"name": "w", "namespace": "ns", "uid": uid,
                                           **({"ownerReferences": owners} if owners else {})}, "spec": {"a": 0}}


class Custom:
    """Answers get/create/patch from ``answers`` in order (an ``ApiException`` is raised, a dict is the object a
    get returns, None succeeds); records ``(verb, group, version, plural, name, content type)``."""

    def __init__(self, *answers: ApiException | dict[str, Any] | None) -> None:
        self.answers = list(answers)
        self.calls: list[tuple[str, ...]] = []
        self.patches: list[list[dict[str, Any]]] = []

    def _answer(self) -> Released:
        answer = self.answers.pop(0)
        if isinstance(answer, ApiException):
            raise answer
        return Released(answer)

    def get_namespaced_custom_object(self, group: str, version: str, namespace: str, plural: str, name: str,
                                     **kw: Any) -> Released:
        self.calls.append(("get", group, version, plural, name, ""))
        return self._answer()

    def create_namespaced_custom_object(self, group: str, version: str, namespace: str, plural: str,
                                        body: dict[str, Any], **kw: Any) -> Released:
        assert kw["field_manager"] == "ctxfit" and kw["_preload_content"] is False
        self.calls.append(("create", group, version, plural, body["metadata"]["name"], ""))
        return self._answer()

    def patch_namespaced_custom_object(self, group: str, version: str, namespace: str, plural: str, name: str,
                                       body: list[dict[str, Any]], **kw: Any) -> Released:
        assert kw["field_manager"] == "ctxfit"
        self.patches.append(body)
        self.calls.append(("patch", group, version, plural, name, kw["_content_type"]))
        return self._answer()


class KubeWith:
    def __init__(self, custom: Custom) -> None:
        self.custom = custom


OBJ = {"kind": "Widget", "metadata": {"name": "w", "namespace": "ns", "labels": {"app": "x"}, "ownerReferences": OURS},
       "spec": {"a": 1}}
PATCH = ("patch", "example.io", "v1", "widgets", "w", "application/json-patch+json")
CREATE = ("create", "example.io", "v1", "widgets", "w", "")
GET = ("get", "example.io", "v1", "widgets", "w", "")


@pytest.mark.parametrize(("exists", "answers", "calls"), [
    (False, [None], [CREATE]),
    (True, [live(), None], [GET, PATCH]),
    (False, [api_error(409, {}), live(), None], [CREATE, GET, PATCH]),  # created meanwhile: replaced
    (True, [api_error(404, NO_OBJECT), None], [GET, CREATE]),  # deleted meanwhile: created again
    (True, [live(), api_error(404, NO_OBJECT), None], [GET, PATCH, CREATE]),  # deleted between read and patch
])
def test_a_stale_belief_is_corrected_by_the_answer(exists: bool, answers: list[Any],
                                                   calls: list[tuple[str, ...]]) -> None:
    custom = Custom(*answers)
    apply_custom_object(KubeWith(custom), RESOURCE, OBJ, exists=exists)  # type: ignore[arg-type]
    assert custom.calls == calls and not custom.answers


def test_the_patch_is_guarded_by_the_checked_uid_and_the_servers_reference() -> None:
    custom = Custom(live(owners=[{"kind": "ReplicaSet", "apiVersion": "apps/v1", "name": "x", "uid": "u"}, *OURS]),
                    None)
    apply_custom_object(KubeWith(custom), RESOURCE, OBJ, exists=True)  # type: ignore[arg-type]
    assert custom.patches[0][:3] == [
        {"op": "test", "path": "/metadata/uid", "value": "obj-1"},
        {"op": "test", "path": "/metadata/ownerReferences/1/uid", "value": SERVER_UID},
        {"op": "replace", "path": "/spec", "value": {"a": 1}}]


FOREIGN = {
    "no-owner": live(owners=None),
    "other-uid": live(owners=[{**OURS[0], "uid": "an-earlier-server"}]),
    "other-kind": live(owners=[{**OURS[0], "kind": "Widget"}]),
    "other-group": live(owners=[{**OURS[0], "apiVersion": "example.io/v1"}]),
}


@pytest.mark.parametrize("exists", [False, True])
@pytest.mark.parametrize("case", list(FOREIGN), ids=list(FOREIGN))
def test_an_object_that_is_not_the_servers_is_never_written(case: str, exists: bool) -> None:
    answers: list[Any] = [FOREIGN[case]] if exists else [api_error(409, {}), FOREIGN[case]]
    custom = Custom(*answers)
    with pytest.raises(Foreign) as raised:
        apply_custom_object(KubeWith(custom), RESOURCE, OBJ, exists=exists)  # type: ignore[arg-type]
    assert [c[0] for c in custom.calls] == (["get"] if exists else ["create", "get"])
    assert "Widget w already exists and is not owned by this InferenceServer" in raised.value.describe()


def test_a_failed_test_operation_means_the_object_was_replaced_by_another() -> None:
    """The API server answers a failed ``test`` with 422: read again; not the server's -> Foreign, nothing more."""
    custom = Custom(live(), api_error(422, {"message": "testing value /metadata/uid failed"}), live(owners=None,
                                                                                                    uid="obj-2"))
    with pytest.raises(Foreign):
        apply_custom_object(KubeWith(custom), RESOURCE, OBJ, exists=True)  # type: ignore[arg-type]
    assert [c[0] for c in custom.calls] == ["get", "patch", "get"]


@pytest.mark.parametrize("exists", [False, True])
def test_a_resource_type_not_served_is_raised_without_a_create_that_must_fail(exists: bool) -> None:
    custom = Custom(api_error(404, NO_RESOURCE))
    with pytest.raises(ApiException) as raised:
        apply_custom_object(KubeWith(custom), RESOURCE, OBJ, exists=exists)  # type: ignore[arg-type]
    assert resource_missing(raised.value) and len(custom.calls) == 1


@pytest.mark.parametrize("status", [400, 403, 422, 500])
def test_other_answers_are_raised_for_the_caller(status: int) -> None:
    custom = Custom(live(), api_error(status, {}), live())
    with pytest.raises(ApiException):
        apply_custom_object(KubeWith(custom), RESOURCE, OBJ, exists=True)  # type: ignore[arg-type]
    assert custom.calls[:2] == [GET, PATCH]


def test_both_callers_use_it_with_their_resource() -> None:
    custom = Custom(api_error(404, NO_OBJECT), None)
    apply_group(KubeWith(custom), OBJ, exists=True)  # type: ignore[arg-type]
    assert [(c[0], c[1], c[3]) for c in custom.calls] == [("get", LWS.group, LWS.plural),
                                                           ("create", LWS.group, LWS.plural)]
    custom = Custom(api_error(404, NO_RESOURCE))
    with pytest.raises(KedaNotInstalled):
        apply_scaled_object(KubeWith(custom), OBJ, None)  # type: ignore[arg-type]
    assert custom.calls[0][1:4] == ("keda.sh", "v1alpha1", "scaledobjects")
