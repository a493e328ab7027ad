"""Hand-written effective configurations (``ctxfit.recovery.wire``) and the recovery's bounds
(``ctxfit.recovery.limits``): every bad value is a one-line ``<field>: <problem>`` error."""

from __future__ import annotations

import math
from typing import Any

import pytest
from ctxfit.api import EffectiveConfig, EngineKind, GiB, InferenceServerSpec
from ctxfit.recovery import FailedAttempt, FailureKind
from ctxfit.recovery.limits import MAX_CONTEXT_TOKENS, context_ceiling, model_max_context, plausible_number
from ctxfit.recovery.wire import FieldError, effective_from_wire

BASE = EffectiveConfig(
    context_length=131072, gpu_memory_utilization=0.90, mem_fraction_static=None, kv_cache_dtype="auto",
    max_num_seqs=256, cuda_graph_max_batch_size=512, memory_limit_bytes=64 * GiB, shm_bytes=16 * GiB,
    startup_timeout_seconds=1200,
)


@pytest.mark.parametrize(
    ("data", "field", "problem"),
    [
        ({"contextLength": math.inf}, "contextLength", "must be a whole number, got inf"),
        ({"contextLength": math.nan}, "contextLength", "must be a whole number"),
        ({"contextLength": 1.5}, "contextLength", "must be a whole number"),
        ({"contextLength": "abc"}, "contextLength", "must be a whole number, got 'abc'"),
        ({"contextLength": False}, "contextLength", "must be a whole number"),
        ({"contextLength": [1]}, "contextLength", "must be a whole number"),
        ({"contextLength": 0}, "contextLength", "must be between 16 and 134217728, got 0"),
        ({"contextLength": 1 << 40}, "contextLength", "must be between 16 and 134217728"),
        ({"gpuMemoryUtilization": "abc"}, "gpuMemoryUtilization", "must be a number, got 'abc'"),
        ({"gpuMemoryUtilization": math.inf}, "gpuMemoryUtilization", "must be a number"),
        ({"gpuMemoryUtilization": 7}, "gpuMemoryUtilization", "must be in (0, 1], got 7"),
        ({"gpuMemoryUtilization": 0}, "gpuMemoryUtilization", "must be in (0, 1]"),
        ({"memFractionStatic": 1.0}, "memFractionStatic", "must be in (0, 1)"),
        ({"kvCacheDtype": "int3"}, "kvCacheDtype", "must be one of auto, bfloat16"),
        ({"kvCacheDtype": 8}, "kvCacheDtype", "must be one of"),
        ({"maxNumSeqs": 0}, "maxNumSeqs", "must be between 1 and 65536, got 0"),
        ({"cudaGraphMaxBatchSize": -4}, "cudaGraphMaxBatchSize", "must be between 1 and 4096, got -4"),
        ({"memoryLimit": 0}, "memoryLimit", "must be between 1Mi and 64Ti, got 0"),
        ({"memoryLimit": "-1Gi"}, "memoryLimit", "must be between 1Mi and 64Ti"),
        ({"memoryLimit": "inf"}, "memoryLimit", "must be a finite quantity"),
        ({"memoryLimit": math.inf}, "memoryLimit", "must be a finite quantity"),
        ({"memoryLimit": "lots"}, "memoryLimit", "must be a finite quantity such as 80Gi, got 'lots'"),
        ({"memoryLimit": True}, "memoryLimit", "must be a quantity"),
        ({"shmSize": "65Ti"}, "shmSize", "must be between 1Mi and 64Ti"),
        ({"startupTimeoutSeconds": 29}, "startupTimeoutSeconds", "must be between 30 and 604800"),
        ({"contextLenght": 4096}, "contextLenght", "unknown field; did you mean contextLength?"),
        ({"zzz": 1}, "zzz", "unknown field; expected one of contextLength"),
        ({7: 1}, "7", "unknown field"),
    ],
)
def test_bad_values_name_the_field(data: dict[Any, Any], field: str, problem: str) -> None:
    with pytest.raises(FieldError) as info:
        effective_from_wire(data, defaults=BASE)
    assert info.value.field == field
    assert str(info.value).startswith(f"{field}: ")
    assert problem in str(info.value)
    assert "\n" not in str(info.value)


