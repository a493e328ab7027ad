"""Per-GPU weights predicted from checkpoint tensors vs the weight figure each engine printed at start-up.

Every start-up fixture that prints the engine's own weight figure and whose model has a fixture repo
(tests/fixtures/weights/accuracy.yaml) is predicted with ``ctxfit.engines.weights.estimate_weights`` and the engine's
sharding rules. The bound is the issue's: within max(2 %, 0.1 GiB) of the printed figure; ``test_accuracy_summary``
prints the table with median and p90 |error| (pytest -s).
"""

from __future__ import annotations

import csv
import statistics
from pathlib import Path
from typing import Any

import pytest
import yaml
from ctxfit.engines.sglang.weights import RULES as SGLANG
from ctxfit.engines.vllm.weights import RULES as VLLM
from ctxfit.engines.weights import Layout, estimate_weights

from tests.hubfixtures.repos import fixture_repos

GiB = 2**30
STARTUPS = Path(__file__).resolve().parents[2] / "fixtures" / "startups"
TABLE = yaml.safe_load((STARTUPS.parent / "weights" / "accuracy.yaml").read_text(encoding="utf-8"))


def _observed_inputs() -> dict[str, float]:
    return {e["id"]: float(e["weightsGiB"]) for e in yaml.safe_load((STARTUPS / "inputs.yaml").read_text())
            if e.get("weightsGiB") is not None}


def fixture_of(model: str) -> str:
    """The fixture repo for a start-up's model: itself, or its alias in accuracy.yaml (same tensors, reason there)."""
    alias = (TABLE.get("aliases") or {}).get(model)
    return alias["repo"] if alias else model


def cases() -> list[dict[str, Any]]:
    """One case per start-up: id, repo (the fixture repo), engine, layout, flags, observed GiB."""
    repos = fixture_repos()
    out: list[dict[str, Any]] = []
    for row in csv.DictReader((STARTUPS / "vllm-0.19.0-h100-sweep.csv").open()):
        if row["status"] != "ok" or not row["weight_memory_gib"] or fixture_of(row["model"]) not in repos:
            continue
        inflight = row["quantization"] if row["quantization"] == "fp8" else None
        out.append({"id": row["log_file"], "repo": fixture_of(row["model"]), "engine": "vllm", "tp": int(row["tp"]),
                    "pp": int(row["pp"]), "dtype": {"torch.float16": "float16", "torch.float32": "float32"}.get(
                        row["dtype"], "auto"), "quantization": inflight, "observed": float(row["weight_memory_gib"])})
    observed = _observed_inputs()
    for e in TABLE["startups"]:
        out.append({"id": e["id"], "repo": fixture_of(e["repo"]), "engine": e["engine"], "tp": e.get("tp", 1),
                    "pp": e.get("pp", 1),
                    "dtype": e.get("dtype", "auto"), "quantization": e.get("quantization"),
                    "observed": observed[e["id"]]})
    return out


def predict(case: dict[str, Any]) -> float:
    repo = fixture_repos()[case["repo"]]
    rules = VLLM if case["engine"] == "vllm" else SGLANG
    est = estimate_weights(repo.checkpoint(), repo.config, Layout(tp=case["tp"], pp=case["pp"]), rules,
                           dtype=case["dtype"], inflight_quantization=case["quantization"])
    return est.per_gpu_bytes / GiB


def bound(observed: float) -> float:
    return max(0.02 * observed, 0.1)


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
    errors = sorted(abs(predict(c) - c["observed"]) for c in CASES)
    relative = sorted(abs(predict(c) - c["observed"]) / c["observed"] for c in CASES)
    p90 = errors[int(0.9 * (len(errors) - 1))]
    with capsys.disabled():
        print(f"\nweights: {len(errors)} start-ups, median |error| {statistics.median(errors):.3f} GiB "
              f"({100 * statistics.median(relative):.2f} %), p90 {p90:.3f} GiB "
              f"({100 * relative[int(0.9 * (len(relative) - 1))]:.2f} %), max {errors[-1]:.3f} GiB")
    scaled = sorted(abs(predict(c) - c["observed"]) / bound(c["observed"]) for c in CASES)
    assert statistics.median(scaled) <= 0.5  # the median start-up within half its bound
    assert scaled[int(0.9 * (len(scaled) - 1))] <= 1.0  # p90 within the bound max(2 %, 0.1 GiB)
