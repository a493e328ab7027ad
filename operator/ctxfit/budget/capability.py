"""Can this GPU run the model at all? The engines' compute-capability rules, checked before anything starts (pure).

Each rule is the engine's own, read in its wheels; a plan that breaks one is refused as a verdict (``Plan.fits``
False, ``budget.verdict``) naming the capability and what would run, the way the engine would fail at start-up
(``UnsupportedGPU`` in ``ctxfit.recovery``). A rule is applied only on the releases it was read in and the ones
between them; elsewhere ctxfit lets the engine decide (an unknown rule never refuses a plan).

- Weight quantization (config.json ``quantization_config.quant_method``, or ``--quantization``): the engine
  refuses a method below its ``get_min_capability()`` ("The quantization method X is not supported for the current
  GPU. Minimum capability: 80. Current capability: 75."; vLLM ``config/vllm.py _verify_quantization``, SGLang
  ``model_loader/loader.py``). ``MIN_CAPABILITY`` holds the values read per class in vLLM 0.10.2 / 0.17.1 /
  0.19.0 and SGLang 0.4.3 / 0.4.9 / 0.5.4 / 0.5.10 (``layers/quantization/*.py``). vLLM picks ``awq_marlin`` /
  ``gptq_marlin`` itself only where they run, so a checkpoint's ``awq`` / ``gptq`` needs only the base method's.
- vLLM ``--dtype bfloat16`` below compute capability 8.0 (``platforms/cuda.py check_if_supports_dtype``: "Bfloat16
  is only supported on GPUs with compute capability of at least 8.0"); ``--dtype auto`` falls back to float16 there
  (``config/model.py _resolve_auto_dtype``, present in 0.10.2 - 0.19.0), so only an explicit bfloat16 is refused.
- vLLM sparse MLA (DeepSeek-V3.2 / GLM-5 DSA, ``index_head_dim`` set): the CUDA sparse backends' compute
  capabilities, read in every wheel 0.11.0 - 0.33.0: FLASHMLA_SPARSE 9.x/10.x (0.11 selects it whatever the GPU),
  FLASHINFER_MLA_SPARSE 10.x (0.18+), FLASH_ATTN_MLA_SPARSE 9.x (0.25+), FLASHINFER_MLA_SPARSE_SM90 (0.30+), and
  from 0.24.0 FLASHINFER_MLA_SPARSE_SM120 12.x; none for 8.x ("No valid attention backend found ...
  FLASHMLA_SPARSE: [compute capability not supported]", vLLM issue 31480 on RTX PRO 6000, issue 40851 on A800).
- SGLang below compute capability 7.5: "SGLang only supports sm75 and above." (``model_runner.py``, 0.4.3 -
  0.5.15 wheels).
"""

from __future__ import annotations

from ctxfit.api import EngineKind
from ctxfit.vocab.inputs import PlanInputs

Version = tuple[int, int, int]

MIN_CAPABILITY: dict[EngineKind, dict[str, tuple[tuple[Version, Version, int], ...]]] = {
    EngineKind.VLLM: {
        "fp8": (((0, 4, 0), (0, 10, 99), 80), ((0, 17, 0), (0, 19, 99), 75)),
        "fbgemm_fp8": (((0, 10, 0), (0, 19, 99), 80),),
        "awq": (((0, 10, 0), (0, 19, 99), 75),),
        "gptq": (((0, 10, 0), (0, 19, 99), 60),),
        "bitsandbytes": (((0, 10, 0), (0, 19, 99), 70),),
        "bitsandbytes-8bit": (((0, 10, 0), (0, 19, 99), 70),),
        "mxfp4": (((0, 10, 0), (0, 19, 99), 80),),
        "gguf": (((0, 10, 0), (0, 19, 99), 60),),
        "experts_int8": (((0, 10, 0), (0, 19, 99), 80),),
    },
    EngineKind.SGLANG: {
        "fp8": (((0, 4, 3), (0, 5, 4), 80),),
        "awq": (((0, 4, 9), (0, 5, 10), 75),),
        "gptq": (((0, 4, 9), (0, 5, 10), 60),),
        "mxfp4": (((0, 5, 4), (0, 5, 10), 80),),
        "bitsandbytes": (((0, 5, 10), (0, 5, 23), 70),),
        "w8a8_fp8": (((0, 4, 9), (0, 5, 23), 89),),
    },
}
"""(first, last verified release, minimum compute capability x 10) per engine and weight quantization method."""

