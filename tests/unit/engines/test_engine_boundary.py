"""Everything engine-specific lives behind the Engine Protocol: no engine-name branch outside ``ctxfit.engines`` but the
few docs/design/engines.md lists (the API's own validation, mirrored in CEL, below the engines' layer), and the
behaviours moved behind it answer as they did."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from ctxfit.api import EffectiveConfig, EngineKind, InferenceServerSpec
from ctxfit.budget.capability import capability_problems
from ctxfit.engines import get_engine
from ctxfit.recovery.current import fallback_effective
from ctxfit.recovery.wire import FieldError, effective_from_wire
from ctxfit.vocab.inputs import resolve_inputs

PACKAGE = Path(__file__).resolve().parents[3] / "operator" / "ctxfit"
BRANCH = re.compile(r"EngineKind\.(VLLM|SGLANG)|[=!]= *['\"](vllm|sglang)['\"]|['\"](vllm|sglang)['\"]: "
                    r"|: *['\"](vllm|sglang)['\"]|\(['\"](vllm|sglang)['\"],|engines\.(vllm|sglang)\b")
ALLOWED = {
    "api/spec.py": "EngineKind's definition; memory.gpuMemoryUtilization vs memFractionStatic (CEL in api/crd.py)",
    "api/crd.py": "the CEL rules, which can only name the engines",
    "api/routing.py": "rank ports in an InferencePool: the validator and its CEL rule",
    "api/validation.py": "MANAGED_FLAGS: the flags each engine's spec may not repeat, refused by CEL at the API server",
    "vocab/inputs.py": "DEFAULT_ENGINE_VERSION: vocab sits below engines (test_default_versions_agree)",
    "controller/settings.py": "the operator's per-engine image settings (CTXFIT_VLLM_IMAGE, CTXFIT_SGLANG_IMAGE)",
    "budget/calibration.py": "the measured vLLM start-ups the overhead fit is checked against",
}


def _code(path: Path) -> str:
    """``path``'s text without docstrings and comments (they may name the engines)."""
    text = re.sub(r'"""(?:.|\n)*?"""', "", path.read_text())
    return "\n".join(line.split("  #")[0] for line in text.splitlines())


def test_no_engine_branch_outside_the_engine_packages() -> None:
    found = []
    for path in sorted(PACKAGE.rglob("*.py")):
        name = path.relative_to(PACKAGE).as_posix()
        if name.startswith("engines/") or name in ALLOWED:
            continue
        found += [f"{name}: {m.group(0)}" for m in BRANCH.finditer(_code(path))]
    assert not found, f"engine-specific branches outside ctxfit.engines (move them behind the Protocol): {found}"


def test_the_allowed_files_still_need_their_exception() -> None:
    stale = [name for name in ALLOWED if not BRANCH.search(_code(PACKAGE / name))]
    assert not stale, f"no engine branch left in {stale}: drop them from ALLOWED and docs/design/engines.md"


def test_default_versions_agree() -> None:
    from ctxfit.engines.sglang import DEFAULT_VERSION as SGLANG
    from ctxfit.engines.vllm import DEFAULT_VERSION as VLLM
    from ctxfit.vocab.inputs import DEFAULT_ENGINE_VERSION
    from ctxfit.vocab.version import parse_version

    expected = {"vllm": parse_version(VLLM, default=(0, 0, 0)), "sglang": parse_version(SGLANG, default=(0, 0, 0))}
    assert expected == DEFAULT_ENGINE_VERSION
    assert set(DEFAULT_ENGINE_VERSION) == {k.value for k in EngineKind}


def spec(engine: str, version: str | None = None, **memory: float) -> InferenceServerSpec:
    return InferenceServerSpec.model_validate({
        "model": {"name": "meta-llama/Llama-3.1-8B-Instruct"},
        "engine": {"kind": engine, **({"version": version} if version else {})},
        "gpu": {"count": 1, "product": "NVIDIA-H100-80GB-HBM3"}, "context": {"target": 8192},
        **({"memory": memory} if memory else {})})


