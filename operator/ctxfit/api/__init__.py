"""The InferenceServer API: pydantic v2 models (spec, effective configuration, status) and quantities."""

from .effective import WIRE_KEYS, EffectiveConfig
from .lora import ADAPTER_ROOT, LoRAAdapter, LoRASpec
from .model import KV_CACHE_DTYPES, Architecture, AttentionKind, ModelSpec
from .quantity import GiB, KiB, MiB, TiB, bytes_to_quantity, quantity_to_bytes
from .spec import (
    API_GROUP,
    API_VERSION,
    KIND,
    PLURAL,
    BatchingSpec,
    ContextSpec,
    EngineKind,
    EngineSpec,
    GPUSpec,
    InferenceServer,
    InferenceServerSpec,
    MemorySpec,
    Parallelism,
    ResourcesSpec,
)
from .speculative import DRAFT_ROOT, DraftModel, SpeculativeMethod, SpeculativeSpec

__all__ = [
    "ADAPTER_ROOT",
    "API_GROUP",
    "API_VERSION",
    "DRAFT_ROOT",
    "KIND",
    "KV_CACHE_DTYPES",
    "PLURAL",
    "WIRE_KEYS",
    "Architecture",
    "AttentionKind",
    "BatchingSpec",
    "ContextSpec",
    "DraftModel",
    "EffectiveConfig",
    "EngineKind",
    "EngineSpec",
    "GPUSpec",
    "GiB",
    "InferenceServer",
    "InferenceServerSpec",
    "KiB",
    "LoRAAdapter",
    "LoRASpec",
    "MemorySpec",
    "MiB",
    "ModelSpec",
    "Parallelism",
    "ResourcesSpec",
    "SpeculativeMethod",
    "SpeculativeSpec",
    "TiB",
    "bytes_to_quantity",
    "quantity_to_bytes",
]
