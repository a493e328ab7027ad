"""Planner side: a GPU whose compute capability the engine cannot run the model on is refused
before any start, where the engine's rule is known (``budget.capability``), through the library, ``ctxfit plan``
(exit 3, the reason on the plan) and the operator (BudgetFits=False DoesNotFit, nothing started). A rule is never
applied on releases it was not read in.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml
from ctxfit.api import InferenceServerSpec
from ctxfit.api.status import ConditionType
from ctxfit.budget.capability import capability_problems
from ctxfit.budget.planner import plan
from ctxfit.controller.converge import converge
from ctxfit.controller.views.pods import GPUNode
from ctxfit.vocab.inputs import resolve_inputs

from tests.unit.controller.builders import SETTINGS, never, snapshot

ROOT = Path(__file__).resolve().parents[3]
T4 = GPUNode("t4-0", "Tesla-T4", 15360, 4, (7, 5), 256 << 30, True)
QWEN_8B: dict[str, Any] = {
    "architectures": ["Qwen3ForCausalLM"], "num_hidden_layers": 36, "num_attention_heads": 32,
    "num_key_value_heads": 8, "head_dim": 128, "hidden_size": 4096, "vocab_size": 151936,
    "intermediate_size": 12288, "max_position_embeddings": 40960,
}


def server(engine: str, version: str, product: str, *, quant: str | None = None, args: list[str] | None = None,
           model: str = "acme/qwen3-8b", tp: int = 1) -> tuple[InferenceServerSpec, dict[str, Any]]:
    config = dict(QWEN_8B)
    if quant:
        config["quantization_config"] = {"quant_method": quant}
    spec = InferenceServerSpec.model_validate({
        "model": {"name": model, "weightsPerGPU": "5Gi"}, "engine": {"kind": engine, "version": version,
                                                                    "args": args or []},
        "gpu": {"count": tp, "product": product}, "parallelism": {"tensor": tp}, "context": {"target": 8192}})
    return spec, config


@pytest.mark.parametrize(("engine", "version", "product", "quant", "refused"), [
    ("vllm", "0.10.2", "Tesla-T4", "mxfp4", True),      # mxfp4 min 80 (0.10.2 wheel)
    ("vllm", "0.19.0", "NVIDIA-L4", "mxfp4", False),    # 8.9 >= 8.0
    ("vllm", "0.10.2", "Tesla-T4", "fp8", True),        # fp8 min 80 in 0.10.2
    ("vllm", "0.17.1", "Tesla-T4", "fp8", False),       # fp8 min 75 from 0.17 (Marlin on Turing)
    ("vllm", "0.19.0", "Tesla-V100-SXM2-32GB", "awq", True),  # awq min 75
    ("vllm", "0.19.0", "Tesla-T4", "awq", False),
    ("vllm", "0.33.0", "Tesla-T4", "mxfp4", False),     # a release the rule was not read in: the engine decides
    ("sglang", "0.5.4", "Tesla-T4", "fp8", True),       # SGLang fp8 min 80 (0.5.4 wheel)
    ("sglang", "0.5.10", "Tesla-T4", None, False),      # sm75 is SGLang's floor
    ("sglang", "0.5.10", "Tesla-V100-SXM2-32GB", None, True),
])
def test_capability_rules(engine: str, version: str, product: str, quant: str | None, refused: bool) -> None:
    spec, config = server(engine, version, product, quant=quant)
    problems = capability_problems(resolve_inputs(spec, hf_config=config))
    assert bool(problems) is refused, problems
    result = plan(spec, hf_config=config)
    assert result.capability_refusals == tuple(problems)  # typed: the operator tries another product on it
    if refused:
        assert not result.fits and result.context_length == 0
        assert any("compute capability" in r for r in result.reasons), result.reasons
        assert set(result.capability_refusals) <= set(result.reasons)
    else:
        assert not any("compute capability" in r and "cannot" in r for r in result.reasons)


def test_explicit_bf16_on_turing_is_refused_and_auto_is_not() -> None:
    spec, config = server("vllm", "0.19.0", "Tesla-T4", args=["--dtype", "bfloat16"])
    assert "--dtype half" in " ".join(capability_problems(resolve_inputs(spec, hf_config=config)))
    spec, config = server("vllm", "0.19.0", "Tesla-T4")
    assert capability_problems(resolve_inputs(spec, hf_config=config)) == []


@pytest.mark.parametrize(("version", "product", "refused"), [
    ("0.13.0", "NVIDIA-RTX-PRO-6000-Blackwell-Server-Edition", True),  # vLLM issue 31480
    ("0.23.0", "NVIDIA-RTX-PRO-6000-Blackwell-Server-Edition", True),
    ("0.19.0", "NVIDIA-A100-SXM4-80GB", True),                        # vLLM issue 40851 (A800)
    ("0.33.0", "NVIDIA-A100-SXM4-80GB", True),
    ("0.19.0", "NVIDIA-H200", False),
    ("0.19.0", "NVIDIA-B200", False),
    ("0.24.0", "NVIDIA-RTX-PRO-6000-Blackwell-Server-Edition", False),  # FLASHINFER_MLA_SPARSE_SM120 from 0.24
    ("0.33.0", "NVIDIA-RTX-PRO-6000-Blackwell-Server-Edition", False),
    ("0.34.0", "NVIDIA-A100-SXM4-80GB", False),  # a release not read: the engine decides
])
def test_sparse_mla_needs_hopper_or_blackwell_b200(version: str, product: str, refused: bool) -> None:
    spec = InferenceServerSpec.model_validate({
        "model": {"name": "deepseek-ai/DeepSeek-V3.2", "weightsPerGPU": "80Gi", "architecture": {
            "attention": "mla", "numLayers": 61, "kvLoraRank": 512, "qkRopeHeadDim": 64, "indexHeadDim": 128,
            "maxPositionEmbeddings": 163840}},
        "engine": {"kind": "vllm", "version": version}, "gpu": {"count": 8, "product": product},
        "parallelism": {"tensor": 8}, "context": {"target": 32768}})
    problems = capability_problems(resolve_inputs(spec))
    assert bool(problems) is refused and all("sparse-MLA" in p for p in problems)


def test_cli_plan_exits_3_naming_the_capability(tmp_path: Path) -> None:
    spec, config = server("vllm", "0.10.2", "Tesla-T4", quant="mxfp4")
    (tmp_path / "config.json").write_text(json.dumps(config))
    doc = {"apiVersion": "ctxfit.io/v1alpha1", "kind": "InferenceServer", "metadata": {"name": "x"},
           "spec": spec.to_wire()}
    (tmp_path / "s.yaml").write_text(yaml.safe_dump(doc))
    out = subprocess.run([sys.executable, "-m", "ctxfit.cli", "plan", "-f", str(tmp_path / "s.yaml"), "--hf-config",
                          str(tmp_path / "config.json"), "-o", "json"], capture_output=True, text=True, cwd=ROOT,
                         check=False)
    assert out.returncode == 3, out.stderr
    result = json.loads(out.stdout)
    assert result["fits"] is False and any("compute capability 8.0" in r for r in result["reasons"])


def test_operator_does_not_start_an_unsupported_gpu() -> None:
    body = {"model": {"name": "acme/tiny", "weightsPerGPU": "4Gi", "architecture": {
                "attention": "mla", "numLayers": 30, "kvLoraRank": 512, "qkRopeHeadDim": 64, "indexHeadDim": 128,
                "maxPositionEmbeddings": 131072}},
            "engine": {"kind": "vllm", "version": "0.19.0"}, "gpu": {"count": 1, "product": "Tesla-T4"},
            "context": {"target": 8192}}
    out = converge(snapshot(body, nodes=(T4,)), SETTINGS, never)
    cond = out.status.condition(ConditionType.BUDGET_FITS)
    assert cond is not None and cond.status == "False" and cond.reason.value == "DoesNotFit"
    assert "compute capability 7.5" in cond.message
    assert out.deployment is None and [e.reason.value for e in out.events] == ["DoesNotFit"]
