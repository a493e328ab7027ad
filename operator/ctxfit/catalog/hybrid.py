"""Recurrent-state geometry of hybrid models (Mamba-1, Mamba-2, Gated DeltaNet layers next to attention).

A hybrid model keeps, per running sequence, a fixed-size state in every non-attention layer: a short
convolution window and an SSM / delta-rule matrix. It does not grow with the context, so it is not part
of the KV bytes per token; it bounds how many sequences can run at once.

Field names follow the Hugging Face config.json of each family (read by ``ctxfit.vocab.hybridconfig``):

- ``mamba1`` (Jamba): ``mamba_d_conv``, ``mamba_d_state``, ``mamba_expand * hidden_size`` = d_inner.
- ``mamba2`` (Nemotron-H, Granite-4.0-H): ``mamba_num_heads``/``mamba_n_heads``,
  ``mamba_head_dim``/``mamba_d_head``, ``ssm_state_size``/``mamba_d_state``, ``n_groups``/``mamba_n_groups``,
  ``conv_kernel``/``mamba_d_conv``.
- ``gated_deltanet`` (Qwen3-Next, Qwen3.5): ``linear_num_key_heads``, ``linear_num_value_heads``,
  ``linear_key_head_dim``, ``linear_value_head_dim``, ``linear_conv_kernel_dim``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

HybridKind = Literal["mamba1", "mamba2", "gated_deltanet"]
HYBRID_KINDS: tuple[HybridKind, ...] = ("mamba1", "mamba2", "gated_deltanet")


@dataclass(frozen=True)
class HybridState:
    """Per-layer recurrent state sizes of a hybrid model (config.json numbers, unsharded).

    Attributes:
        kind: ``mamba1``, ``mamba2`` or ``gated_deltanet``.
        state_layers: layers holding a recurrent state (the rest are attention layers).
        total_layers: ``num_hidden_layers`` (pipeline stages split these).
        conv_kernel: convolution width; the state keeps ``conv_kernel - 1`` columns.
        state_size: SSM state size (mamba1/mamba2 ``d_state``); unused for gated_deltanet.
        num_heads: mamba2 heads, or gated_deltanet value heads.
        head_dim: mamba2 head dim, or gated_deltanet value head dim.
        n_groups: mamba2 B/C groups, or gated_deltanet key heads.
        key_head_dim: gated_deltanet key head dim (0 otherwise).
        intermediate_size: mamba1 d_inner (0 otherwise).
        ssm_dtype_bytes: bytes per SSM/temporal-state element (config ``mamba_ssm_dtype``; 2 = bf16).
        conv_dtype_bytes: bytes per conv-state element (the model dtype; 2 = bf16).
    """

    kind: HybridKind
    state_layers: int
    total_layers: int
    conv_kernel: int
    state_size: int = 0
    num_heads: int = 0
    head_dim: int = 0
    n_groups: int = 1
    key_head_dim: int = 0
    intermediate_size: int = 0
    ssm_dtype_bytes: int = 2
    conv_dtype_bytes: int = 2

    def __post_init__(self) -> None:
        if self.kind not in HYBRID_KINDS:
            raise ValueError(f"hybrid.kind: {self.kind!r} is not one of {', '.join(HYBRID_KINDS)}")
        if not 0 < self.state_layers <= self.total_layers:
            raise ValueError(f"hybrid.stateLayers: {self.state_layers} must be in 1..{self.total_layers}")
        if self.conv_kernel < 1:
            raise ValueError("hybrid.convKernel: must be >= 1")
        if self.kind == "mamba1" and (self.intermediate_size < 1 or self.state_size < 1):
            raise ValueError("hybrid.intermediateSize: mamba1 needs intermediateSize and stateSize")
        if self.kind == "mamba2" and (self.num_heads < 1 or self.head_dim < 1 or self.state_size < 1):
            raise ValueError("hybrid.numHeads: mamba2 needs numHeads, headDim and stateSize")
        if self.kind == "gated_deltanet" and (self.num_heads < 1 or self.head_dim < 1 or self.key_head_dim < 1):
            raise ValueError("hybrid.numHeads: gated_deltanet needs numHeads, headDim, nGroups and keyHeadDim")


def hybrid_from_catalog(raw: dict[str, Any]) -> HybridState:
    """A ``hybrid:`` mapping of catalog/models.yaml (camelCase keys) as ``HybridState``.

    Raises:
        ValueError: unknown kind or missing sizes (message names the field).
        KeyError: ``kind``, ``stateLayers``, ``totalLayers`` or ``convKernel`` missing.
    """
    return HybridState(
        kind=raw["kind"],
        state_layers=int(raw["stateLayers"]),
        total_layers=int(raw["totalLayers"]),
        conv_kernel=int(raw["convKernel"]),
        state_size=int(raw.get("stateSize", 0)),
        num_heads=int(raw.get("numHeads", 0)),
        head_dim=int(raw.get("headDim", 0)),
        n_groups=int(raw.get("nGroups", 1)),
        key_head_dim=int(raw.get("keyHeadDim", 0)),
        intermediate_size=int(raw.get("intermediateSize", 0)),
        ssm_dtype_bytes=int(raw.get("ssmDtypeBytes", 2)),
        conv_dtype_bytes=int(raw.get("convDtypeBytes", 2)),
    )
