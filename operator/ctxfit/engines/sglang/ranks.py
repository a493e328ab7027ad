"""Which SGLang rank printed a log line, and the first line of each rank for pools that a second model also prints.

SGLang's logger prefixes every scheduler line with the rank ("[time TPn]", "[time DPn TPn]", "[time PPn TPn]",
"[time TPn EPn]"; 0.1.21 - 0.2.5 write "[gpu_id=N]" and 0.2.7 "[gpu=N]" into the message instead; single-GPU 0.5.x
prints no rank at all):
``srt/utils.py`` ``configure_logger(prefix=...)`` and ``managers/scheduler.py`` ``run_scheduler_process``.

With speculative decoding (EAGLE, EAGLE3, NextN/MTP, standalone) the draft model's worker builds its own KV pool
after the target's and prints the same "KV Cache is allocated." line with a pool of ``draft_runner_cache_size``
tokens and the draft model's few layers (0.5.4 ``model_executor/model_runner.py`` ``init_memory_pool``: "Draft worker
shares req_to_token_pool with the target worker"; ``speculative/eagle_worker.py`` ``EAGLEWorker.__init__`` runs after
the target ``TpModelWorker`` is built). So a rank's first pool line is the target's pool.
"""

from __future__ import annotations

import re

from ctxfit.vocab.startup import MAX_LINE_CHARS

_RANK = re.compile(r"\b(?:gpu(?:_id)?=\d{1,4}|[DPTE]P\d{1,5})\b", re.ASCII)


def rank_of(line: str, marker: str) -> str:
    """The rank tokens printed before ``marker`` in ``line`` ("TP0", "DP1 TP1", "gpu=0", "gpu_id=0"), "" when none.

    0.1.21 - 0.2.7 put "[gpu_id=N]" / "[gpu=N]" right before the message, so the prefix and the first 40
    characters from the marker on are searched; ``marker`` must be in ``line``."""
    at = line.index(marker)
    return " ".join(_RANK.findall(line[:at]) or _RANK.findall(line[at:at + 40]))


def first_per_rank(text: str, markers: tuple[str, ...]) -> str:
    """``text`` without the second and later lines holding one of ``markers`` from the same rank (linear; never
    raises). Other lines are kept as they are (cut at ``MAX_LINE_CHARS``, as the scanner does)."""
    seen: set[tuple[str, str]] = set()
    kept: list[str] = []
    for raw in text.splitlines():
        line = raw[:MAX_LINE_CHARS]
        marker = next((m for m in markers if m in line), None)
        if marker is not None:
            key = (marker, rank_of(line, marker))
            if key in seen:
                continue
            seen.add(key)
        kept.append(line)
    return "\n".join(kept)


def after_target_pool(text: str, line_marker: str, composite_marker: str) -> str:
    """The pool lines (``line_marker`` or ``composite_marker``) each rank prints after its own (the target model's)
    pool: a speculative draft's pool. Never raises; linear (two passes).

    A rank's target pool is its first ``composite_marker`` line together with the ``line_marker`` lines before it
    (a sliding-window pool, ``SWAKVPool``: its full and sliding-window sub-pools each print "KV Cache is allocated."
    first, unlabelled in 0.5.4 - 0.5.16, "Full KV Cache ..." / "SWA KV Cache ..." from 0.5.17), else its first
    ``line_marker`` line. Not told apart: a sliding-window draft of a target without sliding window (its sub-pools
    would be read as the target's)."""
    lines = [raw[:MAX_LINE_CHARS] for raw in text.splitlines()]
    composite_at: dict[str, int] = {}
    for at, line in enumerate(lines):
        if composite_marker in line:
            composite_at.setdefault(rank_of(line, composite_marker), at)
    seen: set[str] = set()
    kept: list[str] = []
    for at, line in enumerate(lines):
        marker = composite_marker if composite_marker in line else (line_marker if line_marker in line else None)
        if marker is None:
            continue
        rank = rank_of(line, marker)
        if rank in composite_at:
            if at > composite_at[rank]:
                kept.append(line)
        elif rank in seen:
            kept.append(line)
        seen.add(rank)
    return "\n".join(kept)
