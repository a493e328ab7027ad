"""Pipeline-parallel terms of vLLM V0's profile run, bytes per GPU (read in the 0.7.2 and 0.8.5 wheels).

What differs between the stages of a V0 start-up at PP > 1 (``worker/model_runner.py``):

- ``_dummy_run``: on every stage but the first, ``intermediate_tensors = self.model.
  make_empty_intermediate_tensors(batch_size=<the profiled tokens>, dtype=model dtype)``. For the decoder models
  (``models/utils.py::make_empty_intermediate_tensors_factory(["hidden_states", "residual"], hidden_size)``)
  that is two ``torch.zeros([tokens, hidden])`` in the model dtype. The local ``intermediate_tensors`` stays
  referenced until ``_dummy_run`` returns, so both buffers are alive through the forward and the sampler step:
  they add to the activation peak whichever of the two sets it.
- ``execute_model``: only the last stage computes logits and samples (``if not get_pp_group().is_last_rank:
  return hidden_or_intermediate_states``); the first stage runs the forward alone. ctxfit predicts the last
  stage (it samples and, being non-first, holds the intermediate tensors), the larger activation of the two.
- Layer split (``distributed/utils.py::get_pp_indices``): ``layers // PP`` per stage, the remainder on the
  non-last stages; the embedding lives on the first stage and the final norm and ``lm_head`` on the last
  (``models/qwen2.py`` / ``llama.py``: ``PPMissingLayer`` elsewhere). The weights of each stage are what its
  ledger prints ("model weights take"), so no weight term is added here.
- bitsandbytes (``layers/quantization/bitsandbytes.py::BitsAndBytesConfig.get_quant_method``) quantizes
  ``LinearBase`` layers only: ``lm_head`` (``ParallelLMHead``) and the embedding stay in the model dtype and
  their logits matmul dequantizes nothing; the loader (``model_loader/loader.py::BitsAndBytesModelLoader.
  _load_weights``) skips the other stages' quant states (``is_pp_missing_parameter``). Nothing PP-specific
  enters the forward's dequantization term (``dequant.py``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ctxfit.engines.overhead import BF16_BYTES, DEFAULT_INTERMEDIATE

from .dequant import HIDDEN_FROM_INTERMEDIATE

if TYPE_CHECKING:
    from ctxfit.vocab.inputs import PlanInputs

INTERMEDIATE_TENSOR_KEYS = 2
"""``hidden_states`` and ``residual`` (``make_empty_intermediate_tensors_factory`` of the decoder models)."""


def v0_intermediate_tensor_bytes(inputs: PlanInputs, max_num_batched_tokens: int) -> int:
    """Intermediate tensors a non-first V0 pipeline stage holds through its profile run, bytes (0 at PP 1).

    ``2 x tokens x hidden_size x 2`` (hidden states and residual, ``[tokens, hidden]`` in the 16-bit model
    dtype vLLM runs; hidden size from config.json, else ``intermediate / 2.5`` as in ``dequant.py``).
    """
    if inputs.pp <= 1:
        return 0
    hidden = inputs.hidden_size or int((inputs.intermediate_size or DEFAULT_INTERMEDIATE) / HIDDEN_FROM_INTERMEDIATE)
    return INTERMEDIATE_TENSOR_KEYS * max_num_batched_tokens * hidden * BF16_BYTES
