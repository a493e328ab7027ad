"""The default host memory limit holds what loading keeps in host memory (page cache, streamer, offload)."""

from __future__ import annotations

from typing import Any

import pytest
from ctxfit.api import GiB, InferenceServerSpec
from ctxfit.budget.planner import plan
from ctxfit.vocab.defaults import (
    HOST_MEMORY_BASE,
    HOST_MEMORY_PER_GPU,
    default_memory_limit_bytes,
    host_offload_bytes,
)
from hypothesis import given
from hypothesis import strategies as st


def test_rule_adds_one_replica_of_weights_and_offload() -> None:
    assert default_memory_limit_bytes(1) == HOST_MEMORY_BASE + HOST_MEMORY_PER_GPU
    assert default_memory_limit_bytes(8, 540 * GiB) == 32 * GiB + 8 * 16 * GiB + 540 * GiB
    assert default_memory_limit_bytes(2, 10 * GiB, 8 * GiB) == 32 * GiB + 32 * GiB + 18 * GiB
    assert default_memory_limit_bytes(1, GiB + 1) % GiB == 0  # whole GiB


@pytest.mark.parametrize(
    ("args", "gpus", "expected"),
    [
        (["--cpu-offload-gb", "10"], 2, 20 * GiB),
        (["--cpu-offload-gb=4", "--swap-space", "8"], 1, 12 * GiB),
        (["--swap-space"], 4, 0),
        (["--cpu-offload-gb", "lots"], 1, 0),
        (["--max-num-seqs", "10"], 8, 0),
    ],
    ids=["offload", "offload-and-swap", "missing-value", "bad-value", "unrelated"],
)
def test_offload_flags_are_host_memory_per_gpu(args: list[str], gpus: int, expected: int) -> None:
    assert host_offload_bytes(args, gpus) == expected


def spec(**extra: Any) -> InferenceServerSpec:
    data: dict[str, Any] = {"model": {"name": "meta-llama/Llama-3.1-70B-Instruct"}, "engine": {"kind": "vllm"},
                            "gpu": {"count": 4, "product": "NVIDIA-H100-80GB-HBM3"}, "parallelism": {"tensor": 4},
                            "context": {"target": 8192}}
    data.update(extra)
    return InferenceServerSpec.model_validate(data)


def test_plan_sizes_the_limit_for_the_weights_of_the_replica() -> None:
    result = plan(spec())
    weights = result.per_gpu.weights_bytes * 4
    assert result.effective.memory_limit_bytes >= weights + HOST_MEMORY_BASE + 4 * HOST_MEMORY_PER_GPU
    offloaded = plan(spec(engine={"kind": "vllm", "args": ["--cpu-offload-gb", "20"]}))
    assert offloaded.effective.memory_limit_bytes - result.effective.memory_limit_bytes == 80 * GiB
    pinned = plan(spec(resources={"memory": "100Gi"}))
    assert pinned.effective.memory_limit_bytes == 100 * GiB  # the user's value wins


@given(st.integers(min_value=1, max_value=64), st.integers(min_value=0, max_value=4 << 40))
def test_property_limit_always_exceeds_the_weights_loaded(gpus: int, weights: int) -> None:
    assert default_memory_limit_bytes(gpus, weights) > weights
