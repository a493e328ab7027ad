"""SGLang start-up accounting: the memory and capacity lines SGLang prints while it starts, as data.

Wordings, read in the published wheels 0.2.7, 0.2.15, 0.3.0, 0.3.6, 0.4.0 - 0.4.10, 0.4.6.post5 and 0.5.1 - 0.5.23
(every TP rank prints them, prefixed "[time TPn]" or "[time DPn TPn]"; hack/startup_wordings.py lists each 0.4 - 0.5
message with the versions that print it, tests/fixtures/startups/wordings.json):

- Weights, ``srt/model_executor/model_runner.py`` ``load_model``: "Load weight end. type=T, dtype=D, avail mem=X
  GB" with no weights in 0.1.21 - 0.4.3 (``managers/controller/model_runner.py`` in 0.1.21 - 0.2.5, which prefix
  "[gpu_id=N]"; 0.2.7 prefixes "[gpu=N]"; 0.1.13 prints no load lines): weights and load time are derived from the
  "Load weight begin. avail mem=X GB" line (``ctxfit.engines.sglang.load_window``); "..., avail mem=X GB, mem
  usage=X GB." in 0.4.4 - 0.5.8 (some builds print "quant=fp8, fmt=e4m3" in place of type/dtype); "Load weight end.
  elapsed=S s, type=T, ..., mem usage=X GB." in 0.5.9 - 0.5.23.
- KV pool, ``srt/mem_cache/memory_pool.py``: no line in 0.2.7 - 0.4.1; ``MHATokenToKVPool`` "KV Cache is
  allocated. K size: X GB, V size: X GB." in 0.4.2 - 0.4.3 (no token count); "KV Cache is allocated. #tokens: N, K
  size: X GB, V size: X GB" in 0.4.4 - 0.5.12; "KV Cache is allocated. dtype: D, #tokens: N, K size: ..." in 0.5.13 -
  0.5.23, labelled "{label} KV Cache is allocated. ..." from 0.5.17 (a sliding-window pool's sub-pools: "Full",
  "SWA");
  ``MLATokenToKVPool`` "KV Cache is allocated. [dtype: D, ]#tokens: N, KV size: X GB" (0.4.6 - 0.5.23); ``SWAKVPool``
  "SWAKVPool mem usage: X GB, swa size: A, full size: B" in 0.5.4 - 0.5.23 (``swa_memory_pool.py`` from 0.5.18, where
  a post-capture reservation says "SWAKVPool VA upper bound: ..." instead), printed after its
  two sub-pools' lines (which are the same pool, never a draft's: ``ranks.after_target_pool``). Post-capture KV
  sizing (``SGLANG_ENABLE_POST_CAPTURE_KV_SIZING``, ``model_runner_components/kv_pool_runtime.py``): 0.5.16 prints
  "Post-capture KV sizing: max_total_num_tokens=N, free memory=X GB" (the tokens, read by the scheduler wording
  below; the pool line before it states the reservation's bytes); 0.5.17 - 0.5.23 print "Post-capture KV sizing: KV
  cache allocated. dtype: D, #tokens: N, KV size: X GB, avail mem=Y GB" (the pool; from 0.5.18 the reservation
  before it says "KV Cache VA upper bound." instead of "is allocated"); 0.5.22 - 0.5.23 add "Post-capture KV sizing:
  draft KV cache allocated. dtype: D, #tokens: N, KV size: X GB" per draft pool (read as ``draft_kv_cache_*``).
  Overlapped weight loading (0.5.18 - 0.5.23, ``startup_weight_load.py``) ends with "Load weight end. Committed real
  weights after CUDA graph capture in S s ..." and prints no "mem usage" (weights are not observed then).
- CUDA graphs: decode graphs "Capture cuda graph end. Time elapsed: S s. mem usage=X GB. avail mem=X GB." in 0.4.7 -
  0.5.1 (``model_runner.py``; 0.4.0 - 0.4.3 print no mem usage; 0.4.4 - 0.4.6 print avail mem first); "Capture
  {cuda|npu|cpu} graph end. Time elapsed: ..." in 0.5.2 - 0.5.13; "Capture target {decode|verify} CUDA graph end.
  elapsed=S s, mem usage=X GB, avail mem=Y GB." in 0.5.14 - 0.5.23 (``model_runner_components/cuda_graph_setup.py``
  from 0.5.17). Prefill graphs, captured separately: "Capture piecewise CUDA graph end. Time elapsed: S s. mem
  usage=X GB. ..." in 0.5.6 - 0.5.13; "Capture target prefill CUDA graph end. elapsed=S s, mem usage=X GB, ..." in
  0.5.14 - 0.5.23. Graph memory = decode + prefill (largest rank of each); draft graphs ("Capture
  draft ... graph end") belong to the draft model and are not counted.
- Capacity, ``srt/managers/scheduler.py`` ``Scheduler.__init__`` (0.3.6 - 0.5.23; ``managers/tp_worker.py`` 0.2.7 -
  0.3.0; ``managers/controller/tp_worker.py`` 0.1.21 - 0.2.5): "max_total_num_tokens=N, [chunked_prefill_size=..,]
  max_prefill_tokens=.., [max_running_requests=R,] context_len=C[, available_gpu_mem=X GB]"; 0.1.13
  ``managers/router/model_rpc.py`` "max_total_num_token=N, max_prefill_num_token=.., context_len=C, ".
"""

