"""vLLM V0 pipeline-parallel profile terms (engines/vllm/pipeline.py)."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest
from ctxfit.api import GiB, InferenceServerSpec
from ctxfit.engines import get_engine
from ctxfit.engines.vllm import VLLM, memory
from ctxfit.engines.vllm.memory import Family
from ctxfit.engines.vllm.pipeline import v0_intermediate_tensor_bytes
from ctxfit.vocab.inputs import PlanInputs, resolve_inputs

from tests.unit.engines.modelkit import QWQ_32B_BNB


def _plan(
    config: dict[str, Any], *, pp: int, version: str = "0.8.5", use_v1: str = "0", context: int = 50000
) -> tuple[PlanInputs, memory.ProfileInputs]:
    """The QwQ-32B bnb-4bit start-up of vllm issue 14452 (tests/fixtures/startups), at ``pp`` stages."""
    spec = InferenceServerSpec.model_validate(
        {
            "model": {"name": "unsloth/QwQ-32B-unsloth-bnb-4bit", "weightsPerGPU": "10Gi"},
            "engine": {"kind": "vllm", "version": version, "env": [{"name": "VLLM_USE_V1", "value": use_v1}]},
            "gpu": {"count": pp, "product": "NVIDIA-GeForce-RTX-5090"},
            "parallelism": {"pipeline": pp},
            "context": {"target": context},
            "memory": {"gpuMemoryUtilization": 0.85},
        }
    )
    inputs = resolve_inputs(spec, hf_config=config)
    effective = get_engine(spec.engine.kind).default_effective(inputs, kv_cache_dtype="auto")
    effective = effective.model_copy(update={"context_length": context})
    tokens = VLLM().max_num_batched_tokens(inputs)
    return inputs, memory.profile_inputs(inputs, effective, max_num_batched_tokens=tokens)


def test_non_first_stage_holds_hidden_states_and_residual() -> None:
    inputs, profile = _plan(QWQ_32B_BNB, pp=2)
    tokens = profile.sizes.max_num_batched_tokens
    assert tokens == 2048  # V0 above 32k: chunked prefill, 2048-token profile
    assert v0_intermediate_tensor_bytes(inputs, tokens) == 2 * 2048 * 5120 * 2
    assert profile.pp_intermediate_bytes == 2 * 2048 * 5120 * 2


@pytest.mark.parametrize(
    ("pp", "version", "use_v1", "expected_nonzero"),
    [
        (1, "0.8.5", "0", False),  # one stage: no intermediate tensors
        (2, "0.8.5", "0", True),  # V0 at PP 2
        (2, "0.8.5", "1", False),  # V1: not this rule (V1 keeps its own persistent buffer)
        (4, "0.6.4", "0", True),  # every V0 release has the same _dummy_run branch
    ],
    ids=["pp1", "v0-pp2", "v1-pp2", "v0-064-pp4"],
)
def test_rule_applies_to_v0_pipeline_plans_only(pp: int, version: str, use_v1: str, expected_nonzero: bool) -> None:
    _, profile = _plan(QWQ_32B_BNB, pp=pp, version=version, use_v1=use_v1)
    assert (profile.pp_intermediate_bytes > 0) is expected_nonzero


def test_intermediate_tensors_add_to_the_activation_peak() -> None:
    _, profile = _plan(QWQ_32B_BNB, pp=2)
    assert profile.family is Family.V0
    with_term = memory.overheads(profile)
    without = memory.overheads(replace(profile, pp_intermediate_bytes=0))
    assert with_term.activation_bytes - without.activation_bytes == profile.pp_intermediate_bytes
    assert "pipeline intermediate tensors" in with_term.activation_note
    assert with_term.kv_pool_bytes(profile) < without.kv_pool_bytes(profile)


def test_term_is_sized_by_the_profiled_tokens() -> None:
    """Without chunked prefill (32k context) V0 profiles the whole context, and the buffers grow with it."""
    _, chunked = _plan(QWQ_32B_BNB, pp=2, context=50000)
    _, whole = _plan(QWQ_32B_BNB, pp=2, context=32768)
    assert whole.sizes.max_num_batched_tokens == 32768
    assert whole.pp_intermediate_bytes == 16 * chunked.pp_intermediate_bytes


def test_hidden_size_falls_back_to_intermediate_over_2_5() -> None:
    config = {k: v for k, v in QWQ_32B_BNB.items() if k != "hidden_size"}
    inputs, profile = _plan(config, pp=2)
    assert inputs.hidden_size is None
    assert profile.pp_intermediate_bytes == 2 * 2048 * int(27648 / 2.5) * 2
    assert profile.pp_intermediate_bytes >= 2 * 2048 * 5120 * 2  # the fallback errs large


def test_qwq_last_stage_moves_toward_its_ledger() -> None:
    """Stage B of vllm issue 14452 printed 14.26 GiB for the KV cache with 10.30 GiB of weights."""
    _, profile = _plan(QWQ_32B_BNB, pp=2)
    printed = replace(profile, weights_bytes=int(10.30 * GiB))
    with_term = memory.overheads(printed).kv_pool_bytes(printed) / GiB
    without = replace(printed, pp_intermediate_bytes=0)
    assert abs(with_term - 14.26) < abs(memory.overheads(without).kv_pool_bytes(without) / GiB - 14.26)
    assert with_term > 14.26  # the 40 MiB term is a source rule, not a pad that closes the gap
