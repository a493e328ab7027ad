"""The InferenceServer API: pydantic v2 models (spec, effective configuration, status) and quantities."""

from .effective import WIRE_KEYS, EffectiveConfig
from .quantity import GiB, KiB, MiB, TiB, bytes_to_quantity, quantity_to_bytes
from .spec import (
    API_GROUP,
    API_VERSION,
    KIND,
    KV_CACHE_DTYPES,
    PLURAL,
    Architecture,
    AttentionKind,
    BatchingSpec,
    ContextSpec,
    EngineKind,
    EngineSpec,
    GPUSpec,
    InferenceServer,
    InferenceServerSpec,
    MemorySpec,
    ModelSpec,
    Parallelism,
    ResourcesSpec,
)

__all__ = [
    "API_GROUP", "API_VERSION", "KIND", "KV_CACHE_DTYPES", "PLURAL", "WIRE_KEYS",
    "Architecture", "AttentionKind", "BatchingSpec", "ContextSpec", "EffectiveConfig", "EngineKind",
    "EngineSpec", "GPUSpec", "GiB", "InferenceServer", "InferenceServerSpec", "KiB", "MemorySpec",
    "MiB", "ModelSpec", "Parallelism", "ResourcesSpec", "TiB", "bytes_to_quantity", "quantity_to_bytes",
]
