"""The weight-accuracy cases: every start-up fixture that prints the engine's own weight figure and whose model has a
fixture repo (tests/fixtures/weights/accuracy.yaml), and its prediction from the repo's tensors with the engine's
sharding rules. Shared by tests/unit/engines/test_weights_accuracy.py (the bound) and bench/weights_accuracy.py (the
table)."""

from __future__ import annotations

import csv
import math
import statistics
from functools import cache
from pathlib import Path
from typing import Any

import yaml
from ctxfit.engines.sglang.weights import RULES as SGLANG
from ctxfit.engines.vllm.weights import RULES as VLLM
from ctxfit.engines.weights import Layout, estimate_weights
from ctxfit.vocab.checkpoint import Checkpoint, checkpoint_format

from .repos import fixture_entries, fixture_repos

GiB = 2**30
STARTUPS = Path(__file__).resolve().parents[1] / "fixtures" / "startups"
TABLE = yaml.safe_load((STARTUPS.parent / "weights" / "accuracy.yaml").read_text(encoding="utf-8"))


def _observed_inputs() -> dict[str, float]:
    return {e["id"]: float(e["weightsGiB"]) for e in yaml.safe_load((STARTUPS / "inputs.yaml").read_text())
            if e.get("weightsGiB") is not None}


def fixture_of(model: str) -> str:
    """The fixture repo for a start-up's model: itself, or its alias in accuracy.yaml (same tensors, reason there)."""
    alias = (TABLE.get("aliases") or {}).get(model)
    return str(alias["repo"]) if alias else model


def cases() -> list[dict[str, Any]]:
    """One case per start-up: id, repo (the fixture repo), engine, tp, pp, dtype, quantization (in-flight), observed
    GiB."""
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
                    "pp": e.get("pp", 1), "dtype": e.get("dtype", "auto"), "quantization": e.get("quantization"),
                    "observed": observed[e["id"]]})
    return out


@cache
def _checkpoint(repo: str) -> Checkpoint:
    return fixture_repos()[repo].checkpoint()


def predict(case: dict[str, Any]) -> float:
    """GiB on the busiest GPU, from the fixture repo's tensors."""
    repo = fixture_repos()[case["repo"]]
    rules = VLLM if case["engine"] == "vllm" else SGLANG
    est = estimate_weights(_checkpoint(case["repo"]), repo.config, Layout(tp=case["tp"], pp=case["pp"]), rules,
                           dtype=case["dtype"], inflight_quantization=case["quantization"])
    return est.per_gpu_bytes / GiB


def bound(observed: float) -> float:
    """The issue's bound: max(2 %, 0.1 GiB) of the printed figure."""
    return max(0.02 * observed, 0.1)


def weight_format(case: dict[str, Any]) -> str:
    """The checkpoint's weight format, with in-flight quantization named."""
    repo = fixture_repos()[case["repo"]]
    fmt = checkpoint_format(repo.config, _checkpoint(case["repo"]))
    return f"{fmt} -> {case['quantization']} in flight" if case.get("quantization") else fmt


def family(case: dict[str, Any]) -> str:
    return str(fixture_entries()[case["repo"]].get("family", ""))


def summary(errors: list[float], observed: list[float]) -> dict[str, float]:
    """median / p90 / max |error| in GiB and relative (p90 by nearest rank: the ceil(0.9 n)-th smallest, so with
    two values it is the larger one)."""
    abs_sorted = sorted(errors)
    rel = sorted(e / o for e, o in zip(errors, observed, strict=True))
    i = math.ceil(0.9 * len(abs_sorted)) - 1
    return {"n": len(errors), "median": statistics.median(abs_sorted), "p90": abs_sorted[i], "max": abs_sorted[-1],
            "medianRel": statistics.median(rel), "p90Rel": rel[i]}
