"""Calibration (budget/calibrate.py): the rule's bounds as Hypothesis properties, the fallback order,
idempotent samples, and the planner applying a table (reasons + chosen context)."""

from __future__ import annotations

from typing import Any

import pytest
from ctxfit.api import GiB, InferenceServerSpec
from ctxfit.budget.calibrate import (
    CLIP_BYTES,
    CalibrationKey,
    CalibrationTable,
    Sample,
    correction,
    median_toward_zero,
)
from ctxfit.budget.planner import plan
from hypothesis import given, settings
from hypothesis import strategies as st

residual = st.integers(min_value=-200 * GiB, max_value=200 * GiB)
residuals = st.lists(residual, min_size=0, max_size=30)


@settings(max_examples=400, deadline=None)
@given(residuals)
def test_only_moves_toward_what_was_observed(values: list[int]) -> None:
    c = correction(values)
    m = median_toward_zero(values)
    assert min(0, m) <= c <= max(0, m)
    assert abs(c) < CLIP_BYTES


@settings(max_examples=400, deadline=None)
@given(residuals, residual)
def test_one_outlier_moves_it_a_bounded_amount(values: list[int], outlier: int) -> None:
    assert abs(correction([*values, outlier]) - correction(values)) <= CLIP_BYTES


@settings(max_examples=200, deadline=None)
@given(st.lists(st.integers(min_value=-CLIP_BYTES, max_value=CLIP_BYTES), min_size=3, max_size=25), residual)
def test_agreeing_majority_is_not_flipped_by_one_sample(values: list[int], outlier: int) -> None:
    agreeing = [abs(v) + 1 for v in values]  # all positive: the engine found more than predicted
    assert correction([*agreeing, outlier]) >= 0


@settings(max_examples=200, deadline=None)
@given(residuals)
def test_order_does_not_matter(values: list[int]) -> None:
    assert correction(values) == correction(list(reversed(values)))


def _key(gpu: str = "NVIDIA-H100-80GB-HBM3", tp: int = 1, pp: int = 1) -> CalibrationKey:
    return CalibrationKey("vllm", "0.19", gpu, tp, pp)


def _sample(i: int, gib: float) -> Sample:
    return Sample(f"uid-{i}/1", f"ns/s{i}", int(gib * GiB), 0, 0, "2026-01-01T00:00:00Z")


def test_samples_are_exactly_once_by_id() -> None:
    table = CalibrationTable()
    assert table.add(_key(), _sample(1, 0.5))
    assert not table.add(_key(), _sample(1, 0.5))
    assert not table.add(_key(tp=2), _sample(1, 0.5))
    assert table.entries[_key()].count == 1
    again = CalibrationTable.from_wire(table.to_wire())
    assert not again.add(_key(), _sample(1, 0.5))
    assert again.to_wire() == table.to_wire()


def test_lookup_falls_back_dropping_tp_pp_then_gpu() -> None:
    table = CalibrationTable()
    for i in range(3):
        table.add(_key(tp=2), _sample(i, 0.6))
    table.add(_key(gpu="NVIDIA-A100-SXM4-80GB"), _sample(9, -1.0))
    exact = table.lookup(_key(tp=2), "vLLM")
    assert exact is not None and exact.samples == 3 and "TP 2" in exact.scope
    assert exact.offset_bytes == int(0.6 * GiB * 3 / 4)
    any_tp = table.lookup(_key(tp=8), "vLLM")
    assert any_tp is not None and any_tp.samples == 3 and "any TP/PP" in any_tp.scope
    any_gpu = table.lookup(_key(gpu="NVIDIA-L40S"), "vLLM")
    assert any_gpu is not None and any_gpu.samples == 4
    assert table.lookup(CalibrationKey("sglang", "0.5", "x", 1, 1), "SGLang") is None
    assert "calibrated from 3 start-ups of vLLM 0.19 on NVIDIA-H100-80GB-HBM3" in exact.reason


def test_malformed_entries_are_skipped() -> None:
    table = CalibrationTable.from_wire({"entries": [{"engine": "vllm"}, "junk", _entry_wire()]})
    assert len(table.entries) == 1


def _entry_wire() -> dict[str, Any]:
    table = CalibrationTable()
    table.add(_key(), _sample(1, 0.5))
    entry: dict[str, Any] = table.to_wire()["entries"][0]
    return entry


def _llama_spec(target: int) -> InferenceServerSpec:
    return InferenceServerSpec.model_validate({
        "model": {"name": "meta-llama/Llama-3.1-8B-Instruct", "weightsPerGPU": "62Gi"},
        "engine": {"kind": "vllm", "version": "0.19.0"},
        "gpu": {"count": 1, "product": "NVIDIA-H100-80GB-HBM3"},
        "context": {"target": target},
    })


@pytest.mark.parametrize("gib", [-3.0, -0.5, 0.5])
def test_planner_applies_the_correction(gib: float) -> None:
    spec = _llama_spec(131072)
    base = plan(spec)
    key = CalibrationKey.parse(str(base.calibration_key))
    assert key is not None
    table = CalibrationTable()
    for i in range(3):
        table.add(key, _sample(i, gib))
    calibrated = plan(spec, calibration=table)
    offset = calibrated.calibration_bytes
    assert offset == int(min(abs(gib) * GiB, CLIP_BYTES) * (1 if gib > 0 else -1) * 3 / 4)
    assert calibrated.per_gpu.kv_cache_bytes == base.per_gpu.kv_cache_bytes + offset
    assert calibrated.per_gpu.usable_bytes == base.per_gpu.usable_bytes
    assert calibrated.reasons[0].startswith("calibrated from 3 start-ups of vLLM 0.19")
    if gib < 0:
        assert calibrated.max_context_length < base.max_context_length
    else:
        assert calibrated.max_context_length > base.max_context_length


def test_a_plan_that_does_not_fit_says_why_before_its_calibration_note() -> None:
    """The DoesNotFit condition, its Event and the decision line join ``reasons``: the cause leads, the calibration
    note (and the other notes) follow it."""
    spec = _llama_spec(131072)
    spec = spec.model_copy(update={"model": spec.model.model_copy(update={"weights_per_gpu": "79Gi"})})  # > usable
    base = plan(spec)
    key = CalibrationKey.parse(str(base.calibration_key))
    assert key is not None and not base.fits
    table = CalibrationTable()
    for i in range(3):
        table.add(key, _sample(i, -0.5))
    calibrated = plan(spec, calibration=table)
    assert not calibrated.fits and calibrated.calibration_bytes != 0
    assert calibrated.reasons[0] == base.reasons[0]
    assert not calibrated.reasons[0].startswith("calibrated")
    assert any(r.startswith("calibrated from 3 start-ups") for r in calibrated.reasons[1:])
