"""Catalog data: every entry has a source; GFD numbers and CUDA-visible totals match measured logs."""

from __future__ import annotations

import pytest
from ctxfit.api import GiB, MiB
from ctxfit.catalog import gpu_products, lookup_gpu, lookup_model, models

REQUIRED_GPUS = [
    "NVIDIA-H100-80GB-HBM3",
    "NVIDIA-H100-PCIe",
    "NVIDIA-H100-NVL",
    "NVIDIA-H200",
    "NVIDIA-B200",
    "NVIDIA-RTX-PRO-6000-Blackwell-Server-Edition",
    "NVIDIA-RTX-PRO-6000-Blackwell-Workstation-Edition",
    "NVIDIA-RTX-PRO-6000-Blackwell-Max-Q-Workstation-Edition",
    "NVIDIA-A100-SXM4-40GB",
    "NVIDIA-A100-SXM4-80GB",
    "NVIDIA-L40S",
    "NVIDIA-L40",
    "NVIDIA-L4",
    "NVIDIA-A10",
    "NVIDIA-A10G",
    "NVIDIA-GeForce-RTX-3090",
    "NVIDIA-GeForce-RTX-4090",
    "NVIDIA-GeForce-RTX-5090",
]
REQUIRED_MODELS = [
    "moonshotai/Kimi-K2.5",
    "moonshotai/Kimi-K2-Instruct",
    "deepseek-ai/DeepSeek-V3",
    "deepseek-ai/DeepSeek-V3.2-Exp",
    "zai-org/GLM-5",
    "zai-org/GLM-4.6",
    "Qwen/Qwen3-235B-A22B",
    "Qwen/Qwen3-32B",
    "Qwen/Qwen3-8B",
    "meta-llama/Llama-3.1-8B-Instruct",
    "meta-llama/Llama-3.1-70B-Instruct",
    "openai/gpt-oss-120b",
]


@pytest.mark.parametrize("product", REQUIRED_GPUS)
def test_required_gpus_present(product: str) -> None:
    entry = lookup_gpu(product)
    assert entry is not None and entry.source and entry.nvml_mib > 10_000


@pytest.mark.parametrize("name", REQUIRED_MODELS)
def test_required_models_present(name: str) -> None:
    entry = lookup_model(name)
    assert entry is not None and entry.source
    assert entry.architecture.max_position_embeddings
    assert entry.weights_total_bytes


def test_every_entry_has_a_source() -> None:
    assert all(g.source for g in gpu_products())
    assert all(m.source for m in models())


@pytest.mark.parametrize(
    ("product", "cuda_total_gib"),
    [
        ("NVIDIA-H100-80GB-HBM3", 79.19),
        ("NVIDIA-GeForce-RTX-3090", 23.58),
        ("NVIDIA-B200", 178.36),
        ("NVIDIA-A40", 44.43),
    ],
    ids=["h100", "rtx3090", "b200", "a40"],
)
def test_cuda_visible_total_matches_logs(product: str, cuda_total_gib: float) -> None:
    entry = lookup_gpu(product)
    assert entry is not None
    visible = (entry.nvml_mib - entry.driver_reserve_mib) * MiB / GiB
    assert abs(visible - cuda_total_gib) < 0.01


def test_sm120_products() -> None:
    for product in ("NVIDIA-RTX-PRO-6000-Blackwell-Server-Edition", "NVIDIA-GeForce-RTX-5090"):
        entry = lookup_gpu(product)
        assert entry is not None and entry.compute_capability == (12, 0)


def test_lookup_is_case_insensitive_and_knows_aliases() -> None:
    assert lookup_gpu("nvidia-h100-sxm5-80gb") is lookup_gpu("NVIDIA-H100-80GB-HBM3")
    assert lookup_model("MOONSHOTAI/KIMI-K2.5") is not None
    assert lookup_gpu(None) is None and lookup_model("nobody/nothing") is None
