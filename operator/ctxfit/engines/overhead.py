"""Activation-peak estimate shared by the engines' memory models (fitted constants, with their data).

Fitted on the 59 successful vLLM 0.19.0 H100 start-ups of ``tests/fixtures/startups/vllm-0.19.0-h100-sweep.csv``
(llm-d-planner PR 205 logs), columns ``activation_memory_gib``; see ``bench/overhead_fit.py`` for the
error report on the held-out start-ups.

- Sampler warm-up (vLLM ``gpu_model_runner._dummy_sampler_run`` over ``max_num_seqs`` requests): the
  fp32 logits ``[max_num_seqs, vocab]`` and their copies (probs, sorted, top-k/p masks). Fitted
  ``SAMPLER_LOGIT_COPIES = 3.85`` copies: Llama-3.1 (vocab 128256, 1024 seqs) 1.89 GiB measured,
  1.96 predicted; Qwen2.5 (152064) 2.21 / 2.32; Gemma-2/3 (256000/262208) 3.62-3.99 / 3.76-3.85.
- Dense forward of ``max_num_batched_tokens`` tokens: ``FORWARD_MLP_COPIES = 2.4`` times the gate/up
  output ``[tokens, 2 x intermediate / TP]`` in bf16. Llama-3.1-8B PP stage 0 (no sampler) 1.10 / 1.05;
  CodeLlama-7b 0.77 / 0.81.
- MoE: the fused-MoE intermediate caches ``[tokens, top_k, 2 x moe_intermediate / TP]`` bf16 times
  ``MOE_CACHE_COPIES = 1.5`` (vLLM ``fused_moe`` cache1 + cache2 + cache3), added to the sampler peak
  (the sweep's MoE rows sit above the sampler term by about this much): Qwen3-30B-A3B 2.68 / 2.51,
  DeepSeek-V2-Lite 1.93 / 1.89, Qwen1.5-MoE 2.47 / 2.53, Mixtral TP2 1.21 / 1.67, gpt-oss-20b 2.87 / 3.21.
- Unknown vocabulary: ``DEFAULT_VOCAB = 152064`` (the largest common LLM vocabulary below Gemma's) so the
  estimate errs to the safe side for most models.
"""

from __future__ import annotations

from dataclasses import dataclass

from ctxfit.catalog import MoE

SAMPLER_LOGIT_COPIES = 3.85
FORWARD_MLP_COPIES = 2.4
MOE_CACHE_COPIES = 1.5
DEFAULT_VOCAB = 152064
DEFAULT_INTERMEDIATE = 14336
BF16_BYTES = 2
FP32_BYTES = 4


@dataclass(frozen=True)
class ActivationEstimate:
    """Activation peak, bytes, with the part that dominated (for the report)."""

    bytes: int
    note: str


def activation_peak_bytes(
    *,
    max_num_seqs: int,
    max_num_batched_tokens: int,
    vocab_size: int | None,
    intermediate_size: int | None,
    moe: MoE | None,
    tensor_parallel: int,
    has_sampler: bool = True,
) -> ActivationEstimate:
    """Transient activation peak of the start-up profile run on one GPU.

    Args:
        max_num_seqs: sequences in the sampler warm-up.
        max_num_batched_tokens: tokens in the dummy forward.
        vocab_size, intermediate_size: config.json fields (None -> defaults above).
        moe: MoE sizes or None (dense).
        tensor_parallel: TP size (divides the MLP / expert intermediate, not the logits).
        has_sampler: False on pipeline stages that do not sample.

    Returns:
        ``ActivationEstimate`` (bytes and which term dominated).
    """
    vocab = vocab_size or DEFAULT_VOCAB
    sampler = int(SAMPLER_LOGIT_COPIES * max_num_seqs * vocab * FP32_BYTES) if has_sampler else 0
    if moe is not None:
        per_tp = max(1, moe.intermediate_size // tensor_parallel)
        moe_cache = int(MOE_CACHE_COPIES * max_num_batched_tokens * moe.top_k * 2 * per_tp * BF16_BYTES)
        return ActivationEstimate(
            sampler + moe_cache,
            f"sampler warm-up {max_num_seqs} seqs x vocab {vocab} + fused-MoE caches at "
            f"{max_num_batched_tokens} tokens",
        )
    inter = (intermediate_size or DEFAULT_INTERMEDIATE) // tensor_parallel
    forward = int(FORWARD_MLP_COPIES * max_num_batched_tokens * 2 * inter * BF16_BYTES)
    if forward > sampler:
        return ActivationEstimate(forward, f"dense forward of {max_num_batched_tokens} tokens")
    return ActivationEstimate(sampler, f"sampler warm-up {max_num_seqs} seqs x vocab {vocab}")
