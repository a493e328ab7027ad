"""Calibration applied to a plan: the learned driver reserve and the KV correction of the table's most specific
entry (pure; ``budget.planner`` calls ``apply_learned_reserve`` and ``calibrate_engine``; the rule is
``budget.calibrate``)."""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, Any, cast

from ctxfit.api import EffectiveConfig, GiB
from ctxfit.engines import BudgetTerms, Engine, get_engine

from .calibrate import CalibrationTable, Correction
from .samples import CalibrationKey, calibration_key

if TYPE_CHECKING:
    from ctxfit.vocab.inputs import PlanInputs


class CalibratedEngine:
    """An ``Engine`` whose budget moves ``offset_bytes`` from "other" into the KV pool (negative: out of it).

    Every other method is the wrapped engine's. The usable total is unchanged, so the sum
    ``usable = weights + activation + cuda_graph + other + kv_cache`` still holds.
    """

    def __init__(self, inner: Engine, correction_: Correction) -> None:
        self._inner = inner
        self.correction = correction_

    def budget(self, inputs: PlanInputs, effective: EffectiveConfig) -> BudgetTerms:
        """The wrapped engine's terms with the calibration offset applied to the KV pool."""
        terms = self._inner.budget(inputs, effective)
        offset = self.correction.offset_bytes
        shift = f"{-offset / GiB:+.2f} GiB calibration ({self.correction.samples} observed start-ups)"
        notes = [f"{n}; {shift}" if n.startswith("other:") else n for n in terms.notes]
        if not any(n.startswith("other:") for n in terms.notes):
            notes.append(f"other: {shift}")
        return dataclasses.replace(terms, kv_cache_bytes=terms.kv_cache_bytes + offset,
                                   other_bytes=terms.other_bytes - offset, notes=tuple(notes))

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)


def apply_learned_reserve(inputs: PlanInputs, table: CalibrationTable | None) -> tuple[PlanInputs, str | None]:
    """``inputs`` with the CUDA-visible total from the product's learned driver reserve (``driver_reserve``), and
    the sentence for the reasons; unchanged (None) without a learned reserve or a product."""
    product = inputs.gpu.product if inputs.gpu else inputs.spec.gpu.product
    learned = table.driver_reserve(product) if table is not None and product else None
    if learned is None:
        return inputs, None
    reserve, n = learned
    catalog = inputs.gpu_total_bytes - inputs.cuda_total_bytes
    moved = dataclasses.replace(inputs, cuda_total_bytes=inputs.gpu_total_bytes - reserve)
    return moved, (f"driver reserve of {product} learned from {n} start-up{'s' if n != 1 else ''}: "
                   f"{reserve / 2**20:.0f} MiB (catalog {catalog / 2**20:.0f} MiB), CUDA total "
                   f"{moved.cuda_total_bytes / GiB:.2f} GiB")




def calibrate_engine(engine: Engine, inputs: PlanInputs,
                     table: CalibrationTable | None) -> tuple[Engine, CalibrationKey, Correction | None]:
    """``engine`` wrapped with the table's most specific correction for ``inputs`` (unchanged without one)."""
    key = calibration_key(inputs)
    found = table.lookup(key, get_engine(inputs.spec.engine.kind).display_name) if table is not None else None
    if found is None or found.offset_bytes == 0:
        return engine, key, found
    return cast(Engine, CalibratedEngine(engine, found)), key, found