@pytest.mark.parametrize(("engine", "version", "memory", "expected"), [
    ("vllm", None, {}, (0.92, None, 512)),
    ("vllm", "0.19.1", {}, (0.90, None, 512)),
    ("vllm", "0.20.0", {}, (0.92, None, 512)),
    ("vllm", "0.10.2", {"gpuMemoryUtilization": 0.8}, (0.8, None, 512)),
    ("sglang", None, {}, (None, 0.85, 256)),
    ("sglang", "0.5.10", {"memFractionStatic": 0.7}, (None, 0.7, 256)),
])
def test_unplanned_defaults_are_the_engines(engine: str, version: str | None, memory: dict[str, float],
                                            expected: tuple[float | None, float | None, int]) -> None:
    s = spec(engine, version, **memory)
    assert get_engine(s.engine.kind).unplanned_defaults(s) == expected
    effective = fallback_effective(s)
    assert (effective.gpu_memory_utilization, effective.mem_fraction_static,
            effective.cuda_graph_max_batch_size) == expected


def test_memory_knob_of_each_engine_is_required_and_the_others_refused() -> None:
    base = EffectiveConfig(context_length=8192, gpu_memory_utilization=0.9, max_num_seqs=8,
                           cuda_graph_max_batch_size=8, memory_limit_bytes=1 << 30, shm_bytes=1 << 30,
                           startup_timeout_seconds=600).to_wire()
    assert effective_from_wire(base, engine=EngineKind.VLLM).gpu_memory_utilization == 0.9
    with pytest.raises(FieldError, match="required for SGLang") as required:
        effective_from_wire(base, engine=EngineKind.SGLANG)
    assert required.value.field == "memFractionStatic"
    both = {**base, "memFractionStatic": 0.8}
    with pytest.raises(FieldError, match="is not a vLLM setting; vLLM uses gpuMemoryUtilization") as other:
        effective_from_wire(both, engine=EngineKind.VLLM)
    assert other.value.field == "memFractionStatic"
    with pytest.raises(FieldError, match="is not an SGLang setting; SGLang uses memFractionStatic") as other:
        effective_from_wire(both, engine=EngineKind.SGLANG)
    assert other.value.field == "gpuMemoryUtilization"


def test_free_at_load_only_where_the_fraction_is_of_free_memory() -> None:
    assert get_engine(EngineKind.VLLM).free_at_load_bytes(resolve_inputs(spec("vllm"))) is None
    inputs = resolve_inputs(spec("sglang"))
    free = get_engine(EngineKind.SGLANG).free_at_load_bytes(inputs)
    assert free is not None and 0 < free < inputs.cuda_total_bytes


def test_capability_rules_come_from_the_engine() -> None:
    t4 = {"model": {"name": "acme/m", "weightsPerGPU": "5Gi", "architecture": {
        "attention": "gqa", "numLayers": 32, "numKVHeads": 8, "headDim": 128, "numAttentionHeads": 32}},
        "gpu": {"count": 1, "product": "Tesla-T4"}, "context": {"target": 8192}}
    old = InferenceServerSpec.model_validate({**t4, "engine": {"kind": "sglang", "version": "0.5.10"}})
    v100 = InferenceServerSpec.model_validate({**t4, "engine": {"kind": "sglang", "version": "0.5.10"},
                                               "gpu": {"count": 1, "product": "Tesla-V100-SXM2-32GB"}})
    assert capability_problems(resolve_inputs(old)) == []
    problems = capability_problems(resolve_inputs(v100))
    assert problems == get_engine(EngineKind.SGLANG).capability_problems(resolve_inputs(v100))
    assert len(problems) == 1 and "SGLang 0.5.10 runs only on compute capability 7.5" in problems[0]
    bf16 = InferenceServerSpec.model_validate({**t4, "engine": {"kind": "vllm", "args": ["--dtype", "bfloat16"]}})
    assert any("--dtype bfloat16" in p for p in capability_problems(resolve_inputs(bf16)))
