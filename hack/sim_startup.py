"""Start-up logs of the simulated engine: real-format vLLM V1 and SGLang lines with a capacity the test chooses.

The wording is the engines' own (as in tests/fixtures/startups/startups.yaml: vLLM 0.19
``gpu_model_runner.py``/``gpu_worker.py``/``kv_cache_utils.py``, SGLang 0.5.2 ``model_runner.py``/
``memory_pool.py``/``scheduler.py``); only the numbers are the test's. ``StartupLogServer`` serves such
a log to every new engine pod of a namespace (``Cluster.set_pod_logs``, hack/cluster_kwok.py), so the
operator reads it when the pod becomes Ready.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

GIB = 1 << 30
CONTEXT_ANNOTATION = "ctxfit.io/context-length"
SERVER_LABEL = "ctxfit.io/server"


class StartupLogServer:
    """Gives every new ctxfit engine pod of ``namespace`` its own start-up log (a kwok ``Logs`` object via
    ``cluster.set_pod_logs``): ``make(server, context_length) -> text``. Hold the pods' readiness back with
    ``sim.ctxfit.io/delay-ms`` (a few seconds) so the log is served before the operator reads it at Ready.
    Use as a context manager; polls the pods every ``interval`` seconds with the given CoreV1Api."""

    def __init__(self, cluster: Any, core: Any, namespace: str, make: Callable[[str, int], str],
                 interval: float = 0.3) -> None:
        self.cluster, self.core, self.namespace, self.make, self.interval = cluster, core, namespace, make, interval
        self.served: set[str] = set()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True, name="sim-startup-logs")

    def __enter__(self) -> StartupLogServer:
        self._thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._stop.set()
        self._thread.join(timeout=5)

    def _run(self) -> None:
        while not self._stop.wait(self.interval):
            try:
                pods = self.core.list_namespaced_pod(self.namespace).items
            except Exception:  # noqa: BLE001 - keep serving through API hiccups
                continue
            for pod in pods:
                meta = pod.metadata
                server = (meta.labels or {}).get(SERVER_LABEL)
                if not server or meta.name in self.served:
                    continue
                context = int((meta.annotations or {}).get(CONTEXT_ANNOTATION, "0") or 0)
                self.cluster.set_pod_logs(self.namespace, meta.name, self.make(server, context))
                self.served.add(meta.name)


def vllm_startup_log(*, kv_cache_bytes: int, kv_bytes_per_token: int, max_model_len: int,
                     weights_bytes: int = 15 * GIB, load_seconds: float = 14.43) -> str:
    """vLLM 0.19 (V1) start-up lines for a pool of ``kv_cache_bytes`` (tokens = bytes / bytes per token,
    rounded down to 16-token blocks)."""
    tokens = kv_cache_bytes // kv_bytes_per_token // 16 * 16
    return "\n".join([
        "(EngineCore_DP0 pid=212) INFO 11-30 10:00:01 [v1/worker/gpu_model_runner.py:4820] Model loading took "
        f"{weights_bytes / GIB:.2f} GiB memory and {load_seconds:.6f} seconds",
        "(EngineCore_DP0 pid=212) INFO 11-30 10:00:20 [v1/worker/gpu_worker.py:435] Memory profiling takes 17.96 "
        "seconds. Total non KV cache memory: 17.12GiB; torch peak memory increase: 1.89GiB; non-torch forward "
        f"increase memory: 0.25GiB; weights memory: {weights_bytes / GIB:.2f}GiB.",
        "(EngineCore_DP0 pid=212) INFO 11-30 10:00:20 [v1/worker/gpu_worker.py:436] Available KV cache memory: "
        f"{kv_cache_bytes / GIB:.2f} GiB",
        f"(EngineCore_DP0 pid=212) INFO 11-30 10:00:21 [v1/core/kv_cache_utils.py:1319] GPU KV cache size: "
        f"{tokens:,} tokens",
        "(EngineCore_DP0 pid=212) INFO 11-30 10:00:21 [v1/core/kv_cache_utils.py:1324] Maximum concurrency for "
        f"{max_model_len:,} tokens per request: {tokens / max_model_len:.2f}x",
        "(EngineCore_DP0 pid=212) INFO 11-30 10:00:24 [v1/worker/gpu_model_runner.py:6046] Graph capturing "
        "finished in 3 secs, took 0.91 GiB",
        "(APIServer pid=1) INFO:     Application startup complete.",
    ]) + "\n"


def sglang_startup_log(*, max_total_num_tokens: int, context_len: int, kv_bytes_per_token: int,
                       weights_bytes: int = 36 * GIB, tp_ranks: int = 2) -> str:
    """SGLang 0.5.2 start-up lines: a pool of ``max_total_num_tokens`` and a served ``context_len``."""
    half = max_total_num_tokens * kv_bytes_per_token / 2 / GIB
    lines = ["[2026-11-30 10:00:00] server_args=ServerArgs(model_path='sim', ... chunked_prefill_size=8192, ...)"]
    for rank in range(tp_ranks):
        lines += [
            f"[2026-11-30 10:00:13 TP{rank}] Load weight begin. avail mem=77.43 GB",
            f"[2026-11-30 10:01:22 TP{rank}] Load weight end. type=Sim, dtype=torch.bfloat16, avail mem=40.69 GB, "
            f"mem usage={weights_bytes / GIB:.2f} GB.",
            f"[2026-11-30 10:01:32 TP{rank}] KV Cache is allocated. #tokens: {max_total_num_tokens}, K size: "
            f"{half:.2f} GB, V size: {half:.2f} GB",
            f"[2026-11-30 10:01:32 TP{rank}] Memory pool end. avail mem=11.22 GB",
            f"[2026-11-30 10:01:49 TP{rank}] Capture cuda graph end. Time elapsed: 17.13 s. mem usage=0.89 GB. "
            "avail mem=10.26 GB.",
        ]
    lines += [
        f"[2026-11-30 10:01:50 TP0] max_total_num_tokens={max_total_num_tokens}, chunked_prefill_size=8192, "
        f"max_prefill_tokens=16384, max_running_requests=3529, context_len={context_len}, "
        "available_gpu_mem=10.26 GB",
        "[2026-11-30 10:01:52] The server is fired up and ready to roll!",
    ]
    return "\n".join(lines) + "\n"