from __future__ import annotations

from dataclasses import replace

from ctxfit.vocab.patterns import NUM
from ctxfit.vocab.startup import MAX_SOURCE_LINES, StartupPattern, StartupReport, scan

from .load_window import load_window
from .ranks import after_target_pool, first_per_rank

_GB = r" ?(GB|GiB|MB)"
ALL = "SGLang 0.1.13 - 0.5.23"
_DEVICE_GRAPH = r"(?:cuda|npu|cpu|xpu|hpu|musa|CUDA|NPU|CPU|XPU|HPU|MUSA) graph end\."
_RUNNER = "srt/model_executor/model_runner.py"
_POOL = "srt/mem_cache/memory_pool.py"
_SWA = "srt/mem_cache/swa_memory_pool.py SWAKVPool"
_SCHEDULER = ("srt/managers/scheduler.py Scheduler.__init__ (0.2.7 - 0.3.0 managers/tp_worker.py, 0.1.21 - 0.2.5 "
              "managers/controller/tp_worker.py, 0.1.13 managers/router/model_rpc.py)")
_POST_CAPTURE = "srt/model_executor/model_runner_components/kv_pool_runtime.py (post-capture KV sizing)"
_GRAPH_SETUP = "0.5.23 srt/model_executor/model_runner_components/cuda_graph_setup.py"

