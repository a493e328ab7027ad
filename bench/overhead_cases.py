"""Measured start-ups as planner inputs, by engine version family (data for ``bench/overhead_fit.py``).

Sources: ``tests/fixtures/startups/vllm-0.19.0-h100-sweep.csv`` (59 successful vLLM 0.19.0 H100 start-ups,
llm-d-planner PR 205) with ``models.yaml`` (their config.json fields), and ``inputs.yaml`` (the planner
inputs of the other start-ups of ``startups.yaml``). Each case keeps the weights the engine printed, so
the prediction isolates the overhead model: activation, non-torch, CUDA graphs, driver reserve.
"""

from __future__ import annotations

import csv
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parent.parent
FIXTURES = ROOT / "tests" / "fixtures" / "startups"

if __package__ in (None, ""):
    sys.path.insert(0, str(ROOT / "operator"))

from ctxfit.api import GiB, InferenceServerSpec  # noqa: E402
from ctxfit.engines import get_engine  # noqa: E402
from ctxfit.engines.vllm.bands import v1_band  # noqa: E402
from ctxfit.engines.vllm.cudagraph import default_capture_size  # noqa: E402
from ctxfit.engines.vllm.memory import Family, container_env, family  # noqa: E402
from ctxfit.vocab.inputs import PlanInputs, resolve_inputs  # noqa: E402
from ctxfit.vocab.version import parse_version  # noqa: E402

H100 = ("NVIDIA-H100-80GB-HBM3", 81559)
FAMILIES = ("vllm-v0", "vllm-v1-0.7", "vllm-v1-0.12", "vllm-v1-0.17", "vllm-v1-0.20", "sglang-0.4", "sglang-0.5")
"""Families reported (``engines/vllm/bands.py``): V1 below 0.20 by release band, 0.7-0.11 / 0.12-0.16 / 0.17-0.19."""


def reported_family(label: str, version: str) -> str:
    """A fixture's family label, with ``vllm-v1`` split into its release band (``bands.v1_band``)."""
    if label != "vllm-v1":
        return label
    return v1_band(parse_version(version, default=(0, 19, 0)))

NOT_EVALUABLE: dict[str, tuple[str, str]] = {
    "vllm-qwen3-235b-fp8-4xh100-tp4": ("vllm-v1-0.7", "weights not printed"),
    "vllm0110-gptoss120b-h100-mnbt1024-boundary": ("vllm-v1-0.7", "weights not printed"),
    "vllm-v1-qwen3-1p7b-24gb-maxlen1024": ("vllm-v1-0.7", "weights and GPU not stated"),
    "vllm-v0-qwen25vl-72b-4xa100-40gb-tight": ("vllm-v0", "max_model_len not shown (V0 VLM profiles max_model_len)"),
    "vllm0271-qwen25-05b-rtx4090-wsl-llm-class-mnbt8192": (
        "vllm-v1-0.20",
        "model, max_model_len and max_num_seqs not printed (LLM class; WSL2 desktop GPU as well)",
    ),
    "sglang-qwen3-235b-fp8-4xh100-tp4": ("sglang-0.4", "weights not printed"),
    "sglang-qwen25vl-7b-b200-pcg": ("sglang-0.5", "weights not printed"),
    "sglang-llama70b-like-8xh200-tp8": ("sglang-0.5", "weights and mem-fraction-static not shown"),
}
"""Start-ups of startups.yaml that print a KV pool but not what the planner needs to predict it."""


@dataclass(frozen=True)
class Startup:
    """One measured start-up as planner inputs. Sizes in GiB as the engine printed them."""

    case_id: str
    family: str
    product: str | None
    gpu_memory_mib: int
    version: str
    tensor_parallel: int
    pipeline_parallel: int
    weights_gib: float
    measured_kv_gib: float
    hf_config: dict[str, Any]
    max_model_len: int
    gpu_memory_utilization: float | None = None
    mem_fraction_static: float | None = None
    max_num_seqs: int | None = None
    max_num_batched_tokens: int | None = None
    env: dict[str, str] = field(default_factory=dict)
    exclude: str | None = None
    capture: int | None = None
    """``--max-cudagraph-capture-size`` the start-up passed; None: vLLM's default (``default_capture_size``)."""
    kv_tokens: int | None = None
    """KV pool tokens the engine printed ("GPU KV cache size: N tokens", SGLang "#tokens: N"), when it did."""
    started: bool = True
    """False when the start-up failed after printing its ledger (startups.yaml ``startup: failed ...``)."""
    held_out: str | None = None
    """Why the start-up is kept aside (inputs.yaml ``heldOut``): added after the constants in the code were fitted,
    never a training start-up of ``--fit`` or the leave-one-out refit, and reported on its own line; a check of the
    fit on start-ups it has not seen."""

    @property
    def engine_kind(self) -> str:
        """``vllm`` or ``sglang``."""
        return self.family.split("-")[0]


