"""Start-up wording classes read in the engines' released source that the handed logs do not show: SGLang's
sliding-window sub-pools (never a draft's pool), post-capture KV sizing and its draft line, vLLM's combined
capacity line and its HiSparse "GPU + host" variant, vLLM 0.27+'s "total consumed" ledger; and the three handed
start-ups whose text holds no KV accounting in any engine's wording (so "not observed" is right for them)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml
from ctxfit.engines.sglang.startup import STARTUP_PATTERNS as SGLANG_PATTERNS
from ctxfit.engines.sglang.startup import parse_startup as parse_sglang
from ctxfit.engines.vllm.startup import STARTUP_PATTERNS as VLLM_PATTERNS
from ctxfit.engines.vllm.startup import parse_startup as parse_vllm

GIB = 1 << 30
CASES: dict[str, dict[str, Any]] = {c["id"]: c for c in yaml.safe_load(
    (Path(__file__).resolve().parents[2] / "fixtures" / "startups" / "startups.yaml").read_text())}

# 0.5.4 - 0.5.16: both sub-pools unlabelled; 0.5.17+: "Full" / "SWA" labels (memory_pool.py _finalize_allocation_log)
SWA_UNLABELLED = ("[2026-01-05 10:00:00 TP0] KV Cache is allocated. #tokens: 400000, K size: 3.05 GB, V size: 3.05 GB\n"
                  "[2026-01-05 10:00:00 TP0] KV Cache is allocated. #tokens: 500000, K size: 3.81 GB, V size: 3.81 GB\n"
                  "[2026-01-05 10:00:00 TP0] SWAKVPool mem usage: 13.73 GB, swa size: 400000, full size: 500000\n")
SWA_LABELLED = ("[2026-01-05 10:00:00] Full KV Cache is allocated. dtype: torch.bfloat16, #tokens: 500000, "
                "K size: 3.81 GB, V size: 3.81 GB\n"
                "[2026-01-05 10:00:00] SWA KV Cache is allocated. dtype: torch.bfloat16, #tokens: 400000, "
                "K size: 3.05 GB, V size: 3.05 GB\n"
                "[2026-01-05 10:00:00] SWAKVPool mem usage: 13.73 GB, swa size: 400000, full size: 500000\n")
DRAFT = "[2026-01-05 10:00:01{rank}] KV Cache is allocated. dtype: torch.bfloat16, #tokens: 500100, KV size: 0.95 GB\n"


@pytest.mark.parametrize("log", [SWA_UNLABELLED, SWA_LABELLED], ids=["0.5.4-0.5.16", "0.5.17-0.5.23"])
def test_sliding_window_sub_pools_are_the_target_pool_not_a_draft(log: str) -> None:
    report = parse_sglang(log)
    assert report.kv_cache_tokens == 500000 and abs(report.kv_cache_bytes / GIB - 13.73) < 0.006  # type: ignore[operator]
    assert report.draft_kv_cache_tokens is None and report.draft_kv_cache_bytes is None


@pytest.mark.parametrize("log", [SWA_UNLABELLED, SWA_LABELLED], ids=["0.5.4-0.5.16", "0.5.17-0.5.23"])
def test_a_draft_after_a_sliding_window_target_is_the_draft(log: str) -> None:
    rank = " TP0" if "TP0" in log else ""
    report = parse_sglang(log + DRAFT.format(rank=rank))
    assert report.kv_cache_tokens == 500000 and abs(report.kv_cache_bytes / GIB - 13.73) < 0.006  # type: ignore[operator]
    assert report.draft_kv_cache_tokens == 500100
    assert abs(report.draft_kv_cache_bytes / GIB - 0.95) < 0.006  # type: ignore[operator]


def test_ranks_each_keep_their_own_sliding_window_pool() -> None:
    two = SWA_UNLABELLED + SWA_UNLABELLED.replace("TP0", "TP1").replace("500000", "490000")
    report = parse_sglang(two)
    assert report.kv_cache_tokens == 490000 and report.draft_kv_cache_tokens is None


def test_post_capture_sizing_reads_the_final_pool_and_the_drafts() -> None:
    """0.5.22 - 0.5.23 kv_pool_runtime.py: the reservation ("VA upper bound", 0.5.18+) is not the pool; the
    post-capture line is, and each draft pool gets its own "draft KV cache allocated." line."""
    log = ("[2026-01-05 10:00:00] KV Cache VA upper bound. dtype: torch.bfloat16, #tokens: 900000, K size: 20.00 GB, "
           "V size: 20.00 GB\n"
           "[2026-01-05 10:00:09] Post-capture KV sizing: KV cache allocated. dtype: torch.bfloat16, #tokens: 812345, "
           "KV size: 36.10 GB, avail mem=3.20 GB\n"
           "[2026-01-05 10:00:09] Post-capture KV sizing: draft KV cache allocated. dtype: torch.bfloat16, "
           "#tokens: 812345, KV size: 1.55 GB\n")
    report = parse_sglang(log)
    assert report.kv_cache_tokens == 812345 and abs(report.kv_cache_bytes / GIB - 36.10) < 0.006  # type: ignore[operator]
    assert report.draft_kv_cache_tokens == 812345
    assert abs(report.draft_kv_cache_bytes / GIB - 1.55) < 0.006  # type: ignore[operator]


def test_post_capture_0516_tokens() -> None:
    """0.5.16 prints only the tokens after capture ("max_total_num_tokens=N, free memory=X GB")."""
    log = ("[2026-01-05 10:00:00] KV Cache is allocated. dtype: torch.bfloat16, #tokens: 900000, K size: 20.00 GB, "
           "V size: 20.00 GB\n"
           "[2026-01-05 10:00:09] Post-capture KV sizing: max_total_num_tokens=812345, free memory=3.20 GB\n")
    assert parse_sglang(log).kv_cache_tokens == 812345


def test_overlapped_weight_load_end_line_is_not_a_weights_figure() -> None:
    """0.5.18+ startup_weight_load.py: "Load weight end. Committed real weights ..." prints no mem usage."""
    log = ("[2026-01-05 10:00:00] Load weight begin. avail mem=78.50 GB\n"
           "[2026-01-05 10:01:40] Load weight end. Committed real weights after CUDA graph capture in 3.10 s "
           "(capture overlap window 40.00 s, startup overlap total 99.00 s)\n")
    report = parse_sglang(log)
    assert report.weights_bytes is None and report.load_seconds == pytest.approx(100.0)


@pytest.mark.parametrize(("pools", "tokens"), [("GPU", 812345), ("GPU + host", None)],
                         ids=["0.28-0.33 GPU", "0.32-0.33 HiSparse GPU + host"])
def test_vllm_combined_capacity_line(pools: str, tokens: int | None) -> None:
    """0.28 - 0.33 kv_cache_utils.py update_kv_cache_capacity: tokens and concurrency on one line; with HiSparse the
    capacity counts host blocks, so it is not read as the GPU pool's tokens."""
    line = (f"(EngineCore pid=1) INFO 11-20 10:00:00 [kv_cache_utils.py:1869] {pools} KV cache size: 812,345 tokens, "
            "Maximum concurrency for 131,072 tokens per request: 6.20x")
    report = parse_vllm(line)
    assert report.kv_cache_tokens == tokens
    assert report.max_concurrency == pytest.approx(6.20) and report.served_context_length == 131072


