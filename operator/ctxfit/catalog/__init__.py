"""Catalogs: GPU products (by GFD label) and model architectures, loaded from YAML data with sources.

``lookup_gpu(product)`` and ``lookup_model(name)`` return frozen entries or None; the YAML files beside
this module are the data (each entry names where its numbers come from).
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache
from importlib import resources
from typing import Any

import yaml

from ctxfit.api import Architecture, MiB

from .hybrid import HybridState as HybridState
from .hybrid import hybrid_from_catalog


@dataclass(frozen=True)
class GPUProduct:
    """One GPU SKU.

    Attributes:
        product: the GFD ``nvidia.com/gpu.product`` label value.
        nvml_mib: NVML / GFD ``nvidia.com/gpu.memory`` total, MiB.
        compute_capability: (major, minor).
        driver_reserve_mib: NVML total minus the CUDA-visible total, MiB.
        source: where the numbers come from.
    """

    product: str
    nvml_mib: int
    compute_capability: tuple[int, int]
    driver_reserve_mib: int
    source: str

    @property
    def total_bytes(self) -> int:
        """NVML total in bytes."""
        return self.nvml_mib * MiB


@dataclass(frozen=True)
class MoE:
    """Mixture-of-experts sizes (config.json n_routed_experts, num_experts_per_tok, moe_intermediate_size)."""

    experts: int
    top_k: int
    intermediate_size: int
    shared_intermediate_size: int = 0


@dataclass(frozen=True)
class ModelEntry:
    """A catalog model: its architecture plus what the overhead and weight estimates need.

    Attributes:
        name: Hugging Face repo id.
        architecture: attention geometry (validated ``Architecture``).
        vocab_size, hidden_size, intermediate_size: config.json fields (activation estimate).
        moe: experts/top-k/intermediate, or None for dense models.
        params_billion: total parameters (1e9).
        bytes_per_param: checkpoint bytes per parameter (2 for bf16, 1 for fp8), when no checkpoint_bytes.
        checkpoint_bytes: published checkpoint size, bytes, when known.
        multimodal: True when the engine profiles a vision encoder at start-up.
        source: where the numbers come from.
        hybrid: recurrent-state geometry of a hybrid (Mamba / Gated DeltaNet) model, else None.
    """

    name: str
    architecture: Architecture
    vocab_size: int | None
    hidden_size: int | None
    intermediate_size: int | None
    moe: MoE | None
    params_billion: float | None
    bytes_per_param: float | None
    checkpoint_bytes: int | None
    multimodal: bool
    source: str
    hybrid: HybridState | None = None

    @property
    def weights_total_bytes(self) -> int | None:
        """Checkpoint bytes (published, or params x bytes/param), or None when unknown."""
        if self.checkpoint_bytes is not None:
            return self.checkpoint_bytes
        if self.params_billion is not None and self.bytes_per_param is not None:
            return int(self.params_billion * 1e9 * self.bytes_per_param)
        return None


def _load_yaml(name: str) -> dict[str, Any]:
    text = resources.files(__package__).joinpath(name).read_text(encoding="utf-8")
    data = yaml.safe_load(text)
    assert isinstance(data, dict)
    return data


@cache
def _gpu_index() -> dict[str, GPUProduct]:
    data = _load_yaml("gpus.yaml")
    default_reserve = int(data["default_driver_reserve_mib"])
    index: dict[str, GPUProduct] = {}
    for raw in data["gpus"]:
        major, minor = (int(x) for x in str(raw["cc"]).split("."))
        entry = GPUProduct(
            product=raw["product"],
            nvml_mib=int(raw["nvmlMiB"]),
            compute_capability=(major, minor),
            driver_reserve_mib=int(raw.get("driverReserveMiB", default_reserve)),
            source=str(raw["source"]),
        )
        for key in [raw["product"], *raw.get("aliases", [])]:
            index[key.lower()] = entry
    return index


@cache
def _model_index() -> dict[str, ModelEntry]:
    index: dict[str, ModelEntry] = {}
    for raw in _load_yaml("models.yaml")["models"]:
        moe_raw = raw.get("moe")
        entry = ModelEntry(
            name=raw["name"],
            architecture=Architecture.model_validate(raw["architecture"]),
            vocab_size=raw.get("vocabSize"),
            hidden_size=raw.get("hiddenSize"),
            intermediate_size=raw.get("intermediateSize"),
            moe=MoE(
                experts=moe_raw["experts"],
                top_k=moe_raw["topK"],
                intermediate_size=moe_raw["intermediateSize"],
                shared_intermediate_size=moe_raw.get("sharedIntermediateSize", 0),
            )
            if moe_raw
            else None,
            params_billion=raw.get("paramsBillion"),
            bytes_per_param=raw.get("bytesPerParam"),
            checkpoint_bytes=raw.get("checkpointBytes"),
            multimodal=bool(raw.get("multimodal", False)),
            source=str(raw["source"]),
            hybrid=hybrid_from_catalog(raw["hybrid"]) if raw.get("hybrid") else None,
        )
        for key in [raw["name"], *raw.get("aliases", [])]:
            index[key.lower()] = entry
    return index


def lookup_gpu(product: str | None) -> GPUProduct | None:
    """The catalog entry for a GFD product label (case-insensitive, aliases included), or None."""
    if not product:
        return None
    return _gpu_index().get(product.strip().lower())


def lookup_model(name: str) -> ModelEntry | None:
    """The catalog entry for a Hugging Face repo id (case-insensitive, aliases included), or None."""
    return _model_index().get(name.strip().lower())


def gpu_products() -> list[GPUProduct]:
    """Every distinct GPU entry, in file order."""
    seen: dict[str, GPUProduct] = {}
    for entry in _gpu_index().values():
        seen.setdefault(entry.product, entry)
    return list(seen.values())


def models() -> list[ModelEntry]:
    """Every distinct model entry, in file order."""
    seen: dict[str, ModelEntry] = {}
    for entry in _model_index().values():
        seen.setdefault(entry.name, entry)
    return list(seen.values())


def preload() -> None:
    """Parse both catalog files now. The operator calls this at start-up: the indexes are cached without a lock,
    so the first passes, run by several threads at once, would each parse the YAML again."""
    _model_index()
    _gpu_index()
