"""``status.observed``: what the engine itself reported at start-up, next to ``status.plan``.

Filled from the engine container's log once per attempt when its pod becomes Ready (parsers:
``ctxfit.engines.vllm.startup``, ``ctxfit.engines.sglang.startup``). Sizes are per GPU, bytes.
"""

from __future__ import annotations

from pydantic import Field

from .base import WireModel


class ObservedStatus(WireModel):
    """The engine's own start-up accounting for one attempt; ``None``: the log did not say.

    Attributes:
        attempt: the attempt the log belongs to (read once per attempt).
        pod: the pod whose log was read.
        kv_cache_bytes: KV pool per GPU (the smallest rank's).
        kv_cache_tokens: tokens the pool holds.
        max_concurrency: requests of ``servedContextLength`` tokens the pool holds at once.
        served_context_length: the context the engine serves (vLLM max_model_len, SGLang context_len).
        weights_bytes: weights per GPU.
        load_seconds: seconds spent loading weights.
        draft_kv_cache_bytes: a speculative draft's own KV pool per GPU, bytes (SGLang prints it after the target's).
        draft_kv_cache_tokens: tokens the draft's pool holds.
        predicted_kv_cache_bytes: the plan's KV pool (calibrated, as planned) this is compared with.
        error_bytes: observed minus predicted KV pool (negative: the plan was optimistic).
        source_lines: the log lines the values come from.
        observed_at: when the log was read (RFC 3339).
    """

    attempt: int = Field(ge=1)
    pod: str | None = None
    kv_cache_bytes: int | None = None
    kv_cache_tokens: int | None = None
    max_concurrency: float | None = None
    served_context_length: int | None = None
    weights_bytes: int | None = None
    load_seconds: float | None = None
    draft_kv_cache_bytes: int | None = None
    draft_kv_cache_tokens: int | None = None
    predicted_kv_cache_bytes: int | None = None
    error_bytes: int | None = None
    source_lines: list[str] = Field(default_factory=list)
    observed_at: str | None = None
