"""Recurrent state of hybrid models: bytes per sequence per GPU, and the max-num-seqs it allows (pure).

Per layer and sequence, on one TP rank (vLLM ``model_executor/layers/mamba/mamba_utils.py``
``MambaStateShapeCalculator``; SGLang mirrors the shapes in ``Mamba2StateShape``):

- mamba1: conv ``(d_inner / tp) x (d_conv - 1)`` + ssm ``(d_inner / tp) x d_state``.
- mamba2: groups padded to TP when they do not divide (``extra_groups_for_head_shards``); conv
  ``(d_inner + 2 * n_groups * d_state) / tp x (d_conv - 1)`` + ssm ``(heads / tp) x head_dim x d_state``.
- gated_deltanet: conv ``(2 * k_heads * k_dim + v_heads * v_dim) / tp x (d_conv - 1)`` + ssm
  ``(v_heads / tp) x v_dim x k_dim``.

Conv state uses the model dtype (``conv_dtype_bytes``), the SSM state ``mamba_ssm_dtype``. Pipeline
stages hold ``ceil(state_layers / pp)`` of the state layers (the busiest stage counts).

How the engines hold the state:

- vLLM (V1 hybrid allocator, ``v1/core/kv_cache_utils.py``): state and KV share one block pool; every
  running sequence holds one state block per Mamba layer group for its whole life, and start-up fails
  with "max_num_seqs (N) exceeds available Mamba cache blocks (M)" when the pool cannot give every
  sequence its blocks. ctxfit keeps ``max_num_seqs x state bytes`` plus one request at the chosen
  context inside the pool.
- SGLang (``model_runner`` Mamba pool): ``--mamba-full-memory-ratio`` (default 0.9) splits the pool,
  ``mamba = pool x ratio / (1 + ratio)``; ``max_mamba_cache_size = mamba // state bytes`` and the
  running requests are capped by it. The KV pool for tokens is the rest.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from ctxfit.api import EngineKind
from ctxfit.catalog.hybrid import HybridState
from ctxfit.engines import get_engine


def state_bytes_per_layer(state: HybridState, tp: int = 1) -> int:
    """Conv + SSM state bytes of one layer for one sequence on one TP rank (module docstring)."""
    window = state.conv_kernel - 1
    if state.kind == "mamba1":
        inner = state.intermediate_size // tp
        return inner * window * state.conv_dtype_bytes + inner * state.state_size * state.ssm_dtype_bytes
    if state.kind == "mamba2":
        groups = state.n_groups if state.n_groups % tp == 0 else state.n_groups + tp - state.n_groups
        conv_dim = (state.num_heads * state.head_dim + 2 * groups * state.state_size) // tp
        ssm = (state.num_heads // tp) * state.head_dim * state.state_size
        return conv_dim * window * state.conv_dtype_bytes + ssm * state.ssm_dtype_bytes
    conv_dim = (2 * state.n_groups * state.key_head_dim + state.num_heads * state.head_dim) // tp
    ssm = (state.num_heads // tp) * state.head_dim * state.key_head_dim
    return conv_dim * window * state.conv_dtype_bytes + ssm * state.ssm_dtype_bytes


def state_bytes_per_sequence(state: HybridState, *, tp: int = 1, pp: int = 1) -> int:
    """State bytes one running sequence holds on the busiest GPU (all state layers of its stage)."""
    return math.ceil(state.state_layers / pp) * state_bytes_per_layer(state, tp)


@dataclass(frozen=True)
class StateSplit:
    """How an engine divides the KV pool between token KV and per-sequence state.

    Attributes:
        kv_pool_bytes: bytes left for token KV (what the context is sized from).
        state_pool_bytes: bytes the engine reserves for state (0 when shared, as in vLLM).
        state_bytes_per_sequence: bytes of state per running sequence on this GPU.
    """

    kv_pool_bytes: int
    state_pool_bytes: int
    state_bytes_per_sequence: int


def split_pool(kind: EngineKind, pool_bytes: int, per_sequence: int) -> StateSplit:
    """The engine's division of ``pool_bytes`` (module docstring); vLLM shares, SGLang splits by ratio."""
    ratio = get_engine(kind).state_pool_ratio
    if ratio is None:
        return StateSplit(pool_bytes, 0, per_sequence)
    state = int(pool_bytes * ratio / (1 + ratio))
    return StateSplit(pool_bytes - state, state, per_sequence)


def max_sequences(split: StateSplit, *, one_request_bytes: int) -> int:
    """Largest max-num-seqs whose state fits next to one request of the chosen context (at least 1).

    vLLM: ``(pool - one request's KV) // state bytes`` (shared pool). SGLang: ``state pool // state bytes``
    (its own ``max_mamba_cache_size``).
    """
    if split.state_bytes_per_sequence <= 0:
        return 1 << 30
    room = split.state_pool_bytes or split.kv_pool_bytes - one_request_bytes
    return max(1, room // split.state_bytes_per_sequence)
