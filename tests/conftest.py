"""Test-wide setup: the repository root importable (bench/ helpers), and no test reaches the real network.

CI has no huggingface.co. Every test that resolves a model talks to the local Hub stand-in
(``tests.hubfixtures.server``, through ``HF_ENDPOINT`` or an explicit ``endpoint=``) or runs offline. Three guards:

- At import (before huggingface_hub is imported, whose ``constants`` read the environment once): ``HF_ENDPOINT``
  points at a closed local port, ``HF_HOME`` and ``CTXFIT_CACHE`` at a temporary directory of this run, no HF token.
  A child process (the CLI, the operator) that is not given the stand-in fails as "Hub unreachable", never reaches
  huggingface.co, and never reads the developer's own caches.
- In this process: a connection to a non-loopback address, a DNS lookup of a non-local name, or a connection to the
  closed sentinel port (an in-process huggingface_hub call that was not pointed at the stand-in) fails the test
  (``OSError`` to the caller, and an error at teardown even when the caller swallowed it).
"""

from __future__ import annotations

import ipaddress
import os
import socket
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

# The non-test modules next to the tests (builders.py, *kit.py...) hold checks shared by several test modules:
# pytest rewrites their asserts too, so a failing check reports its values as it would in the test module.
pytest.register_assert_rewrite("tests.unit", "tests.e2e")

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

SENTINEL_PORT = 9  # discard: nothing listens; an unpointed Hub client gets "connection refused" at once
SENTINEL_ENDPOINT = f"http://127.0.0.1:{SENTINEL_PORT}"
_BASE = tempfile.mkdtemp(prefix="ctxfit-tests-")
for _key in ("HF_TOKEN", "HUGGING_FACE_HUB_TOKEN", "HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE", "HF_HUB_CACHE"):
    os.environ.pop(_key, None)
os.environ.update({"HF_ENDPOINT": SENTINEL_ENDPOINT, "HF_HOME": f"{_BASE}/hf", "CTXFIT_CACHE": f"{_BASE}/ctxfit",
                   "HF_HUB_DISABLE_TELEMETRY": "1", "HF_HUB_DISABLE_PROGRESS_BARS": "1"})
import huggingface_hub.constants  # noqa: E402,F401 - read the environment above now, before any test changes it

_LOCAL_NAMES = {"localhost", "localhost.localdomain", "ip6-localhost", ""}
_violations: list[str] = []
_real_connect = socket.socket.connect
_real_connect_ex = socket.socket.connect_ex
_real_getaddrinfo = socket.getaddrinfo


def _local(host: str) -> bool:
    if host in _LOCAL_NAMES or host.endswith(".localhost"):
        return True
    try:
        ip = ipaddress.ip_address(host.split("%", 1)[0])
    except ValueError:
        return False
    return ip.is_loopback or ip.is_unspecified


def _check(address: object) -> None:
    if not isinstance(address, tuple) or len(address) < 2:
        return  # AF_UNIX paths and the like
    host, port = str(address[0]), address[1]
    if not _local(host):
        _violations.append(f"connect to {host}:{port}")
        raise OSError(f"tests/conftest.py: network access to {host}:{port} is not allowed in tests")
    if port == SENTINEL_PORT:
        _violations.append("a Hub request not pointed at the local stand-in (HF_ENDPOINT sentinel)")


def _connect(self: socket.socket, address: object) -> None:
    _check(address)
    _real_connect(self, address)  # type: ignore[arg-type]


def _connect_ex(self: socket.socket, address: object) -> int:
    _check(address)
    return _real_connect_ex(self, address)  # type: ignore[arg-type]


def _getaddrinfo(host: object, *args: object, **kwargs: object):  # type: ignore[no-untyped-def]
    name = host.decode() if isinstance(host, bytes) else str(host or "")
    if not _local(name):
        _violations.append(f"DNS lookup of {name}")
        raise socket.gaierror(socket.EAI_NONAME, f"tests/conftest.py: DNS lookup of {name} is not allowed in tests")
    return _real_getaddrinfo(host, *args, **kwargs)  # type: ignore[arg-type]


socket.socket.connect = _connect  # type: ignore[method-assign]
socket.socket.connect_ex = _connect_ex  # type: ignore[method-assign]
socket.getaddrinfo = _getaddrinfo


@pytest.fixture(autouse=True)
def _no_real_network() -> Iterator[None]:
    """Fail the test that tried to reach the network (even if the code under test swallowed the OSError)."""
    start = len(_violations)
    yield
    seen = _violations[start:]
    if seen:
        del _violations[start:]
        pytest.fail("the test reached for the network: " + "; ".join(sorted(set(seen))), pytrace=False)
