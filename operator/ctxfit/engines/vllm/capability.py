"""vLLM's compute-capability rules (``ctxfit.engines.capability`` gives each rule's source): weight quantization per
method, an explicit ``--dtype bfloat16`` below 8.0, the sparse-MLA (DSA) kernels."""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..capability import Ranges, Version, engine_problems

if TYPE_CHECKING:
    from ctxfit.vocab.inputs import PlanInputs

MIN_CAPABILITY: dict[str, Ranges] = {
    "fp8": (((0, 4, 0), (0, 10, 99), 80), ((0, 17, 0), (0, 19, 99), 75)),
    "fbgemm_fp8": (((0, 10, 0), (0, 19, 99), 80),),
    "awq": (((0, 10, 0), (0, 19, 99), 75),),
    "gptq": (((0, 10, 0), (0, 19, 99), 60),),
    "bitsandbytes": (((0, 10, 0), (0, 19, 99), 70),),
    "bitsandbytes-8bit": (((0, 10, 0), (0, 19, 99), 70),),
    "mxfp4": (((0, 10, 0), (0, 19, 99), 80),),
    "gguf": (((0, 10, 0), (0, 19, 99), 60),),
    "experts_int8": (((0, 10, 0), (0, 19, 99), 80),),
}
"""(first, last verified release, minimum compute capability x 10) per weight quantization method."""
SPARSE_MLA: tuple[tuple[Version, Version, tuple[int, ...]], ...] = (
    ((0, 11, 0), (0, 23, 99), (9, 10)),
    ((0, 24, 0), (0, 33, 99), (9, 10, 12)),
)
"""(first, last release read, compute-capability majors some CUDA sparse-MLA backend runs on)."""
BF16_MIN = 80


def _explicit_dtype(args: list[str]) -> str | None:
    for i, arg in enumerate(args):
        if arg == "--dtype" and i + 1 < len(args):
            return args[i + 1].lower()
        if arg.startswith("--dtype="):
            return arg.split("=", 1)[1].lower()
    return None


def capability_problems(inputs: PlanInputs) -> list[str]:
    """Sentences for each vLLM rule this GPU breaks, [] when none does or its capability is unknown."""
    start = engine_problems(inputs, MIN_CAPABILITY)
    if start is None:
        return []
    out, (major, cc, gpu) = start
    version = inputs.engine_version
    if cc < BF16_MIN and _explicit_dtype(inputs.spec.engine.args) in ("bfloat16", "bf16"):
        out.append(f"engine.args sets --dtype bfloat16, which vLLM runs only on compute capability 8.0 or newer, "
                   f"not on {gpu}: use --dtype half or a newer GPU")
    majors = next((m for first, last, m in SPARSE_MLA if first <= version <= last), None)
    if inputs.architecture.index_head_dim and majors is not None and major not in majors:
        shown = ", ".join(f"{m}.x" for m in majors)
        out.append(f"vLLM {'.'.join(map(str, version))} has sparse-MLA (DSA) attention kernels only for compute "
                   f"capability {shown}, not for {gpu}")
    return out
