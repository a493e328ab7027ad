"""V0's default ``max_num_batched_tokens``: the profiled forward's length (docs/engine-memory.md A.1).

With chunked prefill 2048 tokens (512 before 0.6.5), without it ``max(max_model_len, 2048)``; chunked prefill turns
itself on only above 32768 tokens and when the model has no sliding window.
"""

from __future__ import annotations

V0_CHUNKED_PREFILL_ABOVE = 32768
V0_CHUNKED_BATCHED_TOKENS = 2048
V0_CHUNKED_BATCHED_TOKENS_OLD = 512
V0_CHUNKED_2048_SINCE = (0, 6, 5)
V0_MIN_BATCHED_TOKENS = 2048
"""V0 defaults: ``config.py::SchedulerConfig`` gives chunked prefill 512 tokens up to 0.6.4 (read in the 0.5.5,
0.6.3 and 0.6.4 wheels) and 2048 from 0.6.5 (0.6.5, 0.7.2 wheels), ``max(max_model_len, 2048)`` without it;
``engine/arg_utils.py::create_engine_config`` turns it on above 32768 tokens (same in all of them)."""


def v0_batched_tokens(
    context_length: int,
    model_max: int | None,
    *,
    sliding_window: bool = False,
    version: tuple[int, int, int] = V0_CHUNKED_2048_SINCE,
) -> int:
    """V0's default ``max_num_batched_tokens`` for a context (see the module docstring).

    Chunked prefill turns itself on above 32768 tokens unless the model uses a sliding window
    (``create_engine_config``: ``not use_sliding_window``); without it the profile is the whole context.
    ``context_length`` 0 (not chosen yet): the largest the profile can be, ``min(model max, 32768)``
    (the model maximum with a sliding window).
    """
    if context_length <= 0:
        limit = model_max or V0_CHUNKED_PREFILL_ABOVE
        context_length = limit if sliding_window else min(limit, V0_CHUNKED_PREFILL_ABOVE)
    if context_length > V0_CHUNKED_PREFILL_ABOVE and not sliding_window:
        return V0_CHUNKED_BATCHED_TOKENS if version >= V0_CHUNKED_2048_SINCE else V0_CHUNKED_BATCHED_TOKENS_OLD
    return max(context_length, V0_MIN_BATCHED_TOKENS)
