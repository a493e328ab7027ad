"""Start-up parsers on a real vLLM V1 log not in the handed cases (https://github.com/guqiong96/Lvllm/issues/35,
tests/fixtures/startups/vllm-v1-lvllm-issue35.log) and on garbled copies of its lines: a number no GPU can hold
(it would overflow the int64 ``status.observed`` fields) is "not observed", never a value."""

from __future__ import annotations

from pathlib import Path

import pytest
from ctxfit.api import EngineKind, GiB
from ctxfit.engines.startup import parse_startup

LOG = (Path(__file__).resolve().parents[2] / "fixtures" / "startups" / "vllm-v1-lvllm-issue35.log").read_text()


def test_real_v1_log() -> None:
    report = parse_startup(EngineKind.VLLM, LOG)
    assert report.kv_cache_tokens == 53136
    assert report.kv_cache_bytes == round(12.57 * GiB)
    assert report.weights_bytes == round(11.55 * GiB)
    assert report.load_seconds == pytest.approx(1940.360672)


@pytest.mark.parametrize(("real", "garbled", "field"), [
    ("GPU KV cache size: 53,136 tokens", "GPU KV cache size: 99999999999999999999999 tokens", "kv_cache_tokens"),
    ("Available KV cache memory: 12.57 GiB", "Available KV cache memory: 99999999999999999999 GiB", "kv_cache_bytes"),
    ("Model loading took 11.55 GiB memory and 1940.360672 seconds",
     "Model loading took 11.55 GiB memory and 1e400 seconds", "load_seconds"),
])
def test_implausible_numbers_are_not_observed(real: str, garbled: str, field: str) -> None:
    report = parse_startup(EngineKind.VLLM, LOG.replace(real, garbled))
    assert getattr(report, field) is None
    assert all(v is None or 0 <= v < 2**63 for v in (report.kv_cache_bytes, report.kv_cache_tokens,
                                                      report.weights_bytes))
