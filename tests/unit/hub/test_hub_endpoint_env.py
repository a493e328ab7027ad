"""Hostile ``HF_ENDPOINT`` values (reviewer): empty, unparsable (an unbalanced IPv6 bracket, a port out of range) or
not http(s). ``ctxfit plan`` says in one line that the variable is wrong, exit 2, before huggingface_hub is imported
(its import parses the value: "Port out of range" was a bare ValueError), and an empty value is not read as a Hub
that is down (``HubUnreachable: UnsupportedProtocol``)."""

from __future__ import annotations

from pathlib import Path

import pytest
from ctxfit.hub.bounded import endpoint_fault, endpoint_problem
from ctxfit.hub.resolve import endpoint_key

from tests.unit.hub.silenthub import plan_uncatalogued

BAD = ["", "http://[::1", "http://mirror.internal:99999", "http://mirror.internal:port", "ftp://mirror.internal",
       "mirror.internal"]


@pytest.mark.parametrize("flags", [(), ("--fetch-config",), ("--offline",)], ids=["hub", "fetch-config", "offline"])
@pytest.mark.parametrize("endpoint", BAD)
def test_a_bad_endpoint_is_one_line_naming_the_variable(tmp_path: Path, endpoint: str, flags: tuple[str, ...]) -> None:
    run = plan_uncatalogued(tmp_path, endpoint, {}, *flags)
    lines = run.stderr.strip().splitlines()
    assert run.returncode == 2 and len(lines) == 1, run.stderr
    assert f"HF_ENDPOINT={endpoint!r} " in lines[0] and "or unset it" in lines[0], lines[0]
    assert "Traceback" not in run.stderr and "HubUnreachable" not in run.stderr and run.stdout == ""


@pytest.mark.parametrize("endpoint", BAD)
def test_the_fault_is_named(endpoint: str) -> None:
    fault = endpoint_fault(endpoint)
    assert fault is not None and fault.startswith("is "), fault
    assert endpoint_key(endpoint or None)  # the resolution cache's folder never raises either


@pytest.mark.parametrize("endpoint", ["https://huggingface.co", "http://127.0.0.1:8080", "http://[::1]:5000/hub",
                                      "https://hf-mirror.com/"])
def test_a_good_endpoint_is_no_problem(endpoint: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HF_ENDPOINT", endpoint)
    assert endpoint_fault(endpoint) is None and endpoint_problem() is None


def test_unset_is_no_problem_and_empty_is(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("HF_ENDPOINT", raising=False)
    assert endpoint_problem() is None
    monkeypatch.setenv("HF_ENDPOINT", "")
    assert endpoint_problem() == ("HF_ENDPOINT='' is empty; set it to the http(s) URL of the Hub or a mirror "
                                  "(e.g. https://huggingface.co), or unset it")
