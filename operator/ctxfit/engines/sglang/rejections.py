"""SGLang runtime rejections that mean the served context is above what the KV pool holds (as data).

SGLang does not check ``--context-length`` against its KV pool at start (0.4 - 0.5): it starts, then
rejects the first long request and may die in the scheduler. ``srt/managers/utils.py``
``validate_input_length`` (0.4.x ``srt/managers/scheduler.py``) prints "Input length (N tokens) exceeds
the maximum allowed length (M tokens). Use a shorter input or enable --allow-auto-truncate.", where
``M = max_req_input_len`` is bounded by the pool (``max_total_num_tokens``); the same class as vLLM's
KV-cache-too-small error, so the same policy applies (a context at or below ``M``). The marker keeps
"tokens) ... (" so other programs' "exceeds the maximum allowed length" messages do not match.

Kept apart from ``failures.py`` (which others edit) and appended to its table there.
"""

from __future__ import annotations

from ctxfit.vocab.kinds import FailureKind
from ctxfit.vocab.patterns import NUM, RANK_ROOT, FailurePattern, extractor

CONTEXT_REJECTION_PATTERNS: tuple[FailurePattern, ...] = (
    FailurePattern(
        kind=FailureKind.KV_CACHE_TOO_SMALL,
        markers=("tokens) exceeds the maximum allowed length (",),
        rank=RANK_ROOT,
        source="SGLang 0.4 - 0.5.23 srt/managers/utils.py validate_input_length (0.4.x scheduler.py)",
        extractors=(
            extractor("estimatedMaxContextLength", r"exceeds the maximum allowed length \(" + NUM),
        ),
    ),
)
"""SGLang's 'request longer than the pool allows' rejection, 0.4 - 0.5.23."""
