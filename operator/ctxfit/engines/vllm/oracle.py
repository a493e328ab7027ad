"""Whether vLLM 0.8-0.10 runs its V1 engine or falls back to V0 on its own, for the configurations ctxfit renders.

vLLM 0.8.0 made V1 the default; up to 0.10.x ``engine/arg_utils.py::EngineArgs._is_v1_supported_oracle`` still
checks each start-up and, with ``VLLM_USE_V1`` unset, calls ``_raise_or_fallback`` ("... is not supported by the
V1 Engine. Falling back to V0") for an unsupported feature; with ``VLLM_USE_V1=1`` it raises instead (a failed
start), with ``VLLM_USE_V1=0`` V0 runs anyway. 0.11.0 removed V0. The V0 engine profiles and budgets memory by
other rules (``memory.Family.V0``), so the planner must know which engine a plan will get. Two checks depend on
what ctxfit plans (read in the 0.8.0-0.8.5, 0.9.0, 0.9.2, 0.10.0, 0.10.1.1 and 0.10.2 wheels):

- "Need at least Ampere for now (FA support required)": compute capability below 8.0 (T4, V100, RTX 20xx)
  falls back ("Compute Capability < 8.0").
- "No Fp8 KV cache so far": a ``--kv-cache-dtype`` other than ``auto`` falls back ("--kv-cache-dtype") unless
  the V1 attention backend takes it:
  - 0.8.0, 0.8.1: never.
  - 0.8.2-0.9.x: fp8 with FlashAttention (``VLLM_ATTENTION_BACKEND`` unset or ``FLASH_ATTN_VLLM_V1``) and
    ``fa_utils.flash_attn_supports_fp8`` (FlashAttention 3, which ``get_flash_attn_version`` picks on
    capability 9.x unless ``VLLM_FLASH_ATTN_VERSION=2``): Hopper only.
  - 0.10.0, 0.10.1: ``platforms/cuda.py::is_kv_cache_dtype_supported`` adds capability 10.0 (B200).
  - 0.10.2: the same function takes the model: MLA models run FlashMLA (CUTLASS MLA on 10.0) by default, which
    take any KV dtype; otherwise 10.0 takes any, FlashAttention takes fp8 on Hopper (and any non-fp8 dtype),
    ``FLASHINFER`` any, ``TRITON_ATTN_VLLM_V1`` fp8 from capability 8.9 (``supports_fp8``).

An unknown GPU (no compute capability) is assumed to keep V1 where the rule depends on the GPU.
"""

from __future__ import annotations

from collections.abc import Mapping

V1_ORACLE_VERSIONS = ((0, 8, 0), (0, 11, 0))
"""Releases whose ``_is_v1_supported_oracle`` picks V0 or V1 per start-up (V1 became the default in 0.8.0;
0.11.0 removed V0)."""
V1_MINIMUM_CAPABILITY = (8, 0)
""""Need at least Ampere for now (FA support required)" (0.8.0-0.10.2)."""
V1_ENV = "VLLM_USE_V1"
ATTENTION_BACKEND_ENV = "VLLM_ATTENTION_BACKEND"
FLASH_ATTN_VERSION_ENV = "VLLM_FLASH_ATTN_VERSION"
FLASH_ATTN_V1 = "FLASH_ATTN_VLLM_V1"
FP8_KV_ON_HOPPER_SINCE = (0, 8, 2)
"""0.8.0 and 0.8.1 fall back for any KV dtype other than auto; 0.8.2 lets FlashAttention 3 take fp8."""
SM100_KV_SINCE = (0, 10, 0)
"""``CudaPlatform.is_kv_cache_dtype_supported`` (0.10.0): "if cls.is_device_capability(100): supported = True"."""
BACKEND_KV_RULES_SINCE = (0, 10, 2)
"""``is_kv_cache_dtype_supported(kv_cache_dtype, model_config)`` (0.10.2): per attention backend, MLA aware."""
SM100 = (10, 0)
HOPPER_MAJOR = 9
NATIVE_FP8_CAPABILITY = (8, 9)
"""``CudaPlatformBase.supports_fp8``: ``has_device_capability(89)``."""
MLA_FP8_BACKENDS = frozenset({"FLASHMLA", "CUTLASS_MLA"})


