"""Every start-up memory line of every released engine version we read, from its source: the format strings in
tests/fixtures/startups/wordings.json (hack/startup_wordings.py over the unzipped wheels, vLLM 0.8.0 - 0.33.0 and
SGLang 0.4.0 - 0.5.23), rendered with sample values and read back with the engine's parser.

Each message is matched to one row of ``TABLE`` (its stable part, the number of its placeholders, the values to
render and what the parser must read) or to ``NOT_READ`` (why it is not accounting: a warning, another pool, a
reservation). A message in the wheels that is in neither fails ``test_every_message_is_classified``: a new version's
wording must be classified before the parser claims that version."""

from __future__ import annotations

import json
import string
from pathlib import Path
from typing import Any

import pytest
from ctxfit.engines.sglang.startup import parse_startup as parse_sglang
from ctxfit.engines.vllm.startup import parse_startup as parse_vllm

GIB = 1 << 30
WORDINGS: dict[str, list[dict[str, Any]]] = json.loads(
    (Path(__file__).resolve().parents[2] / "fixtures" / "startups" / "wordings.json").read_text(encoding="utf-8"))
PARSERS = {"vllm": parse_vllm, "sglang": parse_sglang}

Row = tuple[str, str, int, tuple[Any, ...], dict[str, Any]]
"""(engine, stable part, placeholders, values, {report field: value}); byte fields in GiB."""

