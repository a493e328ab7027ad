"""vLLM's weight sharding rules (read in the vLLM 0.19.0 wheel; unchanged in shape since 0.6).

- ``model_executor/layers/vocab_parallel_embedding.py``: ``DEFAULT_VOCAB_PADDING_SIZE = 64``, ``pad_vocab_size``,
  ``VocabParallelEmbedding.__init__`` (``num_embeddings_per_partition = padded / tp``).
- ``distributed/utils.py::get_pp_indices``: ``num_layers // pp`` per stage, the remainder spread over the stages
  before the last (``partitions[-i] += 1`` for i in 2..remainder+1); ``VLLM_PP_LAYER_PARTITION`` overrides.
- ``model_executor/layers/fused_moe/config.py::FusedMoEParallelConfig.make``: experts split over TP x DP
  (``flatten_tp_across_dp_and_pcp``); with ``--enable-expert-parallel`` EP = TP x DP and expert TP = 1;
  ``fused_moe/layer.py::determine_expert_map``: ceil on the first ``E % EP`` ranks.
- ``model_executor/layers/fused_moe/oracle/mxfp4.py::mxfp4_round_up_hidden_size_and_intermediate_size``: MXFP4
  experts padded to hidden 256 / per-rank intermediate 128 (Marlin; TRT-LLM on SM100 pads 256/256; the Triton
  backend on SM90 pads its swizzled layout by a similar amount: gpt-oss-20b TP 2 on H100 printed 7.01 GiB, this
  rule gives 7.08).
- ``model_executor/layers/rotary_embedding/base.py::RotaryEmbedding``: ``cos_sin_cache`` buffer of
  [max_position, rotary_dim] in the model dtype.
"""

from __future__ import annotations

from ctxfit.engines.weights import ShardingRules


def pp_partition(num_layers: int, pp: int) -> list[int]:
    """Layers per stage as ``get_pp_indices`` splits them (without ``VLLM_PP_LAYER_PARTITION``)."""
    partitions = [num_layers // pp] * pp
    remaining = num_layers % pp
    for i in range(2, remaining + 2):
        partitions[-i] += 1
    return partitions


RULES = ShardingRules(engine="vllm", vocab_padding=64, partition=pp_partition, experts_tp_across_dp=True,
                      rope_cache=True, mxfp4_padding=(256, 128),
                      source="vllm vocab_parallel_embedding.py, distributed/utils.py::get_pp_indices, "
                      "fused_moe/config.py::FusedMoEParallelConfig.make")
