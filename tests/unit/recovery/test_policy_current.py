"""The configuration that ran: planner's initial choice, the spec + engine-defaults fallback, and the
corrections read from the failure (ctxfit.recovery.current)."""

from __future__ import annotations

import sys
import types
from typing import Any

import pytest
from ctxfit.api import EffectiveConfig, GiB, InferenceServerSpec, MiB
from ctxfit.recovery import Failure, FailureKind, fallback_effective, initial_effective, observed_effective
from ctxfit.recovery.checks import FRACTION_CEILING, UTILIZATION_CEILING


def spec(**sections: Any) -> InferenceServerSpec:
    data: dict[str, Any] = {
        "model": {"name": "acme/unknown"},
        "engine": {"kind": "vllm"},
        "gpu": {"count": 1},
        "context": {"target": 32768},
    }
    data.update(sections)
    return InferenceServerSpec.model_validate(data)


@pytest.mark.parametrize(
    ("engine", "expected"),
    [
        ({"kind": "vllm", "version": "0.19.1"}, {"gpu_memory_utilization": 0.90, "cuda_graph_max_batch_size": 512}),
        ({"kind": "vllm", "version": "0.20.0"}, {"gpu_memory_utilization": 0.92}),
        ({"kind": "vllm", "version": "0.6.4"}, {"gpu_memory_utilization": 0.90}),
        ({"kind": "vllm"}, {"gpu_memory_utilization": 0.92, "mem_fraction_static": None}),
        ({"kind": "sglang", "version": "0.5.23"},
         {"mem_fraction_static": 0.85, "gpu_memory_utilization": None, "cuda_graph_max_batch_size": 256}),
    ],
    ids=["vllm-0.19", "vllm-0.20", "vllm-v0", "vllm-unversioned", "sglang"],
)
def test_fallback_engine_defaults(engine: dict[str, Any], expected: dict[str, Any]) -> None:
    config = fallback_effective(spec(engine=engine))
    for key, value in expected.items():
        assert getattr(config, key) == value, key
    assert config.context_length == 32768
    assert config.max_num_seqs == 256
    assert config.memory_limit_bytes == 48 * GiB  # ctxfit.vocab.defaults: 32 GiB + 16 GiB per GPU
    assert config.shm_bytes == 2 * GiB  # one GPU
    assert config.startup_timeout_seconds == 1200  # weights unknown
    assert config.kv_cache_dtype == "auto"


def test_fallback_uses_spec_values() -> None:
    config = fallback_effective(spec(
        memory={"gpuMemoryUtilization": 0.8, "kvCacheDtype": "fp8"},
        batching={"maxNumSeqs": 64, "cudaGraphMaxBatchSize": 32},
        resources={"memory": "500Gi", "shm": "64Mi"},
        startup={"timeoutSeconds": 150},
    ))
    assert (config.gpu_memory_utilization, config.kv_cache_dtype, config.max_num_seqs) == (0.8, "fp8", 64)
    assert config.cuda_graph_max_batch_size == 32
    assert (config.memory_limit_bytes, config.shm_bytes) == (500 * GiB, 64 * MiB)
    assert config.startup_timeout_seconds == 150


def test_fallback_context_from_model_maximum() -> None:
    known = spec(model={"name": "Qwen/Qwen3-32B"}, context={})
    assert fallback_effective(known).context_length == 40960
    explicit = spec(model={"name": "acme/x", "architecture": {"kvBytesPerToken": 3800,
                                                              "maxPositionEmbeddings": 524288}}, context={})
    assert fallback_effective(explicit).context_length == 524288
    with pytest.raises(ValueError, match=r"spec\.context\.target"):
        fallback_effective(spec(context={}))


def test_initial_uses_the_planner_when_it_can(monkeypatch: pytest.MonkeyPatch) -> None:
    planned = fallback_effective(spec()).model_copy(update={"context_length": 4096})
    fake = types.ModuleType("ctxfit.budget.planner")
    fake.initial_effective = lambda s: planned  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "ctxfit.budget.planner", fake)
    assert initial_effective(spec()) == planned


@pytest.mark.parametrize("error", [ValueError("unknown model"), KeyError("gpu"), ImportError("no planner")])
def test_initial_falls_back(monkeypatch: pytest.MonkeyPatch, error: Exception) -> None:
    def broken(s: InferenceServerSpec) -> EffectiveConfig:
        raise error

    fake = types.ModuleType("ctxfit.budget.planner")
    fake.initial_effective = broken  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "ctxfit.budget.planner", fake)
    assert initial_effective(spec()) == fallback_effective(spec())


def test_initial_without_planner_module(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "ctxfit.budget.planner", None)  # import raises ImportError
    assert initial_effective(spec()) == fallback_effective(spec())


def test_initial_keeps_target_when_the_planner_finds_no_fit(monkeypatch: pytest.MonkeyPatch) -> None:
    fake = types.ModuleType("ctxfit.budget.planner")
    fake.initial_effective = lambda s: fallback_effective(s).model_copy(update={"context_length": 0})  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "ctxfit.budget.planner", fake)
    assert initial_effective(spec()).context_length == 32768


def test_observed_numbers_override() -> None:
    s = spec(engine={"kind": "vllm"}, memory={"kvCacheDtype": "fp8"})
    planned = fallback_effective(s).model_copy(update={"context_length": 131072, "kv_cache_dtype": "auto"})
    kv = Failure(FailureKind.KV_CACHE_TOO_SMALL, {"requestedContextLength": 262144})
    assert observed_effective(planned, kv, s).context_length == 262144
    free = Failure(FailureKind.INSUFFICIENT_FREE_GPU_MEMORY, {"gpuMemoryUtilization": 0.95})
    assert observed_effective(planned, free, s).gpu_memory_utilization == 0.95
    dtype = Failure(FailureKind.KV_CACHE_DTYPE_UNSUPPORTED)
    assert observed_effective(planned, dtype, s).kv_cache_dtype == "fp8"
    assert observed_effective(planned, Failure(FailureKind.UNKNOWN), s) == planned
    sg = spec(engine={"kind": "sglang"})
    frac = Failure(FailureKind.STATIC_MEMORY_TOO_SMALL, {"memFractionStatic": 0.88, "gpuMemoryUtilization": 0.5})
    observed = observed_effective(fallback_effective(sg), frac, sg)
    assert (observed.mem_fraction_static, observed.gpu_memory_utilization) == (0.88, None)


def test_ceilings_match_the_planner() -> None:
    from ctxfit.budget import planner

    assert UTILIZATION_CEILING == planner.UTILIZATION_CEILING
    assert FRACTION_CEILING == planner.FRACTION_CEILING
