"""``KubeClient`` (controller/kube/protocol.py) is what the reconcile calls: ``client.Kube`` and the tests' one
``FakeKube`` (tests/unit/controller/fakekube.py) follow it method for method, signatures included, and the tests'
``FakeClaims`` overrides ``ClaimsApi`` with its signatures. mypy checks the same (fakekube.py's ``_conforms``
line); this fails in the unit suite too when the Protocol changes and a fake does not."""

from __future__ import annotations

import inspect

import pytest
from ctxfit.controller.kube.claims import ClaimsApi
from ctxfit.controller.kube.client import Kube
from ctxfit.controller.kube.protocol import KubeClient
from ctxfit.controller.kube.rest import CLAIMS, Rest

from tests.unit.controller.fakekube import FakeClaims, FakeKube

METHODS = [name for name, value in vars(KubeClient).items() if inspect.isfunction(value) and not name.startswith("_")]
CLAIM_METHODS = ["storage", "get_claim", "created", "apply_claim", "delete_claim"]


def test_the_protocol_names_the_calls() -> None:
    assert {"get_server", "replace_status", "apply", "log_head", "post_object_event"} <= set(METHODS)
    assert KubeClient.__annotations__ == {"rest": "Rest", "instance": "str"}


@pytest.mark.parametrize("client", [Kube, FakeKube], ids=lambda c: c.__name__)
@pytest.mark.parametrize("method", METHODS)
def test_each_client_has_the_protocols_signature(client: type, method: str) -> None:
    assert inspect.signature(getattr(client, method)) == inspect.signature(getattr(KubeClient, method))


def test_the_fake_has_a_real_rest() -> None:
    kube = FakeKube(None)
    assert isinstance(kube.rest, Rest) and isinstance(kube.instance, str)
    assert kube.rest.read(CLAIMS, "ns", "absent") is None, "served by fakeapi"


@pytest.mark.parametrize("method", CLAIM_METHODS)
def test_the_fake_claims_override_with_the_same_signature(method: str) -> None:
    assert getattr(FakeClaims, method) is not getattr(ClaimsApi, method), "overridden: the fake sends nothing"
    assert inspect.signature(getattr(FakeClaims, method)) == inspect.signature(getattr(ClaimsApi, method))