SGLANG_MIN_CAPABILITY = (((0, 4, 3), (0, 5, 99), 75),)
"""SGLang "only supports sm75 and above" (read in the 0.4.3 - 0.5.15 wheels)."""
VLLM_SPARSE_MLA: tuple[tuple[Version, Version, tuple[int, ...]], ...] = (
    ((0, 11, 0), (0, 23, 99), (9, 10)),
    ((0, 24, 0), (0, 33, 99), (9, 10, 12)),
)
"""(first, last release read, compute-capability majors some CUDA sparse-MLA backend runs on)."""
BF16_MIN = 80


def _minimum(ranges: tuple[tuple[Version, Version, int], ...], version: Version) -> int | None:
    """The verified minimum for ``version``; between two verified ranges the lower of their minimums."""
    for first, last, value in ranges:
        if first <= version <= last:
            return value
    inside = [v for first, _last, v in ranges if first <= version]
    after = [v for first, _last, v in ranges if first > version]
    if inside and after:
        return min(min(inside), min(after))
    return None


def _text(cc: int) -> str:
    return f"{cc // 10}.{cc % 10}"


def _explicit_dtype(args: list[str]) -> str | None:
    for i, arg in enumerate(args):
        if arg == "--dtype" and i + 1 < len(args):
            return args[i + 1].lower()
        if arg.startswith("--dtype="):
            return arg.split("=", 1)[1].lower()
    return None


def capability_problems(inputs: PlanInputs) -> list[str]:
    """Sentences for each compute-capability rule this GPU breaks (see the module doc), [] when none does or the
    GPU's capability is unknown."""
    if inputs.compute_capability is None:
        return []
    major, minor = inputs.compute_capability
    cc = major * 10 + minor
    kind = inputs.spec.engine.kind
    version = inputs.engine_version
    gpu = f"{inputs.gpu.product if inputs.gpu else inputs.spec.gpu.product or 'this GPU'} (compute capability " \
          f"{major}.{minor})"
    out: list[str] = []
    if kind is EngineKind.SGLANG:
        floor = _minimum(SGLANG_MIN_CAPABILITY, version)
        if floor is not None and cc < floor:
            out.append(f"SGLang {'.'.join(map(str, version))} runs only on compute capability {_text(floor)} or "
                       f"newer, not on {gpu}")
    method = inputs.quantization
    ranges = MIN_CAPABILITY[kind].get(method or "")
    floor = _minimum(ranges, version) if ranges else None
    if floor is not None and cc < floor:
        out.append(f"the {method} weight quantization needs compute capability {_text(floor)} or newer in "
                   f"{kind.value} {'.'.join(map(str, version))}; {gpu} cannot run this checkpoint: use a GPU of "
                   f"compute capability {_text(floor)}+ or a checkpoint in another format")
    if kind is EngineKind.VLLM:
        if cc < BF16_MIN and _explicit_dtype(inputs.spec.engine.args) in ("bfloat16", "bf16"):
            out.append(f"engine.args sets --dtype bfloat16, which vLLM runs only on compute capability 8.0 or newer, "
                       f"not on {gpu}: use --dtype half or a newer GPU")
        majors = next((m for first, last, m in VLLM_SPARSE_MLA if first <= version <= last), None)
        if inputs.architecture.index_head_dim and majors is not None and major not in majors:
            shown = ", ".join(f"{m}.x" for m in majors)
            out.append(f"vLLM {'.'.join(map(str, version))} has sparse-MLA (DSA) attention kernels only for compute "
                       f"capability {shown}, not for {gpu}")
    return out
