"""Classifier speed on 64 KiB of adversarial text: the texts most likely to make a regex backtrack.

    python bench/classify_bench.py [--pairs 200]

Every marker, phase marker and extractor prefix the classifier knows (plus digits, separators and line
breaks), alone and in random pairs, repeated to 64 KiB; a realistic 64 KiB vLLM log; 3 MiB cut to its tail.
Prints the slowest case (best of 3: a catastrophic regex is slow every time, a busy machine only sometimes).
Target: 10 ms per 64 KiB (50 ms on a loaded machine); measured worst ~2 ms.
"""

from __future__ import annotations

import argparse
import random
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if __package__ in (None, ""):
    sys.path.insert(0, str(ROOT / "operator"))

from ctxfit.api import EngineKind  # noqa: E402
from ctxfit.recovery import Failure, Observation, classify  # noqa: E402
from ctxfit.recovery.classify import engine_patterns  # noqa: E402
from ctxfit.recovery.generic import EVENT_PATTERNS, GENERIC_PATTERNS, GENERIC_PHASE_MARKERS  # noqa: E402

SIZE = 64 * 1024
TARGET_SECONDS = 0.010
LOADED_SECONDS = 0.050
REALISTIC_LINE = "INFO 05-02 10:11:12 [core.py:58] loading shard 17 of 118, 1,234,560 bytes, 11.7 GiB\n"
REALISTIC_TAIL = ("ValueError: To serve at least one request with the models's max seq len (262144), (17.16 GiB KV "
                  "cache is needed, which is larger than the available KV cache memory (11.70 GiB). Based on the "
                  "available memory, the estimated maximum model length is 178752.")


def adversarial_fragments() -> list[str]:
    """Every marker, phase marker and extractor prefix of every engine and the generic patterns, plus the
    digits, units, separators and odd characters a log may carry (sorted, no empty string)."""
    found: set[str] = set()
    for kind in EngineKind:
        patterns, phases = engine_patterns(kind)
        for pattern in patterns:
            found.update(pattern.markers)
            found.update(pattern.requires_any)
            for ex in pattern.extractors:
                found.add(ex.regex.pattern.split("(")[0].replace("\\", ""))
        found.update(m.marker for m in phases)
    for pattern in GENERIC_PATTERNS + EVENT_PATTERNS:
        found.update(pattern.markers)
        for ex in pattern.extractors:
            found.add(ex.regex.pattern.split("(")[0].replace("\\", ""))
    found.update(m.marker for m in GENERIC_PHASE_MARKERS)
    found.update([
        "(", ")", "1", "1,", "1.", "0.9113", "11.7 GiB", " GiB", " MiB", "bytes", "\n", "\r", " ", "/",
        "Traceback (most recent call last)\n", "max seq len (1", "(1.5 GiB KV cache is needed",
        "Tried to allocate 1", "GPU 1 ", "of which 1.0 MiB is free", "=", "٣", "\x00", "\ufffd",
    ])
    return sorted(f for f in found if f)


def repeated(unit: str, size: int = SIZE) -> str:
    """``unit`` repeated to exactly ``size`` characters."""
    return (unit * (size // len(unit) + 1))[:size]


def realistic_log() -> str:
    """64 KiB of vLLM loading lines ending in its KV-cache-too-small error."""
    return (REALISTIC_LINE * (SIZE // len(REALISTIC_LINE)))[: SIZE - len(REALISTIC_TAIL)] + REALISTIC_TAIL


def timed(observation: Observation, engine: EngineKind | None) -> tuple[Failure, float]:
    start = time.perf_counter()
    failure = classify(observation, engine)
    return failure, time.perf_counter() - start


def best_of_3(observation: Observation, engine: EngineKind | None) -> float:
    return min(timed(observation, engine)[1] for _ in range(3))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pairs", type=int, default=200, help="random fragment pairs besides every fragment alone")
    args = parser.parse_args()
    fragments = adversarial_fragments()
    rnd = random.Random(20261129)
    units = fragments + [rnd.choice(fragments) + rnd.choice(fragments) for _ in range(args.pairs)]
    worst, worst_case = 0.0, ""
    for engine in (None, EngineKind.VLLM, EngineKind.SGLANG):
        for unit in units:
            text = repeated(unit)
            seconds = best_of_3(Observation(reason="Error", exit_code=1, message=text[-2048:], log_tail=text), engine)
            if seconds > worst:
                worst, worst_case = seconds, f"{engine.value if engine else 'generic'} {unit[:40]!r}"
    realistic = max(best_of_3(Observation(exit_code=1, message=realistic_log()), engine)
                    for engine in (None, EngineKind.VLLM, EngineKind.SGLANG))
    oversized = "A" * (3 << 20) + "\nValueError: No available memory for the cache blocks."
    cut = best_of_3(Observation(message=oversized), EngineKind.VLLM)
    print(f"{len(units)} adversarial units x 3 engines on 64 KiB: worst {worst * 1000:.2f} ms ({worst_case})")
    print(f"realistic 64 KiB vLLM log: {realistic * 1000:.2f} ms; 3 MiB cut to its tail: {cut * 1000:.2f} ms")
    ok = max(worst, realistic) < TARGET_SECONDS
    print(f"target {TARGET_SECONDS * 1000:.0f} ms per 64 KiB: {'met' if ok else 'MISSED'}"
          f" (over {LOADED_SECONDS * 1000:.0f} ms means a backtracking regex, not a busy machine)")
    return 0 if max(worst, realistic) < LOADED_SECONDS else 1


if __name__ == "__main__":
    sys.exit(main())
