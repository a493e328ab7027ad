"""SGLang's compute-capability rules (``ctxfit.engines.capability`` gives each rule's source): its sm75 floor and
weight quantization per method."""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..capability import Ranges, cc_text, engine_problems, minimum

if TYPE_CHECKING:
    from ctxfit.vocab.inputs import PlanInputs

MIN_CAPABILITY: dict[str, Ranges] = {
    "fp8": (((0, 4, 3), (0, 5, 4), 80),),
    "awq": (((0, 4, 9), (0, 5, 10), 75),),
    "gptq": (((0, 4, 9), (0, 5, 10), 60),),
    "mxfp4": (((0, 5, 4), (0, 5, 10), 80),),
    "bitsandbytes": (((0, 5, 10), (0, 5, 23), 70),),
    "w8a8_fp8": (((0, 4, 9), (0, 5, 23), 89),),
}
"""(first, last verified release, minimum compute capability x 10) per weight quantization method."""
ENGINE_MIN_CAPABILITY: Ranges = (((0, 4, 3), (0, 5, 99), 75),)
"""SGLang "only supports sm75 and above" (read in the 0.4.3 - 0.5.15 wheels)."""


def capability_problems(inputs: PlanInputs) -> list[str]:
    """Sentences for each SGLang rule this GPU breaks, [] when none does or its capability is unknown."""
    start = engine_problems(inputs, MIN_CAPABILITY)
    if start is None:
        return []
    quantization, (_major, cc, gpu) = start
    version = inputs.engine_version
    out: list[str] = []
    floor = minimum(ENGINE_MIN_CAPABILITY, version)
    if floor is not None and cc < floor:
        out.append(f"SGLang {'.'.join(map(str, version))} runs only on compute capability {cc_text(floor)} or "
                   f"newer, not on {gpu}")
    return out + quantization