DT, ARCH = "torch.bfloat16", "Qwen3ForCausalLM"
TABLE: list[Row] = [
    # -- vLLM (first matching row wins: the more specific stable part comes first)
    ("vllm", "Model loading took", 2, (14.9888, 8.53), {"weights_bytes": 14.9888, "load_seconds": 8.53}),
    ("vllm", "Loading model weights took %.4f", 1, (7.5,), {"weights_bytes": 7.5}),
    ("vllm", "Graph capturing finished in", 2, (12, 0.91), {"cuda_graph_bytes": 0.91}),
    ("vllm", "CUDA graph pool memory:", 4, (0.9, 0.84, 0.06, 7.1), {"cuda_graph_bytes": 0.9}),
    ("vllm", "Available KV cache memory:", 1, (45.34,), {"kv_cache_bytes": 45.34}),
    ("vllm", "GPU KV cache size: %s tokens", 1, ("297,152",), {"kv_cache_tokens": 297152}),
    ("vllm", "Maximum concurrency for %s tokens per request", 2, ("8,192", 36.27),
     {"max_concurrency": 36.27, "served_context_length": 8192}),
    ("vllm", "GPU KV cache size: %s tokens, Maximum concurrency", 3, ("297,152", "8,192", 36.27),
     {"kv_cache_tokens": 297152, "max_concurrency": 36.27, "served_context_length": 8192}),
    ("vllm", "%s KV cache size: %s tokens, Maximum concurrency", 4, ("GPU", "297,152", "8,192", 36.27),
     {"kv_cache_tokens": 297152, "max_concurrency": 36.27, "served_context_length": 8192}),
    ("vllm", "# %s blocks: %d", 3, ("cuda", 17178, 2048), {"num_gpu_blocks": 17178, "kv_cache_tokens": 17178 * 16}),
    ("vllm", "can be stored in KV cache", 2, (40960, 35000), {"kv_cache_tokens": 35000}),
    ("vllm", "Using max model len", 1, (8192,), {"served_context_length": 8192}),
    ("vllm", "non-torch forward increase memory:", 5, (9.81, 29.89, 2.23, 0.13, 27.52),
     {"activation_bytes": 2.23, "non_torch_bytes": 0.13, "weights_bytes": 27.52}),
    ("vllm", "total consumed (from mem_get_info):", 5, (9.81, 29.89, 2.23, 27.9, 27.52),
     {"activation_bytes": 2.23, "consumed_bytes": 27.9, "non_torch_bytes": 0.38, "weights_bytes": 27.52}),
    ("vllm", "the rest of the memory reserved for KV Cache is", 8, (3.49, 79.19, 0.9, 71.27, 14.99, 0.25, 1.89, 54.14),
     {"weights_bytes": 14.99, "non_torch_bytes": 0.25, "activation_bytes": 1.89, "kv_cache_bytes": 54.14,
      "cuda_total_bytes": 79.19}),
    # the debug ledger; 0.10.2 prints the KV pool in bytes ("... in use is N bytes.")
    ("vllm", "GiB for weight,", 11, (78.68, 79.19, 0.95, 75.23, 14.99, 1.89, 0.25, 0.91, 111, 222, 62397587456),
     {"weights_bytes": 14.99, "activation_bytes": 1.89, "non_torch_bytes": 0.25, "cuda_graph_bytes": 0.91,
      "kv_cache_bytes": 62397587456 / GIB, "cuda_total_bytes": 79.19}),
    ("vllm", "GiB for weight,", 13, (78.68, 79.19, 0.95, 75.23, 14.99, 1.89, 0.25, 0.91, 111, 0.0, 222, 0.0, 58.11),
     {"weights_bytes": 14.99, "activation_bytes": 1.89, "non_torch_bytes": 0.25, "cuda_graph_bytes": 0.91,
      "kv_cache_bytes": 58.11, "cuda_total_bytes": 79.19}),
    ("vllm", "GiB for consumed memory (weights + non-torch)", 12,
     (78.68, 79.19, 0.95, 75.23, 27.9, 2.23, 0.9, 111, 0.0, 222, 0.0, 45.34),
     {"weights_bytes": None, "non_torch_bytes": None, "activation_bytes": 2.23, "cuda_graph_bytes": 0.9,
      "kv_cache_bytes": 45.34, "cuda_total_bytes": 79.19}),
    # -- SGLang: the KV pool
    ("sglang", "KV Cache is allocated. K size:", 2, (4.77, 4.77), {"kv_cache_bytes": 9.54}),
    ("sglang", "KV Cache is allocated. #tokens:", 3, (39078, 4.77, 4.77), {"kv_cache_tokens": 39078,
                                                                          "kv_cache_bytes": 9.54}),
    ("sglang", "KV Cache is allocated. #tokens:", 2, (39078, 9.54), {"kv_cache_tokens": 39078, "kv_cache_bytes": 9.54}),
    ("sglang", "KV Cache is allocated. dtype:", 4, (DT, 39078, 4.77, 4.77), {"kv_cache_tokens": 39078,
                                                                            "kv_cache_bytes": 9.54}),
    ("sglang", "KV Cache is allocated. dtype:", 3, (DT, 39078, 9.54),
     {"kv_cache_tokens": 39078, "kv_cache_bytes": 9.54}),
    ("sglang", "{cache_name} is allocated. dtype:", 5, ("KV Cache", DT, 39078, 4.77, 4.77),
     {"kv_cache_tokens": 39078, "kv_cache_bytes": 9.54}),
    ("sglang", "{cache_name} is allocated. dtype:", 4, ("KV Cache", DT, 39078, 9.54),
     {"kv_cache_tokens": 39078, "kv_cache_bytes": 9.54}),
    ("sglang", "{cache_name} {'VA upper bound'", 6, ("KV Cache", "is allocated", DT, 39078, 4.77, 4.77),
     {"kv_cache_tokens": 39078, "kv_cache_bytes": 9.54}),
    ("sglang", "{cache_name} {'VA upper bound'", 5, ("KV Cache", "is allocated", DT, 39078, 9.54),
     {"kv_cache_tokens": 39078, "kv_cache_bytes": 9.54}),
    ("sglang", "SWAKVPool mem usage:", 3, (13.73, 400000, 500000),
     {"kv_cache_bytes": 13.73, "kv_cache_tokens": 500000}),
    ("sglang", "SWAKVPool {'VA upper bound'", 4, ("mem usage", 13.73, 400000, 500000),
     {"kv_cache_bytes": 13.73, "kv_cache_tokens": 500000}),
    ("sglang", "Post-capture KV sizing: KV cache allocated.", 4, (DT, 812345, 36.1, 3.2),
     {"kv_cache_tokens": 812345, "kv_cache_bytes": 36.1}),
    ("sglang", "Post-capture KV sizing: draft KV cache allocated.", 3, (DT, 812345, 1.55),
     {"draft_kv_cache_tokens": 812345, "draft_kv_cache_bytes": 1.55, "kv_cache_tokens": None}),
    ("sglang", "Post-capture KV sizing: max_total_num_tokens=", 2, (812345, 3.2), {"kv_cache_tokens": 812345}),
    ("sglang", "[unified-memory-pool]   total_bytes=%d, max_total_num_tokens=", 5, (42949672960, 812345, 256, 512, 4),
     {"kv_cache_tokens": 812345}),
    ("sglang", "full_max_total_num_tokens=%d, swa_max_total_num_tokens=%d", 5, (42949672960, 40.0, 500000, 400000, 9),
     {"kv_cache_tokens": None}),
    # -- SGLang: weights (0.4.0 - 0.4.3 print none on this line: derived from the begin/end pair, load_window.py)
    ("sglang", "Load weight end. type=", 3, (ARCH, DT, 17.4), {"weights_bytes": None}),
    ("sglang", "Load weight end. type=", 4, (ARCH, DT, 17.4, 61.07), {"weights_bytes": 61.07}),
    ("sglang", "{quant_str + ', ' if quant_str else ''}avail mem=", 5, (100.34, ARCH, "", 17.4, 61.07),
     {"weights_bytes": 61.07, "load_seconds": 100.34}),
    ("sglang", "Load weight end. elapsed=", 5, (100.34, ARCH, DT, 17.4, 61.07),
     {"weights_bytes": 61.07, "load_seconds": 100.34}),
    ("sglang", "Load weight end. Committed real weights", 3, (3.1, 40.0, 99.0),
     {"weights_bytes": None, "load_seconds": None}),
    # -- SGLang: CUDA graphs (decode, then piecewise/prefill; 0.4.0 - 0.4.3 print no memory)
    ("sglang", "Capture cuda graph end. Time elapsed: {time.time() - tic:.2f} s", 1, (12.5,),
     {"cuda_graph_bytes": None}),
    ("sglang", "Time elapsed: {time.time() - tic:.2f} s. avail mem=", 3, (12.5, 3.2, 0.9), {"cuda_graph_bytes": 0.9}),
    ("sglang", "Capture cuda graph end. Time elapsed:", 3, (12.5, 0.9, 3.2), {"cuda_graph_bytes": 0.9}),
    ("sglang", " end. Time elapsed:", 4, ("cuda graph", 12.5, 0.9, 3.2), {"cuda_graph_bytes": 0.9}),
    ("sglang", "Capture piecewise CUDA graph end.", 3, (55.92, 2.84, 3.2), {"cuda_graph_bytes": 2.84}),
    ("sglang", "Capture {capture_name} CUDA graph end.", 4, ("target decode", 5.69, 0.13, 3.2),
     {"cuda_graph_bytes": 0.13}),
    # -- SGLang: capacity (Scheduler.__init__)
    ("sglang", "max_total_num_tokens={self.max_total_num_tokens}, max_prefill_tokens=", 4, (812345, 16384, 2048, 8192),
     {"kv_cache_tokens": 812345, "max_running_requests": 2048, "served_context_length": 8192}),
    ("sglang", "max_total_num_tokens={self.max_total_num_tokens}, chunked_prefill_size=", 5,
     (812345, 8192, 16384, 2048, 8192),
     {"kv_cache_tokens": 812345, "max_running_requests": 2048, "served_context_length": 8192}),
    ("sglang", "max_total_num_tokens={self.max_total_num_tokens}, chunked_prefill_size=", 6,
     (812345, 8192, 16384, 2048, 8192, 3.2),
     {"kv_cache_tokens": 812345, "max_running_requests": 2048, "served_context_length": 8192}),
    ("sglang", "max_total_num_tokens={self.max_total_num_tokens}, chunked_prefill_size=", 7,
     (812345, 8192, 16384, 2048, 8192, "available_gpu_mem", 3.2),
     {"kv_cache_tokens": 812345, "max_running_requests": 2048, "served_context_length": 8192}),
]
NOT_READ: dict[tuple[str, str], str] = {
    ("vllm", "Loading model weights took in total"): "HPU model runner (vllm/worker/hpu_model_runner.py), not CUDA",
    ("sglang", "leak detected"): "a runtime leak check after start-up (it restates max_total_num_tokens)",
    ("sglang", "available_size={available_size}"): "a runtime leak check after start-up",
    ("sglang", "Mamba Cache is allocated."): "the Mamba state pool of a hybrid model, not the KV pool (printed apart)",
    ("sglang", "int8 mamba checkpoint pool"): "a Mamba checkpoint pool warning",
    ("sglang", "KV Cache skipped (no-op pool)"): "no KV pool (a prefill-only or disabled cache): nothing allocated",
    ("sglang", "HiCache not supported for SWAKVPool"): "an error, not accounting",
    ("sglang", "UnifiedSWAKVPool"): "unified-pool internals (buffer layout, an assertion), not its size",
    ("sglang", "Post-capture KV sizing: decode CUDA graph max_bs"): "a warning about activation headroom",
    ("sglang", "Post-capture KV sizing: max_running_requests %d -> %d"): "a cap on requests, not the pool",
    ("sglang", "Post-capture KV sizing: full_layer_tokens"): "the split of the post-capture pool that follows",
    ("sglang", "Post-capture KV sizing: KV-canary"): "a workspace estimate",
    ("sglang", "HiCache fused draft KV"): "a host-cache layout note",
}


