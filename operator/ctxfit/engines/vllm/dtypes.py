"""Which KV-cache dtype vLLM will actually run with (docs/engine-memory.md section E, per version).

Rules, each from the wheels' attention backends:
- fp8 (e4m3) needs native fp8 (SM 8.9+): Triton ``fp8e4nv`` is missing on SM 8.0/8.6
  ("type fp8e4nv not supported in this architecture"); fp8_e5m2 still works there.
- MLA + fp8 on SM 12.x: vLLM <= 0.17 has no fp8 MLA path (Triton MLA ``NotImplementedError
  ("TritonMLA V1 with FP8 KV cache not yet supported")``; 0.17 ``supported_kv_cache_dtypes =
  ["auto","bfloat16"]``); 0.18+ supports it (https://github.com/vllm-project/vllm/pull/34597).
- Sparse MLA (DSA indexer) on SM 12.x in 0.33: FLASHINFER_MLA_SPARSE_SM120 forces ``fp8_ds_mla``.
- DeepSeek-V3.2 style (indexer) models with an fp8 request use ``fp8_ds_mla`` (0.11 and 0.17 rewrite).
- ``fp8_ds_mla`` applies only to MLA models with an indexer.
- ``nvfp4`` needs Blackwell (SM 10.0+) [unverified for vLLM; SGLang 0.5.23 requires SM100/SM120].
"""

from __future__ import annotations

from ctxfit.api import Architecture, AttentionKind
from ctxfit.engines.base import KVDtypeDecision

FP8_E4M3 = frozenset({"fp8", "fp8_e4m3"})
SPARSE_MLA_SM120_FORCED_SINCE = (0, 33, 0)
FP8_MLA_SM120_SINCE = (0, 18, 0)


def resolve_kv_dtype(
    requested: str, *, arch: Architecture, cc: tuple[int, int] | None, version: tuple[int, int, int]
) -> KVDtypeDecision:
    """The dtype vLLM ``version`` runs with on compute capability ``cc`` for ``arch``, and why."""
    is_mla = arch.attention is AttentionKind.MLA
    sparse = is_mla and arch.index_head_dim is not None
    if arch.kv_bytes_per_token is not None:
        return KVDtypeDecision(requested)
    if requested == "fp8_ds_mla" and not sparse:
        return KVDtypeDecision("auto", "fp8_ds_mla applies only to sparse-MLA (DSA) models; using auto (16-bit)")
    if cc is not None and cc[0] == 12 and sparse and version >= SPARSE_MLA_SM120_FORCED_SINCE:
        if requested != "fp8_ds_mla":
            return KVDtypeDecision(
                "fp8_ds_mla", f"vLLM {'.'.join(map(str, version))} forces fp8_ds_mla for sparse MLA on SM120"
            )
        return KVDtypeDecision(requested)
    if requested == "nvfp4" and cc is not None and cc < (10, 0):
        return KVDtypeDecision("auto", f"nvfp4 KV cache needs Blackwell (SM 10.0+); this GPU is SM {cc[0]}.{cc[1]}")
    if requested in FP8_E4M3 or requested == "fp8_e5m2":
        if requested in FP8_E4M3 and cc is not None and cc < (8, 9):
            return KVDtypeDecision(
                "auto", f"FP8 (e4m3) KV cache needs SM 8.9+ (fp8e4nv); this GPU is SM {cc[0]}.{cc[1]}: using auto"
            )
        if is_mla and cc is not None and cc[0] == 12 and version < FP8_MLA_SM120_SINCE:
            return KVDtypeDecision(
                "auto",
                f"vLLM {'.'.join(map(str, version))} has no FP8 MLA KV cache on SM120 (needs >= 0.18): using auto",
            )
        if sparse and requested in FP8_E4M3:
            return KVDtypeDecision("fp8_ds_mla", "vLLM stores an fp8 sparse-MLA cache as fp8_ds_mla (656 B/layer)")
    return KVDtypeDecision(requested)
