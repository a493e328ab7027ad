"""Multi-node replicas: spec.nodes validation, group layout, per-GPU KV with TP across nodes and PP."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
import yaml
from ctxfit.api import InferenceServer, InferenceServerSpec
from ctxfit.budget.multinode import group_layout, layout_reasons, plan_group
from ctxfit.catalog import lookup_model
from ctxfit.vocab.inputs import PlanInputError
from pydantic import ValidationError

ROOT = Path(__file__).resolve().parents[3]
KIMI_2X8 = ROOT / "manifests" / "kimi-k25-2x8-h100.yaml"


def kimi(**spec_changes: Any) -> InferenceServerSpec:
    doc = yaml.safe_load(KIMI_2X8.read_text())
    doc["spec"].update(spec_changes)
    return InferenceServer.model_validate(doc).spec


def gqa(nodes: int, per_node: int, tensor: int, pipeline: int) -> InferenceServerSpec:
    """A dense GQA model: 80 layers, 8 KV heads of 128 dims (Llama-3-70B geometry), weights fixed per GPU."""
    return InferenceServerSpec.model_validate({
        "model": {"name": "example/gqa-70b", "weightsPerGPU": "20Gi",
                  "architecture": {"attention": "gqa", "numLayers": 80, "numKVHeads": 8, "headDim": 128,
                                   "maxPositionEmbeddings": 131072}},
        "engine": {"kind": "vllm", "version": "0.11.0"},
        "gpu": {"count": per_node, "product": "NVIDIA-H100-80GB-HBM3"},
        "nodes": nodes,
        "parallelism": {"tensor": tensor, "pipeline": pipeline},
        "context": {"target": 32768},
    })


def test_nodes_defaults_to_one_and_single_node_rule_is_unchanged() -> None:
    spec = kimi(nodes=1, gpu={"count": 16, "product": "NVIDIA-H100-80GB-HBM3"})
    assert spec.nodes == 1
    with pytest.raises(ValidationError, match=r"must equal gpu.count \(8 x 2 x 1 = 16, gpu.count is 8\)"):
        kimi(nodes=1)


@pytest.mark.parametrize(("nodes", "parallelism", "message"), [
    (3, {"tensor": 8, "pipeline": 2}, r"gpu.count x nodes is 8 x 3 = 24"),
    (2, {"tensor": 8}, r"\(8 x 1 x 1 = 8, gpu.count x nodes is 8 x 2 = 16\)"),
    (2, {"tensor": 32}, r"\(32 x 1 x 1 = 32, gpu.count x nodes is 8 x 2 = 16\)"),
], ids=["three-nodes-for-16", "tp-one-node", "tp-too-wide"])
def test_parallelism_must_cover_every_gpu_of_every_node(nodes: int, parallelism: dict[str, int],
                                                        message: str) -> None:
    with pytest.raises(ValidationError,
                       match=re.escape("parallelism: tensor x pipeline x data must equal gpu.count x nodes")):
        kimi(nodes=nodes, parallelism=parallelism)
    with pytest.raises(ValidationError, match=message):
        kimi(nodes=nodes, parallelism=parallelism)


@pytest.mark.parametrize(("nodes", "per_node", "tensor", "pipeline", "tp_nodes", "stages"), [
    (2, 8, 8, 2, 1, 1),
    (2, 8, 16, 1, 2, 0),
    (4, 8, 16, 2, 2, 0),
    (2, 8, 4, 4, 1, 2),
    (1, 8, 8, 1, 1, 1),
], ids=["tp8-pp2", "tp16", "tp16-pp2-4nodes", "tp4-pp4", "one-node"])
def test_group_layout(nodes: int, per_node: int, tensor: int, pipeline: int, tp_nodes: int, stages: int) -> None:
    layout = group_layout(gqa(nodes, per_node, tensor, pipeline))
    assert (layout.tp_nodes, layout.stages_per_node) == (tp_nodes, stages)
    assert layout.world_size == nodes * per_node
    assert layout.tp_crosses_nodes is (tp_nodes > 1)


def test_uneven_tensor_group_is_an_input_error() -> None:
    spec = InferenceServerSpec.model_validate({**gqa(2, 6, 4, 3).model_dump(by_alias=True, exclude_none=True)})
    with pytest.raises(PlanInputError, match=r"spec.parallelism.tensor: 4 neither divides nor is a multiple of "
                                             r"gpu.count 6"):
        group_layout(spec)


# KV bytes per token per GPU, computed by hand from the formulas in budget/kv.py:
#   GQA: layers_on_stage x 2 x max(1, kv_heads // TP) x head_dim x 2 B
#   MLA (Kimi-K2.5, 61 layers): layers_on_stage x (kv_lora_rank 512 + rope 64) x 2 B, replicated on every TP rank
@pytest.mark.parametrize(("nodes", "per_node", "tensor", "pipeline", "expected"), [
    (1, 8, 8, 1, 80 * 2 * 1 * 128 * 2),    # one node, one KV head per rank
    (2, 8, 16, 1, 80 * 2 * 1 * 128 * 2),   # TP 16 > 8 KV heads: each rank holds a replica, no saving
    (2, 8, 8, 2, 40 * 2 * 1 * 128 * 2),    # PP 2 across nodes halves the layers per GPU
    (2, 4, 4, 2, 40 * 2 * 2 * 128 * 2),    # 4 GPUs per node: two KV heads per rank, half the layers
    (4, 8, 8, 4, 20 * 2 * 1 * 128 * 2),    # four stages of 20 layers
    (2, 8, 4, 4, 20 * 2 * 2 * 128 * 2),    # TP 4 x PP 4: two stages per node
], ids=["tp8", "tp16-across-nodes", "tp8-pp2", "tp4-pp2-4gpu-nodes", "tp8-pp4", "tp4-pp4"])
def test_gqa_kv_per_gpu_with_tp_across_nodes_and_pp(nodes: int, per_node: int, tensor: int, pipeline: int,
                                                    expected: int) -> None:
    result, _ = plan_group(gqa(nodes, per_node, tensor, pipeline))
    assert result.kv_bytes_per_token == expected


@pytest.mark.parametrize(("parallelism", "expected"), [
    ({"tensor": 16}, 61 * 576 * 2),
    ({"tensor": 8, "pipeline": 2}, 31 * 576 * 2),   # largest stage: ceil(61 / 2) = 31 layers
    ({"tensor": 4, "pipeline": 4}, 16 * 576 * 2),   # ceil(61 / 4) = 16
], ids=["tp16", "tp8-pp2", "tp4-pp4"])
def test_mla_kv_is_replicated_across_tp_and_split_by_pp(parallelism: dict[str, int], expected: int) -> None:
    result, _ = plan_group(kimi(parallelism=parallelism))
    assert result.kv_bytes_per_token == expected


def test_kimi_2x8_h100_fits_with_weights_split_over_16_gpus() -> None:
    result, layout = plan_group(kimi())
    assert result.fits, result.reasons
    assert result.context_length == 131072
    # the catalog's checkpoint over TP x PP = 16 GPUs, not 8: what makes Kimi-K2.5 fit on 80 GB GPUs
    total = lookup_model("moonshotai/Kimi-K2.5").weights_total_bytes
    assert total is not None
    assert result.per_gpu.weights_bytes == -(-total // 16)
    args = result.engine_args
    assert args[args.index("--tensor-parallel-size") + 1] == "8"
    assert args[args.index("--pipeline-parallel-size") + 1] == "2"
    assert layout.describe() == "2 nodes x 8 GPUs: TP 8 within a node, PP 2, DP 1"
    assert "multi-node group: 2 nodes x 8 GPUs: TP 8 within a node, PP 2, DP 1" in result.reasons


def test_pp_across_nodes_leaves_more_kv_than_tp_across_nodes_for_mla() -> None:
    tp16, _ = plan_group(kimi(parallelism={"tensor": 16}))
    tp8_pp2, _ = plan_group(kimi(parallelism={"tensor": 8, "pipeline": 2}))
    assert tp8_pp2.max_context_length >= tp16.max_context_length
    assert any("spans 2 nodes: every layer all-reduces over the network; tensor 8 x pipeline 2" in r
               for r in tp16.reasons)


def test_single_node_has_no_layout_reasons() -> None:
    assert layout_reasons(group_layout(gqa(1, 8, 8, 1))) == []
