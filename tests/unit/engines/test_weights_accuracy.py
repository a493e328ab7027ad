"""Per-GPU weights predicted from checkpoint tensors vs the weight figure each engine printed at start-up.

Every start-up fixture that prints the engine's own weight figure and whose model has a fixture repo
(tests/fixtures/weights/accuracy.yaml) is predicted with ``ctxfit.engines.weights.estimate_weights`` and the engine's
sharding rules. The bound is the issue's: within max(2 %, 0.1 GiB) of the printed figure; ``test_accuracy_summary``
prints median and p90 |error| (pytest -s); bench/weights_accuracy.py prints the table.
"""

from __future__ import annotations

import math
import statistics
from typing import Any

import pytest

from tests.hubfixtures.accuracy import TABLE, bound, cases, predict, summary
from tests.hubfixtures.repos import fixture_repos

CASES = cases()


def test_every_listed_startup_has_its_fixture_repo() -> None:
    repos = fixture_repos()
    assert len(CASES) >= 40
    assert all(a["repo"] in repos and a["why"] for a in TABLE["aliases"].values())
    assert set(TABLE["known"]) <= {c["id"] for c in CASES}
    assert all(c["repo"] in repos for c in CASES)


@pytest.mark.parametrize("case", CASES, ids=[c["id"] for c in CASES])
def test_weights_within_bound(case: dict[str, Any]) -> None:
    predicted = predict(case)
    if case["id"] in TABLE["known"]:  # reason in accuracy.yaml; it must stay outside, or the entry is stale
        assert abs(predicted - case["observed"]) > bound(case["observed"]), f"{case['id']} is within: not known"
        return
    assert abs(predicted - case["observed"]) <= bound(case["observed"]), (
        f"{case['repo']} {case['engine']} TP{case['tp']} PP{case['pp']}: predicted {predicted:.3f} GiB, engine printed "
        f"{case['observed']:.3f} GiB")


def test_accuracy_summary(capsys: pytest.CaptureFixture[str]) -> None:
    errors = [abs(predict(c) - c["observed"]) for c in CASES]
    s = summary(errors, [c["observed"] for c in CASES])
    with capsys.disabled():
        print(f"\nweights: {s['n']} start-ups, median |error| {s['median']:.3f} GiB ({100 * s['medianRel']:.2f} %), "
              f"p90 {s['p90']:.3f} GiB ({100 * s['p90Rel']:.2f} %), max {s['max']:.3f} GiB "
              "(the table: python3 bench/weights_accuracy.py)")
    scaled = sorted(abs(predict(c) - c["observed"]) / bound(c["observed"]) for c in CASES)
    assert statistics.median(scaled) <= 0.5  # the median start-up within half its bound
    assert scaled[math.ceil(0.9 * len(scaled)) - 1] <= 1.0  # p90 (nearest rank) within max(2 %, 0.1 GiB)


def test_summary_p90_is_the_nearest_rank() -> None:
    """With few start-ups in a family, p90 is never below the median (two values: the larger)."""
    s = summary([1.343, 0.071], [10.0, 9.8])
    assert s["median"] == pytest.approx(0.707) and s["p90"] == 1.343 and s["max"] == 1.343
    assert summary([0.5], [10.0])["p90"] == 0.5
    assert summary([float(i) for i in range(1, 11)], [100.0] * 10)["p90"] == 9.0
