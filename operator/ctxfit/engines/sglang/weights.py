"""SGLang's weight sharding rules (read in the SGLang 0.5.23 wheel).

- ``srt/layers/vocab_parallel_embedding.py``: ``DEFAULT_VOCAB_PADDING_SIZE = 64`` (vLLM's layer, copied).
- ``srt/distributed/utils.py::get_pp_indices``: ``num_layers // pp`` per stage, the last ``remainder`` stages one
  more (``SGLANG_PP_LAYER_PARTITION`` overrides).
- ``srt/layers/moe/fused_moe_triton/layer.py``: experts split by ``moe_tp_size`` = TP / EP (``--ep-size``, which
  ctxfit sets to TP under expert parallelism); SGLang's ``--dp-size`` replicas do not split experts.
- ``srt/layers/rotary_embedding.py``: ``cos_sin_cache`` [max_position, rotary_dim] in the model dtype.
"""

from __future__ import annotations

from ctxfit.engines.weights import ShardingRules


def pp_partition(num_layers: int, pp: int) -> list[int]:
    """Layers per stage as ``get_pp_indices`` splits them (without ``SGLANG_PP_LAYER_PARTITION``)."""
    base, remainder = divmod(num_layers, pp)
    return [base + (1 if rank >= pp - remainder else 0) for rank in range(pp)]


RULES = ShardingRules(engine="sglang", vocab_padding=64, partition=pp_partition, experts_tp_across_dp=False,
                      rope_cache=True,
                      source="sglang vocab_parallel_embedding.py, distributed/utils.py::get_pp_indices, "
                      "moe/fused_moe_triton/layer.py")