def hf_config(fields: dict[str, Any]) -> dict[str, Any]:
    """A config.json with the fields the overhead model reads (attention geometry is irrelevant here);
    ``hidden`` and ``quant`` (a ``quantization_config.quant_method``) where the fixture gives them, ``arch``
    (config.json ``architectures[0]``: vLLM's model runner and gpt-oss's capture size follow it) and ``mla``
    (``kv_lora_rank``/``qk_rope_head_dim``: the CUDA-graph estimate of MLA models is larger)."""
    config: dict[str, Any] = {
        "num_hidden_layers": fields.get("layers", 32),
        "num_attention_heads": 32,
        "num_key_value_heads": 8,
        "head_dim": 128,
        "vocab_size": fields["vocab"],
        "intermediate_size": fields["intermediate"],
        "max_position_embeddings": 1 << 20,
    }
    if fields.get("hidden"):
        config["hidden_size"] = fields["hidden"]
    if fields.get("quant"):
        config["quantization_config"] = {"quant_method": fields["quant"]}
    if fields.get("arch"):
        config["architectures"] = [fields["arch"]]
    mla = fields.get("mla")
    if mla:
        config.update(kv_lora_rank=mla["kvLoraRank"], qk_rope_head_dim=mla["qkRopeHeadDim"])
    moe = fields.get("moe")
    if moe:
        config.update(
            num_experts=moe["experts"], num_experts_per_tok=moe["topK"], moe_intermediate_size=moe["intermediateSize"]
        )
    return config


def sweep_startups() -> list[Startup]:
    """The successful rows of the vLLM 0.19.0 H100 sweep (family vllm-v1)."""
    models = yaml.safe_load((FIXTURES / "models.yaml").read_text())
    cases = []
    with (FIXTURES / "vllm-0.19.0-h100-sweep.csv").open() as handle:
        for row in csv.DictReader(handle):
            if row["status"] != "ok":
                continue
            cases.append(
                Startup(
                    case_id=row["log_file"].removesuffix(".log"),
                    family=reported_family("vllm-v1", "0.19.0"),
                    product=H100[0],
                    gpu_memory_mib=H100[1],
                    version="0.19.0",
                    tensor_parallel=int(row["tp"]),
                    pipeline_parallel=int(row["pp"]),
                    weights_gib=float(row["weights_memory_gib"]),
                    measured_kv_gib=float(row["kv_cache_memory_gib"]),
                    hf_config=hf_config(models[row["model"]]),
                    max_model_len=int(row["max_model_len"]),
                    gpu_memory_utilization=float(row["gpu_memory_utilization"]),
                    kv_tokens=int(row["kv_cache_tokens"]) if row.get("kv_cache_tokens") else None,
                )
            )
    return cases


