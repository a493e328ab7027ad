"""Start-up accounting parsers (engines/*/startup.py) on every verbatim start-up in the handed cases,
on other versions' wordings, and under fuzzing (unknown wording -> not observed, never an exception)."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
import yaml
from ctxfit.engines.sglang.startup import parse_startup as parse_sglang
from ctxfit.engines.vllm.startup import parse_startup as parse_vllm
from ctxfit.vocab.startup import StartupReport
from hypothesis import given, settings
from hypothesis import strategies as st

CASES: list[dict[str, Any]] = yaml.safe_load(
    (Path(__file__).resolve().parents[2] / "fixtures" / "startups" / "startups.yaml").read_text()
)
GIB = 1 << 30
TOL_GIB = 0.006  # printed with 2 decimals (4 for "took 14.9888 GB")

# case key -> (report field, how several printed values combine)
VLLM_KEYS = {
    "weightsGiB": ("weights_bytes", max),
    "activationPeakGiB": ("activation_bytes", max),
    "activationPeakGiB_derived": ("activation_bytes", max),
    "nonTorchGiB": ("non_torch_bytes", max),
    "cudaGraphGiB": ("cuda_graph_bytes", max),
    "availableKvGiB": ("kv_cache_bytes", min),
    "kvCacheTokens": ("kv_cache_tokens", min),
    "kvCacheTokens_derived": ("kv_cache_tokens", min),
    "numGpuBlocks": ("num_gpu_blocks", min),
    "maxConcurrency": ("max_concurrency", min),
}
SGLANG_KEYS = {
    "sglang_weights_mem_usage_GB": ("weights_bytes", max),
    "sglang_kv_tokens": ("kv_cache_tokens", min),
    "sglang_cuda_graph_mem_GB": ("cuda_graph_bytes", max),
}
NO_ENGINE_LINES = {
    "vllm015-018-qwen3-14b-h100-version-sweep": "no raw log committed (harness JSON only)",
    "vllm028-gptoss120b-8x-rtxpro4500-tp8": "the reporter's summary table, not engine wording",
}
NOT_PRINTED = {
    # values the case derived or read elsewhere, not printed in its log excerpt
    ("vllm-v0-llama3-8b-h100-tp2", "availableKvGiB_derived"),
}
NEGATIVE_NOT_OBSERVED = {
    # a V0 ledger where nothing fits prints a negative pool; bytes stay non-negative (vocab/startup.py _to_value),
    # so the pool is "not observed" and the failure shows in "# cuda blocks: 0"
    ("vllm073-v0-qwen25-7b-bnb4-rtx4060-wsl-util070", "availableKvGiB"),
}


def _numbers(value: Any) -> list[float]:
    if isinstance(value, int | float):
        return [float(value)]
    if isinstance(value, str):
        return [float(x) for x in re.findall(r"\d+(?:\.\d+)?", re.sub(r"\([^)]*\)", "", value))]
    return []


def _parse(case: dict[str, Any]) -> StartupReport:
    text = case.get("log") or ""
    return parse_vllm(text) if case["engine"]["kind"] == "vllm" else parse_sglang(text)


def _check(case: dict[str, Any], report: StartupReport, key: str, value: Any, field: str, combine: Any) -> None:
    numbers = _numbers(value)
    if not numbers:
        return
    want = combine(numbers)
    got = getattr(report, field)
    assert got is not None, f"{case['id']}: {key} = {value} not read ({field})"
    if field.endswith("_bytes"):
        assert abs(got / GIB - want) <= TOL_GIB, f"{case['id']}: {key} {want} GiB, parsed {got / GIB:.4f}"
    else:
        assert got == pytest.approx(want, abs=0.006), f"{case['id']}: {key} {want}, parsed {got}"


@pytest.mark.parametrize("case", CASES, ids=[c["id"] for c in CASES])
def test_every_handed_startup(case: dict[str, Any]) -> None:
    report = _parse(case)
    if case["id"] in NO_ENGINE_LINES:
        assert not report.observed
        return
    assert report.observed or report.weights_bytes is not None, f"{case['id']}: nothing read"
    keys = VLLM_KEYS if case["engine"]["kind"] == "vllm" else SGLANG_KEYS
    observed = case["observed"]
    for key, (field, combine) in keys.items():
        if key in observed and (case["id"], key) not in NOT_PRINTED:
            value = observed[key]
            if isinstance(value, dict):  # per-version values without a log
                continue
            if key == "numGpuBlocks" and "blocks:" not in (case.get("log") or ""):
                continue  # V1 from 0.8 prints tokens, the case derived the blocks
            if (case["id"], key) in NEGATIVE_NOT_OBSERVED:
                assert value < 0 and getattr(report, field) is None, case["id"]
                continue
            _check(case, report, key, value, field, combine)
    if case["engine"]["kind"] == "sglang" and "sglang_k_size_GB" in observed:
        want = observed["sglang_k_size_GB"] + observed["sglang_v_size_GB"]
        assert report.kv_cache_bytes is not None
        assert abs(report.kv_cache_bytes / GIB - want) <= 2 * TOL_GIB
    if "maxRunningRequests" in observed and "max_total_num_tokens" in (case.get("log") or ""):
        assert report.max_running_requests == observed["maxRunningRequests"]
    # every value carries its evidence: a verbatim line of this start-up's log
    assert report.source_lines, f"{case['id']}: values without source lines"
    log = case.get("log") or ""
    assert all(line.strip() in log for line in report.source_lines), case["id"]


def test_v1_019_full_ledger() -> None:
    report = _parse(next(c for c in CASES if c["id"] == "vllm019-llama31-8b-h100-tp1"))
    assert report.kv_cache_tokens == 476016
    assert report.served_context_length == 8192
    assert report.load_seconds == pytest.approx(14.42968)
    assert "Available KV cache memory: 58.11 GiB" in " ".join(report.source_lines)


def test_sglang_scheduler_line_gives_context_and_concurrency() -> None:
    report = _parse(next(c for c in CASES if c["id"] == "sglang052-grok2-8xh100-tp8"))
    assert report.served_context_length == 131072
    assert report.kv_cache_tokens == 903439
    assert report.max_concurrency == pytest.approx(903439 / 131072, abs=0.01)
    assert "max_concurrency" in report.derived


@pytest.mark.parametrize(
    ("text", "field", "want"),
    [
        ("INFO 01-30 [gpu_model_runner.py:848] Loading model weights took 67.7229 GB", "weights_bytes", 67.7229 * GIB),
        ("INFO [model_runner.py:1140] Model loading took 0.5153 GiB and 6.204724 seconds", "load_seconds", 6.204724),
        ("[gpu_worker.py:358] Available KV cache memory: 18.78 GiB", "kv_cache_bytes", 18.78 * GIB),
        ("[kv_cache_utils.py:1305] GPU KV cache size: 1,175,856 tokens", "kv_cache_tokens", 1175856),
        ("Maximum concurrency for 131,072 tokens per request: 0.62x", "max_concurrency", 0.62),
        ("Maximum concurrency for 131,072 tokens per request: 0.62x", "served_context_length", 131072),
        ("INFO Using max model len 40960", "served_context_length", 40960),
        ("Graph capturing finished in 12 secs, took 2.03 GiB", "cuda_graph_bytes", 2.03 * GIB),
        ("INFO 12-13 worker.py:243] available_kv_cache_memory    58.97GiB", "kv_cache_bytes", 58.97 * GIB),
        ("INFO # cuda blocks: 100, # CPU blocks: 2048", "kv_cache_tokens", 1600),
        ("Memory profiling results: duration=3.49 seconds, available_kv_cache_memory=58.97GiB", "kv_cache_bytes",
         58.97 * GIB),
        ("INFO [gpu_model_runner.py:1600] Model loading took 14.9889 GiB and 8.530000 seconds", "weights_bytes",
         14.9889 * GIB),
    ],
    ids=["v07-loading", "v08-seconds", "v1-available", "v1-tokens-commas", "concurrency", "concurrency-L",
         "max-model-len", "graph", "v065-kv", "v0-blocks", "v065-kv-equals", "v1-010-loading"],
)
def test_vllm_wordings_across_versions(text: str, field: str, want: float) -> None:
    got = getattr(parse_vllm(text), field)
    assert got == pytest.approx(want, abs=1)


@pytest.mark.parametrize(
    ("text", "field", "want"),
    [
        ("[2026-04-27 02:36:06] Load weight end. elapsed=1.97 s, type=Qwen3ForCausalLM, avail mem=162.30 GB, "
         "mem usage=15.28 GB.", "weights_bytes", 15.28 * GIB),
        ("[2026-04-27 02:36:06] Load weight end. elapsed=1.97 s, type=Qwen3ForCausalLM, avail mem=162.30 GB, "
         "mem usage=15.28 GB.", "load_seconds", 1.97),
        ("KV Cache is allocated. dtype: torch.float8_e4m3fn, #tokens: 1011264, K size: 5.79 GB, V size: 5.79 GB",
         "kv_cache_bytes", 11.58 * GIB),
        ("[TP0] KV Cache is allocated. #tokens: 524288, KV size: 17.16 GB", "kv_cache_bytes", 17.16 * GIB),
        ("[TP0] KV Cache is allocated. #tokens: 524288, KV size: 17.16 GB", "kv_cache_tokens", 524288),
        ("SWAKVPool mem usage: 79.94 GB, swa size: 798276, full size: 997846", "kv_cache_tokens", 997846),
        ("max_total_num_tokens=8192, context_len=8192, available_gpu_mem=2.86 GB", "served_context_length", 8192),
    ],
    ids=["elapsed-weights", "elapsed-seconds", "dtype-prefix", "mla-bytes", "mla-tokens", "swa", "short-scheduler"],
)
def test_sglang_wordings_across_versions(text: str, field: str, want: float) -> None:
    got = getattr(parse_sglang(text), field)
    assert got == pytest.approx(want, abs=1)


def test_ranks_take_the_binding_pool() -> None:
    text = ("[TP0] KV Cache is allocated. #tokens: 1000, K size: 1.00 GB, V size: 1.00 GB\n"
            "[TP1] KV Cache is allocated. #tokens: 900, K size: 0.90 GB, V size: 0.90 GB\n")
    report = parse_sglang(text)
    assert report.kv_cache_tokens == 900
    assert report.kv_cache_bytes == pytest.approx(1.8 * GIB, abs=1)


@pytest.mark.parametrize("text", ["", "simulated engine log\n", "Available KV cache memory: lots",
                                  "GPU KV cache size: tokens", "KV Cache is allocated. #tokens: , K size: GB"])
def test_unknown_wording_is_not_observed(text: str) -> None:
    for parse in (parse_vllm, parse_sglang):
        report = parse(text)
        assert not report.observed
        assert report.kv_cache_bytes is None and report.kv_cache_tokens is None


REAL_LINES = [line for c in CASES for line in (c.get("log") or "").splitlines()]


@settings(max_examples=300, deadline=None)
@given(st.text(max_size=600))
def test_fuzz_any_text_never_raises(text: str) -> None:
    parse_vllm(text)
    parse_sglang(text)


@settings(max_examples=300, deadline=None)
@given(st.sampled_from(REAL_LINES), st.integers(0, 400), st.integers(0, 40), st.text(max_size=20))
def test_fuzz_mutated_real_lines(line: str, at: int, cut: int, junk: str) -> None:
    mutated = line[:at] + junk + line[at + cut:]
    for parse in (parse_vllm, parse_sglang):
        report = parse(mutated)
        for value in (report.kv_cache_bytes, report.kv_cache_tokens, report.weights_bytes):
            assert value is None or value >= 0