def _flash_attn_takes_fp8(cc: tuple[int, int], env: Mapping[str, str]) -> bool:
    """``fa_utils.flash_attn_supports_fp8``: FlashAttention 3 (the default on 9.x) on capability 9.x."""
    return cc[0] == HOPPER_MAJOR and env.get(FLASH_ATTN_VERSION_ENV) != "2"


def kv_dtype_runs_on_v1(
    version: tuple[int, int, int],
    kv_cache_dtype: str,
    compute_capability: tuple[int, int] | None,
    env: Mapping[str, str],
    *,
    mla: bool = False,
) -> bool:
    """Whether ``_is_v1_supported_oracle`` keeps V1 for ``--kv-cache-dtype kv_cache_dtype`` (module docstring).

    Args:
        version: the vLLM release (0.8.0-0.10.x; other releases are not asked).
        kv_cache_dtype: the rendered ``--kv-cache-dtype`` (``auto`` always keeps V1).
        compute_capability: (major, minor), None when unknown (V1 assumed where the GPU decides).
        env: the container's literal environment (``VLLM_ATTENTION_BACKEND``, ``VLLM_FLASH_ATTN_VERSION``).
        mla: the model uses multi-head latent attention (0.10.2's default MLA backends take every dtype).
    """
    if kv_cache_dtype == "auto":
        return True
    if version < FP8_KV_ON_HOPPER_SINCE:
        return False
    fp8 = kv_cache_dtype.startswith("fp8")
    backend = env.get(ATTENTION_BACKEND_ENV)
    if version < BACKEND_KV_RULES_SINCE:
        if version >= SM100_KV_SINCE and (compute_capability is None or compute_capability == SM100):
            return True
        will_use_fa = backend is None or backend == FLASH_ATTN_V1
        return fp8 and will_use_fa and (compute_capability is None or _flash_attn_takes_fp8(compute_capability, env))
    if mla:
        chosen = backend or ("CUTLASS_MLA" if compute_capability == SM100 else "FLASHMLA")
        return chosen in MLA_FP8_BACKENDS or not fp8
    if compute_capability is None or compute_capability == SM100:
        return True
    chosen = backend or FLASH_ATTN_V1
    if chosen == FLASH_ATTN_V1:
        return not fp8 or _flash_attn_takes_fp8(compute_capability, env)
    if chosen == "FLASHINFER":
        return True
    if chosen == "TRITON_ATTN_VLLM_V1":
        return compute_capability >= NATIVE_FP8_CAPABILITY
    return False


def v1_falls_back_to_v0(
    version: tuple[int, int, int],
    env: Mapping[str, str],
    compute_capability: tuple[int, int] | None,
    kv_cache_dtype: str = "auto",
    *,
    mla: bool = False,
) -> bool:
    """Whether vLLM 0.8-0.10 runs the V0 engine on its own (``VLLM_USE_V1`` unset): a GPU below compute capability
    8.0, or a KV dtype the V1 attention backend does not take (``kv_dtype_runs_on_v1``). vLLM logs "Compute
    Capability < 8.0 is not supported by the V1 Engine. Falling back to V0." or "--kv-cache-dtype is not supported
    by the V1 Engine. Falling back to V0." then; with ``VLLM_USE_V1=1`` it raises instead, with ``=0`` V0 runs
    anyway (neither is a fallback).

    Args:
        version: the vLLM release.
        env: the container's literal environment.
        compute_capability: (major, minor) of the GPU, None when unknown (no GPU-dependent fallback assumed).
        kv_cache_dtype: the rendered ``--kv-cache-dtype``.
        mla: the model uses multi-head latent attention.
    """
    if not V1_ORACLE_VERSIONS[0] <= version < V1_ORACLE_VERSIONS[1] or V1_ENV in env:
        return False
    if compute_capability is not None and compute_capability < V1_MINIMUM_CAPABILITY:
        return True
    return not kv_dtype_runs_on_v1(version, kv_cache_dtype, compute_capability, env, mla=mla)
