"""Multi-node layout of one replica: how tensor, pipeline and data parallelism map onto ``spec.nodes``.

A replica spans ``spec.nodes`` nodes with ``gpu.count`` GPUs each; ``tensor x pipeline x data`` equals
``gpu.count x nodes`` (``InferenceServerSpec`` validates it). Ranks are laid out as the engines do:
tensor-parallel ranks are the fastest-varying dimension, so a TP group fills one node before it spills
to the next, and pipeline stages follow (vLLM ``vllm/distributed/parallel_state.py``
``initialize_model_parallel``: ``all_ranks.view(-1, dp, pp, tp)``; SGLang
``sglang/srt/distributed/parallel_state.py`` the same order).

The per-GPU memory budget does not change with the number of nodes: each GPU still holds
``weights / (TP x PP)``, its TP share of the KV heads (MLA latents are replicated on every TP rank) and the
layers of its pipeline stage (the largest stage counts), which ``ctxfit.budget.kv.kv_layout`` computes
from TP and PP. What changes is where communication runs: a TP group that spans nodes all-reduces over
the network on every layer, while PP across nodes only sends activations between stages.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ctxfit.api import InferenceServerSpec
from ctxfit.vocab.inputs import PlanInputError

from .planner import Plan, plan


@dataclass(frozen=True)
class GroupLayout:
    """How one replica's ranks sit on its nodes.

    Attributes:
        nodes: nodes in the group (``spec.nodes``).
        gpus_per_node: ``spec.gpu.count``.
        tensor, pipeline, data: parallel sizes.
        tp_nodes: nodes one tensor-parallel group spans (1 when TP fits in a node).
        stages_per_node: pipeline stages hosted on one node (0 when a TP group is wider than a node).
    """

    nodes: int
    gpus_per_node: int
    tensor: int
    pipeline: int
    data: int
    tp_nodes: int
    stages_per_node: int

    @property
    def world_size(self) -> int:
        """GPUs in the group: ``tensor x pipeline x data`` (= ``gpus_per_node x nodes``)."""
        return self.tensor * self.pipeline * self.data

    @property
    def tp_crosses_nodes(self) -> bool:
        """True when a TP all-reduce goes over the network (TP larger than one node's GPUs)."""
        return self.tp_nodes > 1

    def describe(self) -> str:
        """One line, e.g. ``2 nodes x 8 GPUs: TP 16 spans 2 nodes, PP 1, DP 1``."""
        where = f"spans {self.tp_nodes} nodes" if self.tp_crosses_nodes else "within a node"
        return (f"{self.nodes} nodes x {self.gpus_per_node} GPUs: TP {self.tensor} {where}, "
                f"PP {self.pipeline}, DP {self.data}")


def group_layout(spec: InferenceServerSpec) -> GroupLayout:
    """The layout of ``spec``'s replica (a single node is a group of one).

    Raises:
        PlanInputError: TP neither divides nor is a multiple of ``gpu.count`` (ranks of one TP group
            would straddle nodes unevenly), field ``spec.parallelism.tensor``.
    """
    p, per_node = spec.parallelism, spec.gpu.count
    if p.tensor % per_node and per_node % p.tensor:
        raise PlanInputError(
            "spec.parallelism.tensor", f"{p.tensor} neither divides nor is a multiple of gpu.count {per_node}; "
            "a tensor-parallel group would straddle nodes unevenly"
        )
    tp_nodes = max(1, p.tensor // per_node)
    stages = per_node // p.tensor if p.tensor <= per_node else 0
    return GroupLayout(nodes=spec.nodes, gpus_per_node=per_node, tensor=p.tensor, pipeline=p.pipeline,
                       data=p.data, tp_nodes=tp_nodes, stages_per_node=stages)


def layout_reasons(layout: GroupLayout) -> list[str]:
    """Sentences about the layout for ``Plan.reasons`` (empty for one node).

    A TP group spanning nodes is allowed (the engines run it) but flagged: its all-reduce runs over the
    inter-node network on every layer; TP = GPUs per node with PP = nodes keeps it on NVLink.
    """
    if layout.nodes == 1:
        return []
    out = [f"multi-node group: {layout.describe()}"]
    if layout.tp_crosses_nodes:
        out.append(
            f"tensor parallelism {layout.tensor} spans {layout.tp_nodes} nodes: every layer all-reduces over the "
            f"network; tensor {layout.gpus_per_node} x pipeline {layout.pipeline * layout.tp_nodes} keeps it "
            "inside a node"
        )
    return out


def plan_group(spec: InferenceServerSpec, **node: Any) -> tuple[Plan, GroupLayout]:
    """Plan one replica of a (possibly multi-node) spec: the per-GPU plan plus its group layout.

    Args:
        spec: validated spec; ``gpu.count`` is GPUs per node.
        node: keyword arguments of ``ctxfit.budget.planner.plan`` (node GPU facts, hf_config, pin).

    Returns:
        (the plan with the layout's reasons appended, the layout).

    Raises:
        PlanInputError: as ``plan`` and ``group_layout``.
    """
    layout = group_layout(spec)
    result = plan(spec, **node)
    result.reasons.extend(layout_reasons(layout))
    return result, layout
