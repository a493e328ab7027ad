"""The test-wide network guard (tests/conftest.py): no test reaches huggingface.co or any other non-local host."""

from __future__ import annotations

import os
import socket

import pytest

from tests import conftest


def _take_violations(start: int) -> list[str]:
    seen = conftest._violations[start:]
    del conftest._violations[start:]  # this test provoked them on purpose: not a failure of the test
    return seen


def test_dns_of_a_remote_host_is_refused_and_recorded() -> None:
    start = len(conftest._violations)
    with pytest.raises(OSError):
        socket.getaddrinfo("huggingface.co", 443)
    assert _take_violations(start) == ["DNS lookup of huggingface.co"]


def test_connect_to_a_remote_address_is_refused_and_recorded() -> None:
    start = len(conftest._violations)
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s, pytest.raises(OSError):
        s.connect(("192.0.2.1", 443))  # TEST-NET-1: never routed
    assert _take_violations(start) == ["connect to 192.0.2.1:443"]


def test_loopback_is_allowed() -> None:
    start = len(conftest._violations)
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as server:
        server.bind(("127.0.0.1", 0))
        server.listen(1)
        with socket.create_connection(server.getsockname(), timeout=5):
            pass
    assert conftest._violations[start:] == []


def test_huggingface_hub_points_at_the_closed_sentinel() -> None:
    from huggingface_hub import constants

    assert os.environ["HF_ENDPOINT"] == conftest.SENTINEL_ENDPOINT
    assert constants.ENDPOINT == conftest.SENTINEL_ENDPOINT  # read at import: the guard ran first
    assert constants.HF_HOME.startswith(conftest._BASE)
    assert "HF_TOKEN" not in os.environ