STARTUP_PATTERNS: tuple[StartupPattern, ...] = (
    StartupPattern("weights_bytes", "Load weight end.", r"Load weight end\..{0,600}?mem usage=" + NUM + _GB,
                   "bytes", "max", "SGLang 0.4.4 - 0.5.23", _RUNNER + " load_model"),
    StartupPattern("load_seconds", "Load weight end.", r"Load weight end\. elapsed=" + NUM + " s", "float", "max",
                   "SGLang 0.5.9 - 0.5.23", _RUNNER + " load_model"),
    StartupPattern("kv_cache_tokens", "KV Cache is allocated.", r"KV Cache is allocated\..{0,120}?#tokens: " + NUM,
                   "int", "min", "SGLang 0.4.4 - 0.5.23", _POOL + " MHATokenToKVPool/MLATokenToKVPool"),
    StartupPattern("kv_cache_bytes", "KV Cache is allocated.", r"KV Cache is allocated\..{0,200}?\bKV size: "
                   + NUM + _GB, "bytes", "min", "SGLang 0.4.6 - 0.5.23 (MLA)", _POOL + " MLATokenToKVPool"),
    StartupPattern("kv_cache_tokens", "SWAKVPool mem usage:", r"SWAKVPool mem usage: .{0,80}?full size: " + NUM,
                   "int", "min", "SGLang 0.5.4 - 0.5.23 (sliding-window models)", _SWA),
    StartupPattern("kv_cache_bytes", "SWAKVPool mem usage:", r"SWAKVPool mem usage: " + NUM + _GB, "bytes", "min",
                   "SGLang 0.5.4 - 0.5.23 (sliding-window models)", _SWA),
    StartupPattern("kv_cache_tokens", "Post-capture KV sizing: KV cache allocated.",
                   r"KV cache allocated\..{0,120}?#tokens: " + NUM, "int", "min", "SGLang 0.5.17 - 0.5.23",
                   _POST_CAPTURE),
    StartupPattern("kv_cache_bytes", "Post-capture KV sizing: KV cache allocated.",
                   r"KV cache allocated\..{0,200}?\bKV size: " + NUM + _GB, "bytes", "min", "SGLang 0.5.17 - 0.5.23",
                   _POST_CAPTURE),
    # decode graphs only: "Capture draft ... graph end" (the draft model) and prefill graphs (below) are kept out
    StartupPattern("cuda_graph_bytes", " graph end.",
                   r"Capture (?:target (?:decode|verify) )?" + _DEVICE_GRAPH + r".{0,1500}?mem usage=" + NUM + _GB,
                   "bytes", "max", "SGLang 0.4.4 - 0.5.23 (decode graphs)",
                   "srt/model_executor/cuda_graph_runner.py CudaGraphRunner.__init__ (0.4.5 - 0.5.4 " + _RUNNER
                   + " init_cuda_graphs); 0.5.10 " + _RUNNER + " init_device_graphs; " + _GRAPH_SETUP),
    # "max_total_num_token" also finds 0.1.13's singular "max_total_num_token=N, max_prefill_num_token=..."
    StartupPattern("kv_cache_tokens", "max_total_num_token", r"\bmax_total_num_tokens?=" + NUM, "int", "min", ALL,
                   _SCHEDULER),
    StartupPattern("served_context_length", "max_total_num_token", r"\bcontext_len=" + NUM, "int", "min", ALL,
                   _SCHEDULER),
    StartupPattern("max_running_requests", "max_total_num_token", r"\bmax_running_requests=" + NUM, "int", "min",
                   ALL, _SCHEDULER),
)
"""SGLang's start-up lines, 0.1.13 - 0.5.23."""

_KV_SIZES = (
    StartupPattern("kv_cache_bytes", "KV Cache is allocated.", r"\bK size: " + NUM + _GB, "bytes", "min",
                   "SGLang 0.4.2 - 0.5.23", _POOL + " MHATokenToKVPool"),
    StartupPattern("kv_cache_bytes", "KV Cache is allocated.", r"\bV size: " + NUM + _GB, "bytes", "min",
                   "SGLang 0.4.2 - 0.5.23", _POOL + " MHATokenToKVPool"),
)

_KV_LINE = "KV Cache is allocated."
_SWA_MARKER = "SWAKVPool mem usage:"
_SWA_POOL = tuple(p for p in STARTUP_PATTERNS if p.marker == _SWA_MARKER)
"""``SWAKVPool`` (0.5.4 ``mem_cache/memory_pool.py``, 0.5.10 - 0.5.23 ``swa_memory_pool.py``) builds a sliding-window
sub-pool and a full sub-pool, each printing "KV Cache is allocated. #tokens: ..." (swa size, then full size), then
"SWAKVPool mem usage: X GB, swa size: A, full size: B": the pool is X GB and its context capacity is B."""
_POOL_MARKERS = (_KV_LINE, _SWA_MARKER)
"""Pool lines a speculative-decoding draft model prints again after the target's (first line per rank is kept)."""
_DRAFT_POST_CAPTURE_LINE = "Post-capture KV sizing: draft KV cache allocated."
_DRAFT_POST_CAPTURE = (
    StartupPattern("kv_cache_tokens", _DRAFT_POST_CAPTURE_LINE, r"draft KV cache allocated\..{0,120}?#tokens: " + NUM,
                   "int", "min", "SGLang 0.5.22 - 0.5.23 (the draft's pool)", _POST_CAPTURE),
    StartupPattern("kv_cache_bytes", _DRAFT_POST_CAPTURE_LINE,
                   r"draft KV cache allocated\..{0,200}?\bKV size: " + NUM + _GB, "bytes", "min",
                   "SGLang 0.5.22 - 0.5.23 (the draft's pool)", _POST_CAPTURE),
)
"""With post-capture KV sizing a draft's pool is printed on its own line (read as ``draft_kv_cache_*``)."""

