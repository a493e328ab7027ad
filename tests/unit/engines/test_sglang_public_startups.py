"""Break-it pass of the SGLang start-up parser (ctxfit.engines.sglang.startup) with real, unseen start-up lines
from public reports (tests/fixtures/startups/sglang-public-startups.yaml, each with its URL), through the library and
through ``ctxfit calibrate``; then the wording classes read in SGLang's published wheels that no public log in the
fixtures shows (the versions each covers are in the parser's docstring), and the derivation of weights / load time
for versions that print neither, checked on the real start-ups in startups.yaml that document it."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml
from ctxfit.cli import main
from ctxfit.engines.sglang.startup import parse_startup
from ctxfit.vocab.startup import StartupReport
from hypothesis import given, settings
from hypothesis import strategies as st

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures" / "startups"
CASES: list[dict[str, Any]] = yaml.safe_load((FIXTURES / "sglang-public-startups.yaml").read_text())
HANDED: list[dict[str, Any]] = yaml.safe_load((FIXTURES / "startups.yaml").read_text())
GIB = 1 << 30
TOL_GIB = 0.006  # SGLang prints GB with 2 decimals

FIELDS = {
    "weightsGiB": "weights_bytes",
    "kvCacheGiB": "kv_cache_bytes",
    "kvCacheTokens": "kv_cache_tokens",
    "cudaGraphGiB": "cuda_graph_bytes",
    "servedContextLength": "served_context_length",
    "maxRunningRequests": "max_running_requests",
    "maxConcurrency": "max_concurrency",
    "loadSeconds": "load_seconds",
}
OBSERVED_KEYS = {  # report field -> ``ctxfit calibrate -o json`` observed key
    "weights_bytes": "weightsBytes",
    "kv_cache_bytes": "kvCacheBytes",
    "kv_cache_tokens": "kvCacheTokens",
    "served_context_length": "servedContextLength",
    "max_concurrency": "maxConcurrency",
    "load_seconds": "loadSeconds",
}
SERVER = """apiVersion: ctxfit.io/v1alpha1
kind: InferenceServer
metadata: {name: t}
spec:
  model: {name: meta-llama/Llama-3.1-8B-Instruct}
  engine: {kind: sglang, version: "0.5.4"}
  gpu: {count: 1, product: NVIDIA-H100-80GB-HBM3}
  context: {target: 8192}