def listed_startups() -> list[Startup]:
    """The start-ups of ``inputs.yaml`` (every family; ids checked against startups.yaml)."""
    docs = yaml.safe_load((FIXTURES / "startups.yaml").read_text())
    known = {c["id"] for c in docs}
    tokens = {c["id"]: (c.get("observed") or {}).get("kvCacheTokens") for c in docs}
    failed = {c["id"] for c in docs if "failed" in str(c.get("startup") or (c.get("observed") or {}).get("startup")
                                                       or c.get("outcome") or "")}
    cases = []
    for raw in yaml.safe_load((FIXTURES / "inputs.yaml").read_text()):
        base_id = raw["id"].split("@")[0]
        if base_id not in known:
            raise ValueError(f"inputs.yaml: {base_id} is not in startups.yaml")
        cases.append(
            Startup(
                case_id=raw["id"],
                family=reported_family(raw["family"], str(raw["version"])),
                product=raw.get("product"),
                gpu_memory_mib=raw["mib"],
                version=str(raw["version"]),
                tensor_parallel=raw.get("tp", 1),
                pipeline_parallel=raw.get("pp", 1),
                weights_gib=float(raw["weightsGiB"]),
                measured_kv_gib=float(raw["kvGiB"]),
                hf_config=hf_config(raw["model"]),
                max_model_len=raw["maxModelLen"],
                gpu_memory_utilization=raw.get("util"),
                mem_fraction_static=raw.get("mfs"),
                max_num_seqs=raw.get("seqs"),
                max_num_batched_tokens=raw.get("mnbt"),
                env=dict(raw.get("env", {})),
                exclude=raw.get("exclude"),
                capture=raw.get("capture"),
                kv_tokens=_tokens(tokens.get(base_id), raw["id"]),
                started=base_id not in failed,
                held_out=raw.get("heldOut"),
            )
        )
    return cases


def _tokens(value: Any, case_id: str) -> int | None:
    """A printed pool size in tokens (a multi-version entry prints one per version: ``{version: N}``)."""
    if isinstance(value, dict):
        value = value.get(case_id.split("@")[1]) if "@" in case_id else None
    return int(value) if isinstance(value, int | float) and value > 0 else None


def needed_kv_gib(case: Startup) -> float:
    """KV one request of the start-up's max_model_len needs, GiB: the measured pool x max_model_len / the pool's
    printed tokens (the engine's own bytes per token); without printed tokens, a lower bound of 0 (then a plan
    calls it "does not fit" only when it predicts no pool at all)."""
    if not case.kv_tokens:
        return 0.0
    return case.measured_kv_gib * min(1.0, case.max_model_len / case.kv_tokens)


def all_startups() -> list[Startup]:
    """Sweep rows and listed start-ups."""
    return sweep_startups() + listed_startups()


def plan_inputs(case: Startup) -> tuple[PlanInputs, Any]:
    """``(PlanInputs, EffectiveConfig)`` the planner builds for ``case`` at its context. A vLLM V1 start-up
    captures graphs up to the size it passed, else up to vLLM's default for its version, GPU and model (the
    planner itself always passes ``--max-cudagraph-capture-size``)."""
    spec = InferenceServerSpec.model_validate(
        {
            "model": {"name": f"calibration/{case.case_id}", "weightsPerGPU": f"{int(case.weights_gib * GiB)}"},
            "engine": {
                "kind": case.engine_kind,
                "version": case.version,
                "env": [{"name": k, "value": v} for k, v in sorted(case.env.items())],
            },
            "gpu": {
                "count": case.tensor_parallel * case.pipeline_parallel,
                "product": case.product,
                "memory": f"{case.gpu_memory_mib}Mi",
            },
            "parallelism": {"tensor": case.tensor_parallel, "pipeline": case.pipeline_parallel},
            "context": {"target": case.max_model_len},
            "memory": {
                "gpuMemoryUtilization": case.gpu_memory_utilization,
                "memFractionStatic": case.mem_fraction_static,
            },
            "batching": {"maxNumSeqs": case.max_num_seqs, "maxNumBatchedTokens": case.max_num_batched_tokens},
        }
    )
    inputs = resolve_inputs(spec, hf_config=case.hf_config)
    engine = get_engine(spec.engine.kind)
    effective = engine.default_effective(inputs, kv_cache_dtype="auto")
    update: dict[str, Any] = {"context_length": case.max_model_len}
    fam = family(inputs.engine_version, container_env(inputs), inputs.compute_capability)
    if case.engine_kind == "vllm" and fam is not Family.V0:
        update["cuda_graph_max_batch_size"] = case.capture or default_capture_size(
            inputs.engine_version,
            effective.max_num_seqs,
            compute_capability=inputs.compute_capability,
            architectures=inputs.architectures,
        )
    return inputs, effective.model_copy(update=update)


def planner_kv_gib(case: Startup) -> float:
    """The KV pool the planner predicts for ``case`` with the constants in the code, GiB."""
    inputs, effective = plan_inputs(case)
    return get_engine(inputs.spec.engine.kind).budget(inputs, effective).kv_cache_bytes / GiB
