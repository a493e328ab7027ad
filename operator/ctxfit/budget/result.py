"""What the planner returns: the KV capacity of one configuration (``Fit``) and the answer (``Plan``)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ctxfit.api import EffectiveConfig
from ctxfit.engines import BudgetTerms

from .context import ContextChoice
from .kv import KVLayout


@dataclass(frozen=True)
class Fit:
    """KV capacity of one configuration: layout, pool, the largest context one request can have."""

    layout: KVLayout
    pool_bytes: int
    max_context_length: int
    block_size: int
    in_flight_tokens: int


@dataclass(frozen=True)
class Plan:
    """The planner's answer for one spec.

    Attributes:
        fits: a context >= the minimum fits (the server can start; ``ctxfit plan`` exits 0).
        target_fits: the target context itself fits (False whenever ``fits`` is False).
        context_length: chosen tokens (0 when it does not fit).
        max_context_length: predicted largest context (capped at the model maximum).
        kv_bytes_per_token: KV bytes per token per GPU at the effective dtype.
        per_gpu: budget terms in bytes.
        kv_pool_bytes: bytes available to requests (KV pool minus reserved blocks).
        concurrency: how many requests of ``context_length`` tokens fit at once.
        effective: the configuration to run.
        engine_command: program (``vllm serve`` / ``python3 -m sglang.launch_server``).
        engine_args: flags, each flag and value a separate item.
        reasons: human sentences (choice, fallbacks, warnings, what would make it fit); when it does not fit, the
            sentences that say why come first (then calibration, flag and model notes, then suggestions).
        choice: the context policy's choice (``budget.context.choose_context``; its sentence is in ``reasons``),
            None when the spec was refused before a context was chosen.
        calibration_key: the calibration entry applied (``ctxfit.budget.calibrate``), None when none.
        calibration_bytes: the KV-pool offset in bytes that entry applied (0 when none).
        capability_refusals: the compute-capability rules this GPU breaks (``budget.capability``), each a sentence
            also in ``reasons``; non-empty only when they refused the plan (another GPU product may run it).
    """

    fits: bool
    context_length: int
    max_context_length: int
    kv_bytes_per_token: int
    per_gpu: BudgetTerms
    kv_pool_bytes: int
    concurrency: float
    effective: EffectiveConfig
    engine_command: tuple[str, ...]
    engine_args: list[str]
    reasons: list[str]
    model_max_context: int | None
    target_fits: bool = False
    calibration_key: str | None = None
    calibration_bytes: int = 0
    choice: ContextChoice | None = None
    capability_refusals: tuple[str, ...] = ()

    def to_json(self) -> dict[str, Any]:
        """The ``ctxfit plan -o json`` document (stable keys)."""
        t = self.per_gpu
        return {
            "fits": self.fits,
            "targetFits": self.target_fits,
            "contextLength": self.context_length,
            "maxContextLength": self.max_context_length,
            "kvBytesPerToken": self.kv_bytes_per_token,
            "perGPU": {
                "totalBytes": t.total_bytes,
                "usableBytes": t.usable_bytes,
                "weightsBytes": t.weights_bytes,
                "activationBytes": t.activation_bytes,
                "cudaGraphBytes": t.cuda_graph_bytes,
                "otherBytes": t.other_bytes,
                "kvCacheBytes": t.kv_cache_bytes,
            },
            "perGPUExtras": [{"term": e.label, "bytes": e.bytes, "inBudget": e.in_budget, "hostMemory": e.host,
                              "source": e.source} for e in t.extras],
            "kvPoolBytes": self.kv_pool_bytes,
            "concurrency": round(self.concurrency, 2),
            "engineCommand": list(self.engine_command),
            "engineArgs": list(self.engine_args),
            "effective": self.effective.to_wire(),
            "reasons": list(self.reasons),
            "calibration": {"key": self.calibration_key, "kvCacheOffsetBytes": self.calibration_bytes},
        }
