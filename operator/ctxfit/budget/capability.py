"""Can this GPU run the model at all? The engine's compute-capability rules, checked before anything starts (pure).

Each rule is the engine's own, read in its wheels (``ctxfit.engines.capability`` and ``<engine>/capability.py``); a
plan that breaks one is refused as a verdict (``Plan.fits`` False, ``budget.verdict``) naming the capability and what
would run, the way the engine would fail at start-up (``UnsupportedGPU`` in ``ctxfit.recovery``). A rule is applied
only on the releases it was read in and the ones between them; elsewhere ctxfit lets the engine decide (an unknown
rule never refuses a plan).
"""

from __future__ import annotations

from ctxfit.engines import get_engine
from ctxfit.vocab.inputs import PlanInputs


def capability_problems(inputs: PlanInputs) -> list[str]:
    """Sentences for each compute-capability rule this GPU breaks (``Engine.capability_problems``), [] when none does
    or the GPU's capability is unknown."""
    if inputs.compute_capability is None:
        return []
    return get_engine(inputs.spec.engine.kind).capability_problems(inputs)