"""


def _close(report: StartupReport, field: str, want: float) -> None:
    got = getattr(report, field)
    assert got is not None, field
    if field.endswith("_bytes"):
        assert abs(got / GIB - want) <= TOL_GIB, (field, got / GIB, want)
    else:
        assert got == pytest.approx(want, abs=0.006), (field, got, want)


def test_fixture_is_real_and_new() -> None:
    """Every log cites a public URL; none is already in the handed start-ups."""
    handed = (FIXTURES / "startups.yaml").read_text()
    assert len(CASES) >= 15 and len({c["id"] for c in CASES}) == len(CASES)
    for case in CASES:
        assert case["source"].startswith("https://github.com/"), case["id"]
        assert case["engine"]["kind"] == "sglang" and case["engine"]["version"]
        assert case["source"] not in handed, case["id"]
        assert set(case["expected"]) <= set(FIELDS) and set(case["notObserved"]) <= set(FIELDS)


@pytest.mark.parametrize("case", CASES, ids=[c["id"] for c in CASES])
def test_real_startup_parses(case: dict[str, Any]) -> None:
    report = parse_startup(case["log"])
    for key, want in case["expected"].items():
        _close(report, FIELDS[key], want)
    for key in case["notObserved"]:
        assert getattr(report, FIELDS[key]) is None, key
    assert bool(report.source_lines) == bool(case["expected"])
    assert all(line in case["log"] for line in report.source_lines)


@pytest.mark.parametrize("case", CASES, ids=[c["id"] for c in CASES])
def test_real_startup_through_calibrate(case: dict[str, Any], tmp_path: Path,
                                        capsys: pytest.CaptureFixture[str]) -> None:
    """``ctxfit calibrate`` reads the same values; its exit is 0 when it made a calibration sample (the log gives the
    KV pool's bytes), else 1 with one line saying why (README's exit codes: 1 = no result), never 2."""
    server = tmp_path / "s.yaml"
    server.write_text(SERVER)
    log = tmp_path / "startup.log"
    log.write_text(case["log"])
    code = main(["calibrate", "-f", str(server), "--log", str(log), "-o", "json"])
    out = capsys.readouterr()
    assert "Traceback" not in out.err
    report = parse_startup(case["log"])
    assert code == (0 if report.kv_cache_bytes is not None else 1)
    if code == 1:
        assert out.err.count("\n") == 1 and ("tokens or blocks only" in out.err) == report.observed, out.err
    observed = json.loads(out.out)["observed"]
    for field, key in OBSERVED_KEYS.items():
        assert observed[key] == getattr(report, field), key


# Wordings read in the wheels (the f-strings of the cited file, filled with example values): classes no public log
# in the fixtures shows. Each: (id, text, expected values, fields that must stay unobserved).
WORDINGS: list[tuple[str, str, dict[str, float], tuple[str, ...]]] = [
    ("0.2.7-gpu-prefix-two-ranks-derived",
     "[gpu=0] Load weight begin. avail mem=78.50 GB\n[gpu=1] Load weight begin. avail mem=78.60 GB\n"
     "[gpu=1] Load weight end. type=LlamaForCausalLM, dtype=torch.float16, avail mem=71.00 GB\n"
     "[gpu=0] Load weight end. type=LlamaForCausalLM, dtype=torch.float16, avail mem=71.20 GB\n"
     "[gpu=0] max_total_num_tokens=450000, max_prefill_tokens=16384, max_running_requests=4096, context_len=8192",
     {"weightsGiB": 7.6, "kvCacheTokens": 450000, "servedContextLength": 8192}, ("loadSeconds", "kvCacheGiB")),
    ("0.1.21-0.2.5-gpu-id-prefix-derived",
     "[gpu_id=0] Load weight begin. avail mem=23.20 GB\n[gpu_id=1] Load weight begin. avail mem=23.20 GB\n"
     "[gpu_id=0] Load weight end. type=Qwen2ForCausalLM, dtype=torch.float16, avail mem=11.57 GB\n"
     "[gpu_id=1] Load weight end. type=Qwen2ForCausalLM, dtype=torch.float16, avail mem=11.52 GB\n"
     "[gpu_id=0] max_total_num_tokens=30000, max_prefill_tokens=16384, max_running_requests=2048, context_len=32768",
     {"weightsGiB": 11.68, "kvCacheTokens": 30000, "servedContextLength": 32768}, ("loadSeconds",)),
    ("0.1.13-singular-token-count",
     "max_total_num_token=120000, max_prefill_num_token=16384, context_len=4096, ",
     {"kvCacheTokens": 120000, "servedContextLength": 4096}, ("maxRunningRequests", "weightsGiB")),
    ("0.4.3-timestamps-and-avail-derived",
     "[2025-02-01 10:00:00 TP0] Load weight begin. avail mem=78.81 GB\n"
     "[2025-02-01 10:00:05 TP0] Load weight end. type=LlamaForCausalLM, dtype=torch.bfloat16, avail mem=63.72 GB\n"
     "[2025-02-01 10:00:05 TP0] KV Cache is allocated. K size: 27.13 GB, V size: 27.13 GB.",
     {"weightsGiB": 15.09, "loadSeconds": 5.0, "kvCacheGiB": 54.26}, ("kvCacheTokens",)),
    ("0.5.10-npu-graph-and-piecewise-summed",
     "[2026-01-01 00:00:00 TP0] Load weight end. elapsed=12.50 s, type=Qwen3ForCausalLM, avail mem=60.00 GB, mem "
     "usage=15.00 GB.\n[2026-01-01 00:00:10 TP0] Capture npu graph end. Time elapsed: 9.00 s. mem usage=0.70 GB. "
     "avail mem=9.00 GB.\n[2026-01-01 00:00:20 TP0] Capture piecewise CUDA graph end. Time elapsed: 8.00 s. mem "
     "usage=0.30 GB. avail mem=8.70 GB.",
     {"weightsGiB": 15.0, "loadSeconds": 12.5, "cudaGraphGiB": 1.0}, ()),
    ("0.5.23-target-decode-prefill-and-draft",
     "[2026-01-01 00:00:00 TP0] Capture target decode CUDA graph end. bs=[1, 2, 4, 8, 12, 16, 24, 32, 40, 48, 56, "
     "64, 72, 80, 88, 96, 104, 112, 120, 128, 136, 144, 152, 160, 168, 176, 184, 192, 200, 208, 216, 224, 232, 240, "
     "248, 256, 272, 288, 304, 320, 336, 352, 368, 384, 400, 416, 432, 448, 464, 480, 496, 512], elapsed=5.10 s, mem "
     "usage=1.20 GB, avail mem=3.00 GB.\n"
     "[2026-01-01 00:00:00 TP0] Capture target prefill CUDA graph end. elapsed=2.00 s, mem usage=0.30 GB, avail "
     "mem=2.70 GB.\n"
     "[2026-01-01 00:00:00 TP0] Capture draft decode CUDA graph end. bs=[1, 2], elapsed=2.00 s, mem usage=0.40 GB, "
     "avail mem=2.30 GB.",
     {"cudaGraphGiB": 1.5}, ()),
    ("0.5.23-post-capture-kv-sizing",
     "[2026-01-01 00:00:00 TP0] KV Cache VA upper bound. dtype: torch.bfloat16, #tokens: 9000000, K size: 90.00 GB, "
     "V size: 90.00 GB\n"
     "[2026-01-01 00:00:09 TP0] Post-capture KV sizing: KV cache allocated. dtype: torch.bfloat16, #tokens: 400000, "
     "KV size: 48.83 GB, avail mem=4.10 GB\n"
     "[2026-01-01 00:00:09 TP0] Post-capture KV sizing: draft KV cache allocated. dtype: torch.bfloat16, #tokens: "
     "1000, KV size: 0.20 GB",
     {"kvCacheTokens": 400000, "kvCacheGiB": 48.83}, ()),
    ("0.5.4-eagle-draft-pool-after-target",
     "[2025-11-01 00:00:01 TP0] KV Cache is allocated. #tokens: 500000, K size: 30.52 GB, V size: 30.52 GB\n"
     "[2025-11-01 00:00:01 TP1] KV Cache is allocated. #tokens: 500000, K size: 30.52 GB, V size: 30.52 GB\n"
     "[2025-11-01 00:00:01 TP0] Capture cuda graph end. Time elapsed: 9.00 s. mem usage=0.90 GB. avail mem=5.00 GB.\n"
     "[2025-11-01 00:00:09 TP1] KV Cache is allocated. #tokens: 520480, K size: 0.99 GB, V size: 0.99 GB\n"
     "[2025-11-01 00:00:09 TP0] KV Cache is allocated. #tokens: 520480, K size: 0.99 GB, V size: 0.99 GB\n"
     "[2025-11-01 00:00:15 TP0] max_total_num_tokens=500000, chunked_prefill_size=8192, max_prefill_tokens=16384, "
     "max_running_requests=48, context_len=131072, available_gpu_mem=3.00 GB",
     {"kvCacheTokens": 500000, "kvCacheGiB": 61.04, "cudaGraphGiB": 0.9}, ()),
    ("0.5.4-swa-subpools-then-swakvpool",
     "[2025-11-01 00:00:01 TP0] KV Cache is allocated. #tokens: 798276, K size: 17.13 GB, V size: 17.13 GB\n"
     "[2025-11-01 00:00:01 TP0] KV Cache is allocated. #tokens: 997846, K size: 22.84 GB, V size: 22.84 GB\n"
     "[2025-11-01 00:00:01 TP0] SWAKVPool mem usage: 79.94 GB, swa size: 798276, full size: 997846",
     {"kvCacheTokens": 997846, "kvCacheGiB": 79.94}, ()),
    ("0.5.23-swa-va-upper-bound-is-no-pool",
     "[2026-01-01 00:00:00 TP0] SWAKVPool VA upper bound: 70.00 GB, swa size: 900000, full size: 800000",
     {}, ("kvCacheGiB", "kvCacheTokens")),
]


@pytest.mark.parametrize("wid, text, expected, unobserved", WORDINGS, ids=[w[0] for w in WORDINGS])
def test_wheel_wordings(wid: str, text: str, expected: dict[str, float], unobserved: tuple[str, ...]) -> None:
    report = parse_startup(text)
    for key, want in expected.items():
        _close(report, FIELDS[key], want)
    for key in unobserved:
        assert getattr(report, FIELDS[key]) is None, (wid, key)


HANDED_SGLANG = [c for c in HANDED if c["engine"]["kind"] == "sglang" and c.get("log")]


@pytest.mark.parametrize("case", HANDED_SGLANG, ids=[c["id"] for c in HANDED_SGLANG])
def test_handed_startups_derive_what_they_document(case: dict[str, Any]) -> None:
    """The handed start-ups of versions that print no weights document them as begin avail - end avail
    (``sglang_weights_derived_GB``); the parser derives the same, marks it derived, and never overrides a printed
    "mem usage"."""
    report = parse_startup(case["log"])
    observed = case.get("observed") or {}
    if "sglang_weights_derived_GB" in observed:
        _close(report, "weights_bytes", observed["sglang_weights_derived_GB"])
        assert "weights_bytes" in report.derived
    if "sglang_weights_mem_usage_GB" in observed:
        _close(report, "weights_bytes", observed["sglang_weights_mem_usage_GB"])
        assert "weights_bytes" not in report.derived
    if report.load_seconds is not None and "load_seconds" in report.derived:
        assert report.load_seconds >= 0


LINES = [line for case in CASES for line in case["log"].splitlines()]


@settings(max_examples=200, deadline=None)
@given(st.lists(st.sampled_from(LINES), max_size=12), st.integers(0, 400), st.text(max_size=20))
def test_cut_and_spliced_real_lines_never_raise(lines: list[str], cut: int, noise: str) -> None:
    """Real lines cut anywhere, spliced with noise and reordered: no exception, no negative value."""
    text = "\n".join(line[:cut] + noise for line in lines)
    report = parse_startup(text)
    for name in FIELDS.values():
        value = getattr(report, name)
        assert value is None or value >= 0
