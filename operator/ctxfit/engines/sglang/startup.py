"""SGLang start-up accounting: the memory and capacity lines SGLang prints while it starts, as data.

Wordings (SGLang source; every TP rank prints them, prefixed "[time TPn]"):
- ``srt/model_executor/model_runner.py`` ``load_model``: "Load weight end. type=T, dtype=D, avail
  mem=X GB, mem usage=X GB." (0.4 - 0.5.x; some builds print mem usage before avail mem); "Load weight
  end. elapsed=S s, type=T, ..., mem usage=X GB." (later 0.5.x, elapsed added; seen in 2026 logs).
- ``srt/mem_cache/memory_pool.py`` ``MHATokenToKVPool._create_buffers``: "KV Cache is allocated.
  #tokens: N, K size: X GB, V size: X GB" (0.4 - 0.5); "KV Cache is allocated. dtype: D, #tokens: N,
  K size: ..." (later 0.5.x); ``MLATokenToKVPool``: "KV Cache is allocated. #tokens: N, KV size: X GB";
  ``SWAKVPool``: "SWAKVPool mem usage: X GB, swa size: A, full size: B".
- ``srt/model_executor/cuda_graph_runner.py`` ``CudaGraphRunner.__init__`` (0.5.23
  ``decode_cuda_graph_runner.py``): "Capture cuda graph end. Time elapsed: S s. mem usage=X GB. avail
  mem=X GB."
- ``srt/managers/scheduler.py`` ``Scheduler.__init__`` (0.4 - 0.5.23): "max_total_num_tokens=N,
  chunked_prefill_size=.., max_prefill_tokens=.., max_running_requests=R, context_len=C,
  available_gpu_mem=X GB".
"""

from __future__ import annotations

from ctxfit.vocab.patterns import NUM
from ctxfit.vocab.startup import StartupPattern, StartupReport, scan

_GB = r" ?(GB|GiB|MB)"
ALL = "SGLang 0.4 - 0.5.23"

STARTUP_PATTERNS: tuple[StartupPattern, ...] = (
    StartupPattern("weights_bytes", "Load weight end.", r"Load weight end\..{0,600}?mem usage=" + NUM + _GB, "bytes",
                   "max", ALL, "srt/model_executor/model_runner.py load_model"),
    StartupPattern("load_seconds", "Load weight end.", r"Load weight end\. elapsed=" + NUM + " s", "float", "max",
                   "SGLang later 0.5.x", "srt/model_executor/model_runner.py load_model"),
    StartupPattern("kv_cache_tokens", "KV Cache is allocated.", r"KV Cache is allocated\..{0,120}?#tokens: " + NUM,
                   "int", "min", ALL, "srt/mem_cache/memory_pool.py MHATokenToKVPool/MLATokenToKVPool"),
    StartupPattern("kv_cache_bytes", "KV Cache is allocated.", r"KV Cache is allocated\..{0,200}?\bKV size: "
                   + NUM + _GB, "bytes", "min", ALL + " (MLA)", "srt/mem_cache/memory_pool.py MLATokenToKVPool"),
    StartupPattern("kv_cache_tokens", "SWAKVPool mem usage:", r"SWAKVPool mem usage: .{0,80}?full size: " + NUM, "int",
                   "min", "SGLang 0.5 (sliding-window models)", "srt/mem_cache/swa_memory_pool.py SWAKVPool"),
    StartupPattern("kv_cache_bytes", "SWAKVPool mem usage:", r"SWAKVPool mem usage: " + NUM + _GB, "bytes", "min",
                   "SGLang 0.5 (sliding-window models)", "srt/mem_cache/swa_memory_pool.py SWAKVPool"),
    StartupPattern("cuda_graph_bytes", "Capture cuda graph end.",
                   r"Capture cuda graph end\..{0,80}?mem usage=" + NUM + _GB, "bytes", "max", ALL,
                   "srt/model_executor/cuda_graph_runner.py CudaGraphRunner.__init__"),
    StartupPattern("kv_cache_tokens", "max_total_num_tokens=", r"\bmax_total_num_tokens=" + NUM, "int", "min", ALL,
                   "srt/managers/scheduler.py Scheduler.__init__"),
    StartupPattern("served_context_length", "max_total_num_tokens=", r"\bcontext_len=" + NUM, "int", "min", ALL,
                   "srt/managers/scheduler.py Scheduler.__init__"),
    StartupPattern("max_running_requests", "max_total_num_tokens=", r"\bmax_running_requests=" + NUM, "int", "min",
                   ALL, "srt/managers/scheduler.py Scheduler.__init__"),
)
"""SGLang's start-up lines, 0.4 - 0.5.23."""

_KV_SIZES = (
    StartupPattern("kv_cache_bytes", "KV Cache is allocated.", r"\bK size: " + NUM + _GB, "bytes", "min", ALL,
                   "srt/mem_cache/memory_pool.py MHATokenToKVPool"),
    StartupPattern("kv_cache_bytes", "KV Cache is allocated.", r"\bV size: " + NUM + _GB, "bytes", "min", ALL,
                   "srt/mem_cache/memory_pool.py MHATokenToKVPool"),
)


def parse_startup(text: str) -> StartupReport:
    """Read an SGLang start-up log into a ``StartupReport``; never raises.

    KV bytes are K size + V size (MHA) or KV size (MLA) of the smallest rank; max concurrency is
    derived as pool tokens / context_len (SGLang prints no concurrency line).
    """
    report = scan(text, STARTUP_PATTERNS)
    if report.kv_cache_bytes is None:
        k = scan(text, _KV_SIZES[:1]).kv_cache_bytes
        v = scan(text, _KV_SIZES[1:]).kv_cache_bytes
        if k is not None and v is not None:
            report = report.with_values(kv_cache_bytes=k + v)
    if report.kv_cache_tokens is not None and report.served_context_length:
        concurrency = round(report.kv_cache_tokens / report.served_context_length, 2)
        report = report.with_values(["max_concurrency"], max_concurrency=concurrency,
                                    concurrency_context_length=report.served_context_length)
    return report
