"""The shared create-or-replace of a custom object (``controller/kube/custom.py``), with a fake
``CustomObjectsApi``: what each stale belief of the caller leads to, and a missing resource type (its CRD not
installed) raised as it is - by both callers, the LeaderWorkerSet and the KEDA ScaledObject."""

from __future__ import annotations

from typing import Any

import pytest
from ctxfit.controller.kube.custom import CustomResource, apply_custom_object, resource_missing
from ctxfit.controller.kube.groups import LWS, apply_group
from ctxfit.controller.kube.keda import KedaNotInstalled, apply_scaled_object
from kubernetes.client.rest import ApiException

from tests.unit.controller.test_autoscaling_reconcile import NO_OBJECT, NO_RESOURCE, api_error

RESOURCE = CustomResource("example.io", "v1", "widgets")


class Released:
    """A raw response whose connection goes back to the pool."""

    data = b"{}"

    def release_conn(self) -> None:
        pass


class Custom:
    """Answers create/patch from ``answers`` (an ``ApiException`` is raised, anything else succeeds), in order;
    records ``(verb, group, version, plural, name, content type)``."""

    def __init__(self, *answers: ApiException | None) -> None:
        self.answers = list(answers)
        self.calls: list[tuple[str, ...]] = []

    def _answer(self) -> Released:
        answer = self.answers.pop(0)
        if answer is not None:
            raise answer
        return Released()

    def create_namespaced_custom_object(self, group: str, version: str, namespace: str, plural: str,
                                        body: dict[str, Any], **kw: Any) -> Released:
        assert kw["field_manager"] == "ctxfit" and kw["_preload_content"] is False
        self.calls.append(("create", group, version, plural, body["metadata"]["name"], ""))
        return self._answer()

    def patch_namespaced_custom_object(self, group: str, version: str, namespace: str, plural: str, name: str,
                                       body: list[dict[str, Any]], **kw: Any) -> Released:
        assert kw["field_manager"] == "ctxfit" and body[0] == {"op": "replace", "path": "/spec", "value": {"a": 1}}
        self.calls.append(("patch", group, version, plural, name, kw["_content_type"]))
        return self._answer()


class KubeWith:
    def __init__(self, custom: Custom) -> None:
        self.custom = custom


OBJ = {"kind": "Widget", "metadata": {"name": "w", "namespace": "ns", "labels": {"app": "x"}}, "spec": {"a": 1}}
PATCH = ("patch", "example.io", "v1", "widgets", "w", "application/json-patch+json")
CREATE = ("create", "example.io", "v1", "widgets", "w", "")


@pytest.mark.parametrize(("exists", "answers", "calls"), [
    (False, [None], [CREATE]),
    (True, [None], [PATCH]),
    (False, [api_error(409, {}), None], [CREATE, PATCH]),  # created meanwhile: replaced
    (True, [api_error(404, NO_OBJECT), None], [PATCH, CREATE]),  # deleted meanwhile: created again
])
def test_a_stale_belief_is_corrected_by_the_answer(exists: bool, answers: list[ApiException | None],
                                                   calls: list[tuple[str, ...]]) -> None:
    custom = Custom(*answers)
    apply_custom_object(KubeWith(custom), RESOURCE, OBJ, exists=exists)  # type: ignore[arg-type]
    assert custom.calls == calls and not custom.answers


@pytest.mark.parametrize("exists", [False, True])
def test_a_resource_type_not_served_is_raised_without_a_create_that_must_fail(exists: bool) -> None:
    custom = Custom(api_error(404, NO_RESOURCE))
    with pytest.raises(ApiException) as raised:
        apply_custom_object(KubeWith(custom), RESOURCE, OBJ, exists=exists)  # type: ignore[arg-type]
    assert resource_missing(raised.value) and len(custom.calls) == 1


@pytest.mark.parametrize("status", [400, 403, 422, 500])
def test_other_answers_are_raised_for_the_caller(status: int) -> None:
    custom = Custom(api_error(status, {}))
    with pytest.raises(ApiException):
        apply_custom_object(KubeWith(custom), RESOURCE, OBJ, exists=True)  # type: ignore[arg-type]
    assert custom.calls == [PATCH]


def test_both_callers_use_it_with_their_resource() -> None:
    custom = Custom(api_error(404, NO_OBJECT), None)
    apply_group(KubeWith(custom), OBJ, exists=True)  # type: ignore[arg-type]
    assert [(c[0], c[1], c[3]) for c in custom.calls] == [("patch", LWS.group, LWS.plural),
                                                           ("create", LWS.group, LWS.plural)]
    custom = Custom(api_error(404, NO_RESOURCE))
    with pytest.raises(KedaNotInstalled):
        apply_scaled_object(KubeWith(custom), OBJ, None)  # type: ignore[arg-type]
    assert custom.calls[0][1:4] == ("keda.sh", "v1alpha1", "scaledobjects")
