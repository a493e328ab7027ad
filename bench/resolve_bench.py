"""Resolving a 7-shard repository from the local Hub stand-in: wall time and weight-file bytes read.

    python bench/resolve_bench.py [--repo Qwen/Qwen3-32B-FP8] [--runs 5]

The real huggingface_hub client (``ctxfit.hub.resolve_hub``: model info, config.json, the safetensors headers by
HTTP Range) against tests/hubfixtures/server.py on 127.0.0.1, a fresh HF cache per run (nothing cached between
runs). Prints each run's wall time, the median, the bytes of ``*.safetensors`` files served (headers only: the
data region is never read) and the requests made. Targets (issue 23): < 1 s and < 2 MiB of weight files. One
untimed warm-up run first: the process's imports and the stand-in building its headers happen once.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if __package__ in (None, ""):
    sys.path.insert(0, str(ROOT / "operator"))
    sys.path.insert(0, str(ROOT))

TARGET_SECONDS = 1.0
TARGET_BYTES = 2 * 2**20


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repo", default="Qwen/Qwen3-32B-FP8", help="a fixture repo (Qwen3-32B-FP8 has 7 shards)")
    parser.add_argument("--runs", type=int, default=5)
    args = parser.parse_args()
    for key in ("HF_TOKEN", "HF_HUB_OFFLINE"):
        os.environ.pop(key, None)
    os.environ["HF_HOME"] = tempfile.mkdtemp(prefix="ctxfit-bench-hf-")
    os.environ["HF_HUB_DISABLE_TELEMETRY"] = "1"
    from ctxfit.hub import resolve_hub

    from tests.hubfixtures.repos import fixture_repo
    from tests.hubfixtures.server import HubStandIn

    fixture = fixture_repo(args.repo)
    shards = sum(1 for name in fixture.files if name.endswith(".safetensors"))
    hub = HubStandIn().start()
    times, served, requests = [], [], []
    try:
        warm = time.perf_counter()  # imports (huggingface_hub, httpx) and the stand-in building its headers: once
        resolve_hub(args.repo, endpoint=hub.url, cache_dir=tempfile.mkdtemp(prefix="ctxfit-bench-cfg-"))
        warm_up = time.perf_counter() - warm
        for _ in range(args.runs):
            hub.served.clear()
            hub.requests.clear()
            cache = tempfile.mkdtemp(prefix="ctxfit-bench-cfg-")
            started = time.perf_counter()
            source = resolve_hub(args.repo, endpoint=hub.url, cache_dir=cache)
            times.append(time.perf_counter() - started)
            served.append(hub.weight_bytes_served())
            requests.append(len(hub.requests))
            assert source.checkpoint is not None and source.checkpoint.tensor_bytes == fixture.checkpoint().tensor_bytes
    finally:
        hub.stop()
    median = statistics.median(times)
    stored = fixture.checkpoint().checkpoint_bytes
    print(f"{args.repo}: {shards} shards, {stored / 2**30:.1f} GiB of weight files")
    print(f"warm-up (imports, the stand-in's headers; not counted): {warm_up:.3f} s")
    print("runs (s): " + ", ".join(f"{t:.3f}" for t in times))
    print(f"median {median:.3f} s (target < {TARGET_SECONDS:.0f} s): {'met' if median < TARGET_SECONDS else 'MISSED'}")
    print(f"weight-file bytes read per run: {max(served):,} ({max(served) / 2**20:.3f} MiB, target < 2 MiB): "
          f"{'met' if max(served) < TARGET_BYTES else 'MISSED'}; {max(served) / stored:.2e} of the checkpoint")
    print(f"HTTP requests per run: {max(requests)}")
    return 0 if median < TARGET_SECONDS and max(served) < TARGET_BYTES else 1


if __name__ == "__main__":
    sys.exit(main())
