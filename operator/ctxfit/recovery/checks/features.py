"""Checks for the knobs LoRA and speculative decoding add: LoRABuffersOOM and DraftModelOOM
(``ctxfit.recovery.features`` attributes the failure).

- LoRABuffersOOM (the buffers of ``maxLoras`` adapters at ``maxLoraRank`` in every layer did not fit): halve
  ``maxLoras`` (the buffers scale with it; ``engines/extras.py``), down to 1; SGLang also gets more slack (its
  pool is sized after the buffers). The rank is never lowered below the largest adapter's, which the engine would
  refuse to load.
- DraftModelOOM (the draft's weights, its KV pool or its graphs did not fit): halve ``numSpeculativeTokens`` (the
  graphs verify 1 + k tokens per request, SGLang's draft pool headroom is ``max_running_requests x steps``), down to
  1, and give the memory outside the budget more room: SGLang's draft pool and weights sit in the
  ``1 - mem_fraction_static`` slack before 0.5.14, vLLM's draft graphs outside ``gpu_memory_utilization``.
Permanent when every knob is at its floor: the explanation names what no longer fits.
"""

from __future__ import annotations

from ctxfit.api import EffectiveConfig
from ctxfit.recovery.policy import Decision, PolicyContext, propose
from ctxfit.vocab.kinds import FailureKind

from .common import FRACTION_FLOOR, MEMORY_STEP, UTILIZATION_FLOOR, memory_knob, round_fraction


def _lowered(ctx: PolicyContext, head: str) -> list[tuple[EffectiveConfig, str]]:
    field, flag, value = memory_knob(ctx)
    floor = UTILIZATION_FLOOR if field == "gpu_memory_utilization" else FRACTION_FLOOR
    out = []
    for step in (MEMORY_STEP, 0.01, 0.03):
        lower = round_fraction(value - step)
        if lower >= floor:
            out.append((ctx.current.model_copy(update={field: lower}),
                        f"{head}; lowering {flag} from {value:g} to {lower:g} for the memory outside the budget"))
    return out


def check_lora_buffers_oom(ctx: PolicyContext) -> Decision | None:
    """LoRABuffersOOM: fewer adapter slots, then (SGLang) more slack."""
    if ctx.failure.kind is not FailureKind.LORA_BUFFERS_OOM:
        return None
    slots = ctx.current.max_loras or 1
    head = (f"{ctx.engine_name} ran out of GPU memory allocating the LoRA buffers ({slots} adapters x rank "
            f"{ctx.current.max_lora_rank})")
    candidates: list[tuple[EffectiveConfig, str]] = []
    if slots > 1:
        fewer = max(1, slots // 2)
        candidates.append((ctx.current.model_copy(update={"max_loras": fewer}),
                           f"{head}; halving maxLoras from {slots} to {fewer}"))
    if ctx.current.mem_fraction_static is not None:
        candidates += _lowered(ctx, head)
    return propose(ctx, "LoRABuffersOOM", candidates,
                   f"{head}; one adapter slot at that rank does not fit next to the weights: use a GPU with more "
                   "memory, more tensor parallelism or adapters of a lower rank")


def check_draft_model_oom(ctx: PolicyContext) -> Decision | None:
    """DraftModelOOM: fewer speculative tokens, then more memory outside the budget."""
    if ctx.failure.kind is not FailureKind.DRAFT_MODEL_OOM:
        return None
    tokens = ctx.current.num_speculative_tokens or 1
    head = f"{ctx.engine_name} ran out of GPU memory in the speculative draft ({tokens} tokens per step)"
    candidates: list[tuple[EffectiveConfig, str]] = []
    if tokens > 1:
        fewer = max(1, tokens // 2)
        candidates.append((ctx.current.model_copy(update={"num_speculative_tokens": fewer}),
                           f"{head}; halving numSpeculativeTokens from {tokens} to {fewer}"))
    candidates += _lowered(ctx, head)
    return propose(ctx, "DraftModelOOM", candidates,
                   f"{head}; the draft does not fit next to the target even at 1 token per step: use a smaller "
                   "draft, more GPUs, or no speculative decoding")
