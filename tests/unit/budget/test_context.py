"""Context ladder and the choice between target and fit."""

from __future__ import annotations

import pytest
from ctxfit.budget.context import choose_context, context_ladder, ladder_floor, step_down_context


def test_ladder() -> None:
    assert context_ladder(300_000)[-5:] == [65536, 98304, 131072, 196608, 262144]
    ladder = context_ladder(600_000)
    assert ladder[:6] == [1024, 1536, 2048, 3072, 4096, 6144]
    assert ladder[-7:] == [65536, 98304, 131072, 196608, 262144, 393216, 524288]


@pytest.mark.parametrize(
    ("tokens", "expected"),
    [(1023, None), (1024, 1024), (1535, 1024), (1536, 1536), (134064, 131072), (200000, 196608)],
    ids=str,
)
def test_ladder_floor(tokens: int, expected: int | None) -> None:
    assert ladder_floor(tokens) == expected


@pytest.mark.parametrize(
    ("capacity", "headroom", "model_max", "expected"),
    [
        (178_752, 0.25, None, 131_072),  # docs/field-reports.md deployment 1
        (205_728, 0.25, None, 131_072),
        (23_648, 0.25, None, 16_384),
        (178_752, 0.0, 163_840, 131_072),
        (1_000, 0.25, None, None),
    ],
    ids=["kimi", "qwen-coder", "rtx3090", "capped-by-model", "too-small"],
)
def test_step_down(capacity: int, headroom: float, model_max: int | None, expected: int | None) -> None:
    assert step_down_context(capacity, headroom, model_max=model_max) == expected


def test_target_that_fits_is_kept() -> None:
    choice = choose_context(target=131072, fit=201152, headroom=0.25, minimum=32768, model_max=262144)
    assert (choice.context_length, choice.fits) == (131072, True)


def test_target_that_does_not_fit_steps_to_ladder() -> None:
    choice = choose_context(target=262144, fit=178_752, headroom=0.25, minimum=32768, model_max=262144)
    assert (choice.context_length, choice.fits) == (131072, True)
    assert "does not fit" in choice.reason


def test_minimum_floor() -> None:
    choice = choose_context(target=262144, fit=40_000, headroom=0.25, minimum=32768, model_max=None)
    assert not choice.fits and choice.context_length == 0


def test_target_above_model_max_is_capped() -> None:
    choice = choose_context(target=300_000, fit=10**6, headroom=0.25, minimum=1024, model_max=202752)
    assert choice.context_length == 202752
