"""The one create-or-replace of a child object (``controller/kube/objects.py``) over ``Rest.call``, with a fake
connection pool answering in order: what each stale belief of the caller leads to, an object of that name that is not
the server's (never written), and a missing resource type (its CRD not installed) raised as it is - and its callers,
the LeaderWorkerSet and the KEDA ScaledObject, with their resources of ``rest``'s table."""

from __future__ import annotations

import json
from typing import Any
from urllib.parse import parse_qs, urlsplit

import pytest
from ctxfit.controller.kube.answers import resource_missing
from ctxfit.controller.kube.client import Kube
from ctxfit.controller.kube.groups import apply_group
from ctxfit.controller.kube.guarded import Foreign
from ctxfit.controller.kube.keda import KedaNotInstalled, apply_scaled_object
from ctxfit.controller.kube.objects import create_or_replace
from ctxfit.controller.kube.rest import LEADER_WORKER_SETS, Resource
from kubernetes.client.exceptions import ApiException

from tests.unit.controller.fakekube import NO_OBJECT, NO_RESOURCE, api_error
from tests.unit.controller.kube.fakeapi import Response, api_client_over, parse_path

RESOURCE = Resource("example.io", "v1", "widgets", kind="Widget")
SERVER_UID = "uid-of-the-server"
OURS = [{"apiVersion": "ctxfit.io/v1alpha1", "kind": "InferenceServer", "name": "w", "uid": SERVER_UID,
         "controller": True}]


def live(owners: list[dict[str, Any]] | None = OURS, uid: str = "obj-1") -> dict[str, Any]:
    return {"kind": "Widget", "metadata": {"name": "w", "namespace": "ns", "uid": uid,
                                           **({"ownerReferences": owners} if owners else {})}, "spec": {"a": 0}}


VERBS = {"GET": "get", "POST": "create", "PATCH": "patch", "DELETE": "delete"}


class Pool:
    """A urllib3-style pool answering from ``answers`` in order (an ``ApiException`` is answered with its status and
    body, a dict is the object a get returns, None succeeds); records ``(verb, group, version, plural, name, content
    type)`` and each patch sent."""

    def __init__(self, *answers: ApiException | dict[str, Any] | None) -> None:
        self.answers = list(answers)
        self.calls: list[tuple[str, ...]] = []
        self.patches: list[list[dict[str, Any]]] = []

    def request(self, method: str, url: str, body: Any = None, headers: dict[str, str] | None = None,
                **_: Any) -> Response:
        parts = urlsplit(url)
        (group, plural, _namespace, name), _sub = parse_path(parts.path)
        version = parts.path.split("/")[3] if parts.path.startswith("/apis/") else "v1"
        data: Any = json.loads(body) if body else None
        if method in ("POST", "PATCH"):
            assert parse_qs(parts.query).get("fieldManager") == ["ctxfit"]
        if method == "POST":
            name = data["metadata"]["name"]
        content_type = (headers or {}).get("Content-Type", "") if method == "PATCH" else ""
        if method == "PATCH":
            self.patches.append(data)
        self.calls.append((VERBS[method], group, version, plural, name, content_type))
        answer = self.answers.pop(0)
        if isinstance(answer, ApiException):
            return Response(int(answer.status), json.loads(answer.body or "{}"))
        return Response(200, answer or {})


def kube_over(pool: Pool) -> Kube:
    return Kube(api_client_over(pool), instance="test")


def apply(pool: Pool, *, exists: bool) -> None:
    create_or_replace(kube_over(pool).rest, RESOURCE, OBJ, exists=exists)


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
    pool = Pool(*answers)
    apply(pool, exists=exists)
    assert pool.calls == calls and not pool.answers


def test_the_patch_is_guarded_by_the_checked_uid_and_the_servers_reference() -> None:
    pool = Pool(live(owners=[{"kind": "ReplicaSet", "apiVersion": "apps/v1", "name": "x", "uid": "u"}, *OURS]), None)
    apply(pool, exists=True)
    assert pool.patches[0][:3] == [
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
    pool = Pool(*answers)
    with pytest.raises(Foreign) as raised:
        apply(pool, exists=exists)
    assert [c[0] for c in pool.calls] == (["get"] if exists else ["create", "get"])
    assert "Widget w already exists and is not owned by this InferenceServer" in raised.value.describe()


def test_a_failed_test_operation_means_the_object_was_replaced_by_another() -> None:
    """The API server answers a failed ``test`` with 422: read again; not the server's -> Foreign, nothing more."""
    pool = Pool(live(), api_error(422, {"message": "testing value /metadata/uid failed"}), live(owners=None,
                                                                                                uid="obj-2"))
    with pytest.raises(Foreign):
        apply(pool, exists=True)
    assert [c[0] for c in pool.calls] == ["get", "patch", "get"]


@pytest.mark.parametrize("exists", [False, True])
def test_a_resource_type_not_served_is_raised_without_a_create_that_must_fail(exists: bool) -> None:
    pool = Pool(api_error(404, NO_RESOURCE))
    with pytest.raises(ApiException) as raised:
        apply(pool, exists=exists)
    assert resource_missing(raised.value) and len(pool.calls) == 1


@pytest.mark.parametrize("status", [400, 403, 422, 500])
def test_other_answers_are_raised_for_the_caller(status: int) -> None:
    pool = Pool(live(), api_error(status, {}), live())
    with pytest.raises(ApiException):
        apply(pool, exists=True)
    assert pool.calls[:2] == [GET, PATCH]


def test_both_callers_use_it_with_their_resource() -> None:
    pool = Pool(api_error(404, NO_OBJECT), None)
    apply_group(kube_over(pool), OBJ, exists=True)
    lws = LEADER_WORKER_SETS
    assert [(c[0], c[1], c[2], c[3]) for c in pool.calls] == [("get", lws.group, lws.version, lws.plural),
                                                               ("create", lws.group, lws.version, lws.plural)]
    pool = Pool(api_error(404, NO_RESOURCE))
    with pytest.raises(KedaNotInstalled):
        apply_scaled_object(kube_over(pool), OBJ, None)
    assert pool.calls[0][1:4] == ("keda.sh", "v1alpha1", "scaledobjects")