def placeholders(entry: dict[str, Any]) -> int:
    """Fields of the message (``{0:.2f}`` of an f-string, ``%s`` / ``%.2f`` of a ``%`` message)."""
    if entry["style"] == "f":
        return sum(1 for _, name, _, _ in string.Formatter().parse(entry["format"]) if name is not None)
    return entry["format"].replace("%%", "").count("%")


def render(entry: dict[str, Any], values: tuple[Any, ...]) -> str:
    """The line the engine prints for ``values`` (``%`` formatting, or ``str.format`` of the f-string's fields)."""
    return entry["format"] % values if entry["style"] == "%" else entry["format"].format(*values)


def row_for(engine: str, entry: dict[str, Any]) -> Row | None:
    count = placeholders(entry)
    return next((r for r in TABLE if r[0] == engine and r[1] in entry["template"] and r[2] == count), None)


def ignored(engine: str, entry: dict[str, Any]) -> str | None:
    return next((why for (eng, part), why in NOT_READ.items() if eng == engine and part in entry["template"]), None)


CASES = [(engine, entry) for engine, entries in WORDINGS.items() for entry in entries]


def _id(case: tuple[str, dict[str, Any]]) -> str:
    engine, entry = case
    return f"{engine}-{entry['versions'][0]}-{entry['versions'][-1]}-{entry['template'][:40]}"