def test_good_values_override_defaults() -> None:
    config = effective_from_wire({"contextLength": "65536", "gpuMemoryUtilization": "0.85", "memoryLimit": "750Gi",
                                  "shmSize": 2 * GiB, "maxNumSeqs": 64.0, "kvCacheDtype": "fp8"}, defaults=BASE)
    assert config == BASE.model_copy(update={"context_length": 65536, "gpu_memory_utilization": 0.85,
                                             "memory_limit_bytes": 750 * GiB, "shm_bytes": 2 * GiB,
                                             "max_num_seqs": 64, "kv_cache_dtype": "fp8"})
    assert effective_from_wire({}, defaults=BASE) == BASE
    assert effective_from_wire(BASE.to_wire()) == BASE


def test_engine_knobs() -> None:
    with pytest.raises(FieldError, match="memFractionStatic: is not a vLLM setting; vLLM uses gpuMemoryUtilization"):
        effective_from_wire({"memFractionStatic": 0.8}, defaults=BASE, engine=EngineKind.VLLM)
    with pytest.raises(FieldError, match="gpuMemoryUtilization: required for vLLM"):
        effective_from_wire({"gpuMemoryUtilization": None}, defaults=BASE, engine=EngineKind.VLLM)
    sglang = BASE.model_copy(update={"gpu_memory_utilization": None, "mem_fraction_static": 0.85})
    with pytest.raises(FieldError, match="gpuMemoryUtilization: is not an SGLang setting"):
        effective_from_wire({"gpuMemoryUtilization": 0.9}, defaults=sglang, engine=EngineKind.SGLANG)
    assert effective_from_wire({"memFractionStatic": 0.8}, defaults=sglang, engine=EngineKind.SGLANG) == \
        sglang.model_copy(update={"mem_fraction_static": 0.8})


def test_missing_fields_without_defaults() -> None:
    with pytest.raises(FieldError, match="contextLength: required"):
        effective_from_wire({})


def test_attempt_from_wire_checks_fields_and_failure() -> None:
    with pytest.raises(FieldError, match="failure: required"):
        FailedAttempt.from_wire({"contextLength": 4096}, defaults=BASE)
    with pytest.raises(FieldError, match="gpuMemoryUtilization: must be a number"):
        FailedAttempt.from_wire({"gpuMemoryUtilization": "abc", "failure": "Unknown"}, defaults=BASE)
    with pytest.raises(FieldError, match="memFractionStatic: is not a vLLM setting"):
        FailedAttempt.from_wire({"memFractionStatic": 0.5, "failure": "Unknown"}, defaults=BASE, engine=EngineKind.VLLM)
    attempt = FailedAttempt.from_wire({"contextLength": 4096, "failure": "KVCacheTooSmall"}, defaults=BASE)
    assert attempt.failure is FailureKind.KV_CACHE_TOO_SMALL and attempt.config.context_length == 4096


@pytest.mark.parametrize(
    ("name", "value", "plausible"),
    [
        ("requestedContextLength", 262144, True),
        ("requestedContextLength", MAX_CONTEXT_TOKENS + 1, False),
        ("estimatedMaxContextLength", 73786976294838206464, False),
        ("availableBytes", int(11.7 * GiB), True),
        ("neededBytes", 10**29, False),
        ("freeBytes", -1, False),
        ("gpuMemoryUtilization", 0.9, True),
        ("minimumMemFractionStatic", 1.2, True),
        ("memFractionStatic", math.nan, False),
        ("totalBytes", math.inf, False),
        ("dummyRequests", 256, True),
        ("dummyRequests", 10**12, False),
        ("exitCode", -1, True),
        ("requestedContextLength", True, False),
        ("requestedContextLength", "262144", False),
    ],
)
def test_plausible_number(name: str, value: object, plausible: bool) -> None:
    assert plausible_number(name, value) is plausible


def _spec(model: str, context: dict[str, Any], architecture: dict[str, Any] | None = None) -> InferenceServerSpec:
    return InferenceServerSpec.model_validate({
        "model": {"name": model, **({"architecture": architecture} if architecture else {})},
        "engine": {"kind": "vllm"}, "gpu": {"count": 1, "memory": "80Gi"}, "context": context,
    })


def test_context_ceiling() -> None:
    llama = "meta-llama/Llama-3.1-8B-Instruct"
    assert model_max_context(_spec(llama, {})) == 131072
    assert context_ceiling(_spec(llama, {"target": 262144})) == (131072, "the model's maximum 131072")
    assert context_ceiling(_spec(llama, {"target": 65536})) == (65536, "context.target 65536")
    assert context_ceiling(_spec("acme/x", {"target": 8192})) == (8192, "context.target 8192")
    assert context_ceiling(_spec("acme/x", {})) is None
    arch = {"kvBytesPerToken": 1000, "maxPositionEmbeddings": 32768}
    assert context_ceiling(_spec("acme/x", {"target": 65536}, arch)) == (32768, "the model's maximum 32768")
