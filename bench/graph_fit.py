"""Fits of vLLM V1's CUDA-graph memory (``engines/vllm/cudagraph.py``): the estimate the V1 model runner
deducts from 0.20 (``estimate_bytes``) and the pool a capture keeps (``cuda_graph_bytes``).

The vLLM 0.19.0 H100 sweep prints, for each of its 59 successful start-ups, the estimate 0.20 deducts
("Estimated CUDA graph memory: X GiB total", CSV ``cuda_graph_estimated_gib``), the pool the capture took
(``cuda_graph_actual_gib``) and the graphs it captured (``cudagraph_piecewise_count`` + ``cudagraph_full_count``).
The model, for each column,

    memory = base + per_layer x layers on the stage x factor x graphs / 102
    factor = mla (MLA attention) | moe (other MoE models) | 1

is fitted on a grid minimizing an asymmetric absolute error: an under-estimate (vLLM deducts or keeps more than
predicted) weighs ``UNDER_WEIGHT`` times an over-estimate.

    python bench/graph_fit.py
"""

from __future__ import annotations

import csv
import statistics
import sys
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parent.parent
FIXTURES = ROOT / "tests" / "fixtures" / "startups"
REFERENCE_GRAPHS = 102
UNDER_WEIGHT = 2.0


@dataclass(frozen=True)
class GraphRow:
    """One sweep start-up: layers on the stage, graphs captured, MoE / MLA, printed estimate (GiB)."""

    model: str
    stage_layers: int
    graphs: int
    moe: bool
    mla: bool
    estimate_gib: float


@dataclass(frozen=True)
class GraphFit:
    """Fitted constants (GiB per layer at ``REFERENCE_GRAPHS`` graphs, dimensionless factors)."""

    base_gib: float
    per_layer_gib: float
    moe_factor: float
    mla_factor: float

    def predict_gib(self, row: GraphRow) -> float:
        """The modelled estimate of ``row``, GiB."""
        factor = self.mla_factor if row.mla else (self.moe_factor if row.moe else 1.0)
        return self.base_gib + self.per_layer_gib * row.stage_layers * factor * row.graphs / REFERENCE_GRAPHS


ESTIMATE_COLUMN = "cuda_graph_estimated_gib"
POOL_COLUMN = "cuda_graph_actual_gib"


def sweep_rows(column: str = ESTIMATE_COLUMN) -> list[GraphRow]:
    """The sweep's successful start-ups with the fields the model reads (models.yaml for layers, MoE, MLA) and
    the measured ``column`` (``ESTIMATE_COLUMN`` or ``POOL_COLUMN``) in ``estimate_gib``."""
    models = yaml.safe_load((FIXTURES / "models.yaml").read_text())
    rows = []
    with (FIXTURES / "vllm-0.19.0-h100-sweep.csv").open() as handle:
        for raw in csv.DictReader(handle):
            if raw["status"] != "ok":
                continue
            fields = models[raw["model"]]
            layers = -(-int(fields["layers"]) // int(raw["pp"]))
            # Llama-4-Scout's row has no counts; every other row of its kind captured 51 + 51
            graphs = int(raw["cudagraph_piecewise_count"] or 51) + int(raw["cudagraph_full_count"] or 51)
            rows.append(
                GraphRow(
                    raw["model"],
                    layers,
                    graphs,
                    "moe" in fields,
                    "mla" in fields,
                    float(raw[column]),
                )
            )
    return rows


def loss(fit: GraphFit, rows: Sequence[GraphRow]) -> float:
    """Asymmetric absolute error, GiB: an under-estimate counts ``UNDER_WEIGHT`` times."""
    total = 0.0
    for row in rows:
        error = fit.predict_gib(row) - row.estimate_gib
        total += -error * UNDER_WEIGHT if error < 0 else error
    return total


def _grid() -> Iterator[GraphFit]:
    for base in (i / 100 for i in range(0, 61, 2)):
        for per_layer in (i / 10000 for i in range(100, 301, 5)):
            for moe in (1.0, 1.1, 1.2, 1.3, 1.4, 1.5, 1.75, 2.0):
                for mla in (1.0, 1.5, 2.0, 2.5, 3.0):
                    yield GraphFit(base, per_layer, moe, mla)


def fit(rows: Sequence[GraphRow]) -> GraphFit:
    """The grid point of least ``loss`` (the first on ties, grid order: base, per-layer, MoE, MLA ascending)."""
    best: GraphFit | None = None
    best_loss = float("inf")
    for candidate in _grid():
        value = loss(candidate, rows)
        if value < best_loss - 1e-12:
            best, best_loss = candidate, value
    assert best is not None
    return best


def main() -> None:
    """Print both fits and their median |error| on the sweep."""
    for name, column in (("estimate", ESTIMATE_COLUMN), ("pool", POOL_COLUMN)):
        rows = sweep_rows(column)
        best = fit(rows)
        errors = [abs(best.predict_gib(r) - r.estimate_gib) for r in rows]
        print(name, best, f"n={len(rows)} median|err|={statistics.median(errors):.3f} GiB")


if __name__ == "__main__":
    if __package__ in (None, ""):
        sys.path.insert(0, str(ROOT))
    main()