def test_vllm_027_ledger_derives_non_torch() -> None:
    """0.27 - 0.33 mem_utils.py MemoryProfilingResult: "total consumed (from mem_get_info)" replaces the non-torch
    term; non-torch = total consumed - weights memory."""
    line = ("(EngineCore pid=1) INFO 11-20 10:00:00 [gpu_worker.py:440] Memory profiling takes 9.81 seconds. Total non "
            "KV cache memory: 29.89GiB; torch peak memory increase: 2.23GiB; total consumed (from mem_get_info): "
            "27.9GiB; weights memory: 27.52GiB.")
    report = parse_vllm(line)
    assert abs(report.consumed_bytes / GIB - 27.9) < 0.006  # type: ignore[operator]
    assert abs(report.non_torch_bytes / GIB - 0.38) < 0.006  # type: ignore[operator]
    assert "non_torch_bytes" in report.derived and abs(report.activation_bytes / GIB - 2.23) < 0.006  # type: ignore[operator]


def test_vllm_027_debug_line_consumed_is_not_weights() -> None:
    line = ("Free memory on device (78.68/79.19 GiB) on startup. Desired GPU memory utilization is (0.95, 75.23 GiB). "
            "Actual usage is 27.9 GiB for consumed memory (weights + non-torch), 2.23 GiB for peak activation, and "
            "0.9 GiB for CUDAGraph memory. Replace gpu_memory_utilization config with `--kv-cache-memory=1` (0.0 GiB) "
            "to fit into requested memory, or `--kv-cache-memory=2` (0.0 GiB) to fully utilize gpu memory. Current kv "
            "cache memory in use is 45.34 GiB.")
    report = parse_vllm(line)
    assert report.weights_bytes is None and report.non_torch_bytes is None
    assert abs(report.cuda_graph_bytes / GIB - 0.9) < 0.006 and abs(report.kv_cache_bytes / GIB - 45.34) < 0.006  # type: ignore[operator]