_PREFILL_GRAPHS = (
    StartupPattern("cuda_graph_bytes", " graph end.",
                   r"Capture (?:piecewise|target prefill) " + _DEVICE_GRAPH + r".{0,200}?mem usage=" + NUM + _GB,
                   "bytes", "max", "SGLang 0.5.6 - 0.5.23 (prefill / piecewise graphs)",
                   "0.5.10 " + _RUNNER + " init_piecewise_cuda_graphs; " + _GRAPH_SETUP),
)


def _with_lines(report: StartupReport, lines: tuple[str, ...]) -> StartupReport:
    kept = list(report.source_lines)
    for line in lines:
        if line not in kept and len(kept) < MAX_SOURCE_LINES:
            kept.append(line)
    return replace(report, source_lines=tuple(kept))


def parse_startup(text: str) -> StartupReport:
    """Read an SGLang start-up log into a ``StartupReport``; never raises.

    KV bytes are K size + V size (MHA) or KV size (MLA) of the smallest rank, each rank's first pool line (a draft
    model's pool comes after the target's, ``ranks.after_target_pool``, and is read as ``draft_kv_cache_*``); a
    sliding-window pool is its "SWAKVPool" line (bytes, and full size as tokens; its sub-pool lines are its own);
    CUDA-graph bytes are the decode graphs plus the prefill (piecewise) graphs, each of the largest rank; weights and
    load seconds of versions that print neither are derived from the "Load weight begin"/"end" pair
    (``load_window``); max concurrency is derived as pool tokens / context_len (SGLang prints no concurrency line).
    """
    pools = first_per_rank(text, _POOL_MARKERS)
    if scan(pools, _SWA_POOL).observed:
        # a sliding-window pool prints its two sub-pools first; the SWAKVPool line is the pool
        pools = "\n".join(line for line in pools.splitlines() if _KV_LINE not in line)
    report = scan(pools, STARTUP_PATTERNS)
    if report.kv_cache_bytes is None:
        k = scan(pools, _KV_SIZES[:1]).kv_cache_bytes
        v = scan(pools, _KV_SIZES[1:]).kv_cache_bytes
        if k is not None and v is not None:
            report = report.with_values(kv_cache_bytes=k + v)
    draft_pools = after_target_pool(text, _KV_LINE, _SWA_MARKER)
    if scan(draft_pools, _SWA_POOL).observed:
        draft_pools = "\n".join(line for line in draft_pools.splitlines() if _KV_LINE not in line)
    draft_pools += "\n" + "\n".join(line for line in text.splitlines() if _DRAFT_POST_CAPTURE_LINE in line)
    draft = scan(draft_pools, STARTUP_PATTERNS + _DRAFT_POST_CAPTURE)
    draft_bytes = draft.kv_cache_bytes
    if draft_bytes is None:
        k = scan(draft_pools, _KV_SIZES[:1]).kv_cache_bytes
        v = scan(draft_pools, _KV_SIZES[1:]).kv_cache_bytes
        draft_bytes = k + v if k is not None and v is not None else None
    if draft.kv_cache_tokens is not None or draft_bytes is not None:
        report = _with_lines(report.with_values(draft_kv_cache_tokens=draft.kv_cache_tokens,
                                                draft_kv_cache_bytes=draft_bytes), draft.source_lines)
    prefill = scan(text, _PREFILL_GRAPHS)
    if prefill.cuda_graph_bytes is not None:
        report = _with_lines(report.with_values(cuda_graph_bytes=(report.cuda_graph_bytes or 0)
                                                + prefill.cuda_graph_bytes), prefill.source_lines)
    if report.weights_bytes is None or report.load_seconds is None:
        window = load_window(text)
        derived = {name: value for name, value in (("weights_bytes", window.weights_bytes),
                                                   ("load_seconds", window.load_seconds))
                   if value is not None and getattr(report, name) is None}
        if derived:
            report = _with_lines(report.with_values(list(derived), **derived), window.lines)
    if report.kv_cache_tokens is not None and report.served_context_length:
        concurrency = round(report.kv_cache_tokens / report.served_context_length, 2)
        report = report.with_values(["max_concurrency"], max_concurrency=concurrency,
                                    concurrency_context_length=report.served_context_length)
    return report
