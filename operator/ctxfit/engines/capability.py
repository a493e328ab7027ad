"""The engines' compute-capability rules: their sources and the shared pieces (pure). Each engine's table and rules
are in ``<engine>/capability.py`` (``Engine.capability_problems``); ``budget.capability`` applies them.

- Weight quantization (config.json ``quantization_config.quant_method``, or ``--quantization``): the engine
  refuses a method below its ``get_min_capability()`` ("The quantization method X is not supported for the current
  GPU. Minimum capability: 80. Current capability: 75."; vLLM ``config/vllm.py _verify_quantization``, SGLang
  ``model_loader/loader.py``). ``<engine>.capability.MIN_CAPABILITY`` holds the values read per class in vLLM 0.10.2 /
  0.17.1 / 0.19.0 and SGLang 0.4.3 / 0.4.9 / 0.5.4 / 0.5.10 (``layers/quantization/*.py``). vLLM picks ``awq_marlin`` /
  ``gptq_marlin`` itself only where they run, so a checkpoint's ``awq`` / ``gptq`` needs only the base method's.
- vLLM ``--dtype bfloat16`` below compute capability 8.0 (``platforms/cuda.py check_if_supports_dtype``: "Bfloat16
  is only supported on GPUs with compute capability of at least 8.0"); ``--dtype auto`` falls back to float16 there
  (``config/model.py _resolve_auto_dtype``, present in 0.10.2 - 0.19.0), so only an explicit bfloat16 is refused.
- vLLM sparse MLA (DeepSeek-V3.2 / GLM-5 DSA, ``index_head_dim`` set): the CUDA sparse backends' compute
  capabilities, read in every wheel 0.11.0 - 0.33.0: FLASHMLA_SPARSE 9.x/10.x (0.11 selects it whatever the GPU),
  FLASHINFER_MLA_SPARSE 10.x (0.18+), FLASH_ATTN_MLA_SPARSE 9.x (0.25+), FLASHINFER_MLA_SPARSE_SM90 (0.30+), and
  from 0.24.0 FLASHINFER_MLA_SPARSE_SM120 12.x; none for 8.x ("No valid attention backend found ...
  FLASHMLA_SPARSE: [compute capability not supported]", vLLM issues 31480 on RTX PRO 6000, 40851 on A800).
- SGLang below compute capability 7.5: "SGLang only supports sm75 and above." (``model_runner.py``, 0.4.3 -
  0.5.15 wheels).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ctxfit.vocab.inputs import PlanInputs

Version = tuple[int, int, int]
Ranges = tuple[tuple[Version, Version, int], ...]
"""(first, last verified release, minimum compute capability x 10), per rule."""


def minimum(ranges: Ranges, version: Version) -> int | None:
    """The verified minimum for ``version``; between two verified ranges the lower of their minimums."""
    for first, last, value in ranges:
        if first <= version <= last:
            return value
    inside = [v for first, _last, v in ranges if first <= version]
    after = [v for first, _last, v in ranges if first > version]
    if inside and after:
        return min(min(inside), min(after))
    return None


def cc_text(cc: int) -> str:
    """``75`` -> ``"7.5"``."""
    return f"{cc // 10}.{cc % 10}"


def capability_of(inputs: PlanInputs) -> tuple[int, int, str] | None:
    """(major, minor, the GPU in words) of the plan's GPU; None when its compute capability is unknown."""
    if inputs.compute_capability is None:
        return None
    major, minor = inputs.compute_capability
    gpu = f"{inputs.gpu.product if inputs.gpu else inputs.spec.gpu.product or 'this GPU'} (compute capability " \
          f"{major}.{minor})"
    return major, minor, gpu


def quantization_problem(inputs: PlanInputs, table: Mapping[str, Ranges], cc: int, gpu: str) -> str | None:
    """The sentence when the checkpoint's weight quantization needs a newer GPU than ``cc`` (x 10) in this engine
    version (``table``: the engine's minimum per method), else None."""
    method = inputs.quantization
    version = inputs.engine_version
    ranges = table.get(method or "")
    floor = minimum(ranges, version) if ranges else None
    if floor is None or cc >= floor:
        return None
    return (f"the {method} weight quantization needs compute capability {cc_text(floor)} or newer in "
            f"{inputs.spec.engine.kind.value} {'.'.join(map(str, version))}; {gpu} cannot run this checkpoint: use a "
            f"GPU of compute capability {cc_text(floor)}+ or a checkpoint in another format")


def engine_problems(inputs: PlanInputs, table: Mapping[str, Ranges]) -> tuple[list[str], tuple[int, int, str]] | None:
    """The start both engines' ``capability_problems`` share: None when the GPU's compute capability is unknown,
    else (the quantization sentence in a list, or [], from ``table``; (major, capability x 10, the GPU in words))."""
    known = capability_of(inputs)
    if known is None:
        return None
    major, minor, gpu = known
    cc = major * 10 + minor
    quantization = quantization_problem(inputs, table, cc, gpu)
    return ([] if quantization is None else [quantization]), (major, cc, gpu)