@pytest.mark.parametrize("case", CASES, ids=[_id(c) for c in CASES])
def test_every_message_is_classified(case: tuple[str, dict[str, Any]]) -> None:
    engine, entry = case
    assert row_for(engine, entry) is not None or ignored(engine, entry) is not None, (
        f"{engine} {entry['versions']} {entry['files']}: {entry['template']!r} is neither read nor listed as not "
        "accounting")


@pytest.mark.parametrize("case", [c for c in CASES if row_for(*c) is not None],
                         ids=[_id(c) for c in CASES if row_for(*c) is not None])
def test_every_version_wording_is_read(case: tuple[str, dict[str, Any]]) -> None:
    engine, entry = case
    row = row_for(engine, entry)
    assert row is not None
    line = f"INFO 11-20 10:00:00 [x.py:1] {render(entry, row[3])}"
    report = PARSERS[engine](line)
    for field, want in row[4].items():
        got = getattr(report, field)
        if want is None:
            assert got is None, (field, line)
        elif field.endswith("_bytes"):
            assert got is not None and abs(got / GIB - want) < 0.006, (field, got, want, line)
        else:
            assert got == pytest.approx(want, abs=0.006), (field, got, want, line)


def test_the_table_has_no_dead_rows() -> None:
    """Every row reads at least one message of the wheels (a row for a wording no version prints is a guess)."""
    used = {id(r) for engine, entry in CASES if (r := row_for(engine, entry)) is not None}
    assert [r[:2] for r in TABLE if id(r) not in used] == []


def test_the_versions_covered() -> None:
    """The wheels the table was built from (the parsers' docstrings name the same ranges)."""
    versions = {engine: sorted({v for e in entries for v in e["versions"]},
                               key=lambda v: tuple(int(p) for p in v.split(".") if p.isdigit()))
                for engine, entries in WORDINGS.items()}
    assert versions["vllm"][0] == "0.8.0" and versions["vllm"][-1] == "0.33.0"
    assert {"0.15.0", "0.16.0", "0.17.0", "0.17.1", "0.18.0", "0.28.0"} <= set(versions["vllm"])
    assert versions["sglang"][0] == "0.4.0" and versions["sglang"][-1] == "0.5.23" and "0.5.19" in versions["sglang"]
