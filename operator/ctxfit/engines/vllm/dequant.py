"""Transient dequantized weights in vLLM's profiled forward (bitsandbytes 4-bit), bytes per GPU.

A bitsandbytes 4-bit checkpoint stays 4-bit in GPU memory (vLLM ``model_executor/layers/quantization/
bitsandbytes.py``: ``create_qweight_for_4bit`` stores ``uint8`` of ``in x out / 2``), which is what
"model weights take" prints. Its matmuls dequantize on the fly, so the profile run's activation peak
carries weight-sized buffers an unquantized model does not have:

- Dense layers (all vLLM versions with bitsandbytes, V0 and V1): ``BitsAndBytesLinearMethod.
  _apply_4bit_weight`` preallocates the layer output ``out`` and calls ``_apply_bnb_4bit``, which for
  each output shard runs ``bitsandbytes.matmul_4bit(x, weight[shard].t(), quant_state)`` and copies the
  result into ``out``. For more than one input token ``matmul_4bit`` goes through ``MatMul4Bit.forward``
  = ``linear(A, dequantize_4bit(B, quant_state).to(A.dtype).t())``: one bf16 copy of the shard's
  weight, plus the shard's ``[tokens, shard_out]`` result before it is copied into ``out``. The largest
  shard of a decoder layer is an MLP projection: ``intermediate / TP x hidden`` (gate or up of the
  merged gate_up, or down). Only the weight copy is added: the shard result is alive in the gate_up
  step, where ``out`` (``[tokens, 2 x intermediate]``) plus that result (``[tokens, intermediate]``)
  equal the gate_up output plus ``SiluAndMul``'s output of the unquantized forward, the peak the fitted
  forward copies already describe (``overhead.py``); the bnb V0 start-ups in tests/fixtures/startups fit
  better without a token term (``bench/overhead_fit.py``).
- MoE layers (vLLM with ``BitsAndBytesMoEMethod``, 0.9 and later): ``apply`` calls
  ``_apply_4bit_dequnt(layer)`` and hands the dequantized ``w13`` and ``w2`` of every local expert to
  ``fused_experts``: ``experts x 3 x moe_intermediate / TP x hidden`` bf16 alive together.

bitsandbytes 8-bit (``_apply_8bit_weight``: int8 ``MatmulLtState``) keeps no bf16 weight copy and is
not modelled (``"bitsandbytes-8bit"`` gets 0).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ctxfit.engines.overhead import BF16_BYTES, DEFAULT_INTERMEDIATE

if TYPE_CHECKING:
    from ctxfit.vocab.inputs import PlanInputs

BNB_4BIT = "bitsandbytes"
HIDDEN_FROM_INTERMEDIATE = 2.5
"""hidden_size assumed when config.json has none: (dense) intermediate / 2.5, larger than the hidden size of every
model in tests/fixtures/startups (intermediate / hidden is 2.7-5.4 there), so the buffer errs large."""


def dequant_bytes(inputs: PlanInputs) -> int:
    """Dequantized weight buffers alive during the profiled forward on one GPU, bytes (0 unless bitsandbytes
    4-bit; see the module docstring).

    Dense: ``(intermediate / TP) x hidden x 2`` (the largest shard's bf16 weight; its output shares the
    forward's peak, module docstring). MoE: ``experts x 3 x
    (moe_intermediate / TP) x hidden x 2`` (w13 and w2 of every expert), the dense term added for models
    with dense layers too is dominated by it and left out.
    """
    if inputs.quantization != BNB_4BIT:
        return 0
    tp = inputs.tp
    dense_intermediate = inputs.intermediate_size or DEFAULT_INTERMEDIATE
    hidden = inputs.hidden_size or int(dense_intermediate / HIDDEN_FROM_INTERMEDIATE)
    if inputs.moe is not None:
        per_tp = max(1, inputs.moe.intermediate_size // tp)
        return inputs.moe.experts * 3 * per_tp * hidden * BF16_BYTES
    intermediate = max(1, dense_intermediate // tp)
    return intermediate * hidden * BF16_BYTES
