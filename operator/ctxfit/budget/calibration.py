"""Compare the planner's predicted KV pool with measured engine start-ups (calibration report).

Input rows are measured start-ups: GPU memory, TP, utilization, weights the engine printed, and the KV
pool it printed. The planner predicts the pool from the same inputs (weights taken as measured, so
the comparison isolates the overhead model: activation, non-torch, CUDA graphs, driver reserve).
Used by ``bench/overhead_fit.py`` (prints the error table) and the unit tests (bounds).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ctxfit.api import GiB, InferenceServerSpec
from ctxfit.engines import get_engine
from ctxfit.vocab.inputs import resolve_inputs


@dataclass(frozen=True)
class StartupCase:
    """One measured vLLM start-up. Sizes in GiB as the engine printed them."""

    case_id: str
    product: str
    gpu_memory_mib: int
    tensor_parallel: int
    pipeline_parallel: int
    gpu_memory_utilization: float
    version: str
    weights_gib: float
    measured_kv_gib: float
    hf_config: dict[str, Any]
    max_num_seqs: int | None = None
    max_num_batched_tokens: int | None = None


@dataclass(frozen=True)
class CaseError:
    """Predicted minus measured KV pool for one case, GiB (positive = over-prediction = crash risk)."""

    case_id: str
    predicted_kv_gib: float
    measured_kv_gib: float

    @property
    def error_gib(self) -> float:
        """Predicted minus measured, GiB."""
        return self.predicted_kv_gib - self.measured_kv_gib


def predict_kv_gib(case: StartupCase) -> float:
    """The planner's per-GPU KV pool for ``case``, GiB (no null block, as vLLM prints it)."""
    spec = InferenceServerSpec.model_validate(
        {
            "model": {"name": f"calibration/{case.case_id}", "weightsPerGPU": f"{int(case.weights_gib * GiB)}"},
            "engine": {"kind": "vllm", "version": case.version},
            "gpu": {
                "count": case.tensor_parallel * case.pipeline_parallel,
                "product": case.product,
                "memory": f"{case.gpu_memory_mib}Mi",
            },
            "parallelism": {"tensor": case.tensor_parallel, "pipeline": case.pipeline_parallel},
            "context": {"target": 8192},
            "memory": {"gpuMemoryUtilization": case.gpu_memory_utilization},
            "batching": {
                "maxNumSeqs": case.max_num_seqs,
                "maxNumBatchedTokens": case.max_num_batched_tokens,
            },
        }
    )
    inputs = resolve_inputs(spec, hf_config=case.hf_config)
    engine = get_engine(spec.engine.kind)
    effective = engine.default_effective(inputs, kv_cache_dtype="auto")
    return engine.budget(inputs, effective).kv_cache_bytes / GiB


def evaluate(cases: list[StartupCase]) -> list[CaseError]:
    """Predicted vs measured for every case."""
    return [CaseError(c.case_id, predict_kv_gib(c), c.measured_kv_gib) for c in cases]