KV_FIELDS = ("kv_cache_bytes", "kv_cache_tokens", "num_gpu_blocks")
NO_KV_ACCOUNTING = {
    "vllm015-018-qwen3-14b-h100-version-sweep": "no raw log: the source committed harness-parsed JSON only "
                                                "(llm-d-planner accuracy/results/version-sweep/runs/*.json)",
    "vllm028-gptoss120b-8x-rtxpro4500-tp8": "the reporter's summary table of vLLM PR 51590, not engine lines",
    "sglang0519-qwen3-32b-h100-gke-gvisor-mfs090": "a README table: the Load weight end line is quoted, the KV pool "
                                                   "only as prose ('9.54 GB for 39,078 tokens'); the same demo's "
                                                   "logs file greps the engine log for other lines",
}


@pytest.mark.parametrize("case_id", sorted(NO_KV_ACCOUNTING))
def test_handed_startups_without_kv_accounting(case_id: str) -> None:
    """These three start-ups are predicted, yet ``ctxfit calibrate`` says "not observed": their text holds no line
    of either engine's KV wording (no pattern marker occurs), so reading them would mean reading prose, not the
    engine. What they do print in engine wording is still read (the SGLang README quotes "Load weight end")."""
    log = CASES[case_id].get("log") or ""
    markers = {p.marker for p in (*VLLM_PATTERNS, *SGLANG_PATTERNS) if p.field in KV_FIELDS}
    assert not [m for m in markers if m in log], NO_KV_ACCOUNTING[case_id]
    parse = parse_vllm if CASES[case_id]["engine"]["kind"] == "vllm" else parse_sglang
    assert not parse(log).observed
    if case_id.startswith("sglang"):
        assert abs(parse(log).weights_bytes / GIB - 61.07) < 0.006  # type: ignore[operator]


def test_vllm_0102_debug_ledger_states_the_pool_in_bytes() -> None:
    """0.10.2 gpu_worker.py ends its debug ledger "Current kv cache memory in use is N bytes." (0.11+ print GiB): the
    handed sleep-mode start-up on an L40S prints only that line, and its pool is now observed."""
    case = CASES["vllm0102-granite33-2b-l40s-sleep-mode-len32k"]
    report = parse_vllm(case["log"])
    assert report.observed and report.kv_cache_bytes == 32786058444
    assert abs(report.kv_cache_bytes / GIB - 30.53) < 0.006 and abs(report.weights_bytes / GIB - 4.74) < 0.006  # type: ignore[operator]
