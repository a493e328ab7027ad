"""Calibration report: the planner's predicted KV pool vs measured vLLM start-ups.

Fit set: the 59 successful vLLM 0.19.0 H100 start-ups (tests/fixtures/startups/vllm-0.19.0-h100-sweep.csv).
Held-out set: start-ups on other GPUs and versions from tests/fixtures/startups/startups.yaml.
Prints one row per case and the summary (median, mean, p10/p90 of predicted minus measured, GiB;
positive = over-prediction, which would crash the engine).

    python bench/overhead_fit.py
"""

from __future__ import annotations

import csv
import statistics
import sys
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parent.parent
FIXTURES = ROOT / "tests" / "fixtures" / "startups"

if __package__ in (None, ""):
    sys.path.insert(0, str(ROOT / "operator"))

from ctxfit.budget.calibration import CaseError, StartupCase, evaluate  # noqa: E402

H100_MIB = 81559


def _hf_config(fields: dict[str, Any]) -> dict[str, Any]:
    config: dict[str, Any] = {
        "num_hidden_layers": 32,
        "num_attention_heads": 32,
        "num_key_value_heads": 8,
        "head_dim": 128,
        "vocab_size": fields["vocab"],
        "intermediate_size": fields["intermediate"],
    }
    moe = fields.get("moe")
    if moe:
        config.update(
            num_experts=moe["experts"], num_experts_per_tok=moe["topK"], moe_intermediate_size=moe["intermediateSize"]
        )
    return config


def sweep_cases() -> list[StartupCase]:
    """The fit set: successful rows of the vLLM 0.19.0 H100 sweep."""
    models = yaml.safe_load((FIXTURES / "models.yaml").read_text())
    cases = []
    with (FIXTURES / "vllm-0.19.0-h100-sweep.csv").open() as handle:
        for row in csv.DictReader(handle):
            if row["status"] != "ok":
                continue
            cases.append(
                StartupCase(
                    case_id=row["log_file"].removesuffix(".log"),
                    product="NVIDIA-H100-80GB-HBM3",
                    gpu_memory_mib=H100_MIB,
                    tensor_parallel=int(row["tp"]),
                    pipeline_parallel=int(row["pp"]),
                    gpu_memory_utilization=float(row["gpu_memory_utilization"]),
                    version="0.19.0",
                    weights_gib=float(row["weights_memory_gib"]),
                    measured_kv_gib=float(row["kv_cache_memory_gib"]),
                    hf_config=_hf_config(models[row["model"]]),
                )
            )
    return cases


HELD_OUT: list[dict[str, Any]] = [
    # id in startups.yaml, GPU product, NVML MiB, version, model fields, seqs / batched tokens if stated
    {
        "id": "vllm028-gptoss120b-8x-rtxpro4500-tp8",
        "product": "NVIDIA-RTX-PRO-4500-Blackwell-Server-Edition",
        "mib": 32623,
        "version": "0.28.0",
        "tp": 8,
        "util": 0.95,
        "weights": 9.98,
        "kv": 19.0,
        "seqs": 256,
        "model": {"vocab": 201088, "intermediate": 2880, "moe": {"experts": 128, "topK": 4, "intermediateSize": 2880}},
    },
    {
        "id": "vllm-v1-gemma3-4b-b200-bench",
        "product": "NVIDIA-B200",
        "mib": 183359,
        "version": "0.10.0",
        "tp": 1,
        "util": 0.9,
        "weights": 8.58,
        "kv": 141.92,
        "mnbt": 16384,
        "model": {"vocab": 262208, "intermediate": 10240},
    },
    {
        "id": "vllm-v0-llama3-8b-h100-tp2",
        "product": "NVIDIA-H100-80GB-HBM3",
        "mib": 81559,
        "version": "0.6.5",
        "tp": 2,
        "util": 0.9,
        "weights": 7.48,
        "kv": 58.97,
        "model": {"vocab": 128256, "intermediate": 14336},
    },
    {
        "id": "vllm-v0-llama31-8b-rtx3090-maxlen29k-insufficient",
        "product": "NVIDIA-GeForce-RTX-3090",
        "mib": 24576,
        "version": "0.6.4",
        "tp": 1,
        "util": 0.9,
        "weights": 14.9888,
        "kv": 2.89,
        "mnbt": 29000,
        "model": {"vocab": 128256, "intermediate": 14336},
    },
    {
        "id": "vllm-v0-r1-distill-qwen14b-2x4090-tp2",
        "product": "NVIDIA-GeForce-RTX-4090",
        "mib": 24564,
        "version": "0.7.2",
        "tp": 2,
        "util": 0.98,
        "weights": 13.9476,
        "kv": 8.69,
        "model": {"vocab": 152064, "intermediate": 13824},
    },
    {
        "id": "vllm-v0-qwen25-7b-24gb-maxlen8192",
        "product": "NVIDIA-GeForce-RTX-4090",
        "mib": 24564,
        "version": "0.7.0",
        "tp": 1,
        "util": 0.9,
        "weights": 14.25,
        "kv": 5.77,
        "model": {"vocab": 152064, "intermediate": 18944},
    },
]


def held_out_cases() -> list[StartupCase]:
    """Start-ups on other GPUs and versions (not used to fit the constants)."""
    known = {c["id"] for c in yaml.safe_load((FIXTURES / "startups.yaml").read_text())}
    cases = []
    for raw in HELD_OUT:
        assert raw["id"] in known, raw["id"]
        cases.append(
            StartupCase(
                case_id=raw["id"],
                product=raw["product"],
                gpu_memory_mib=raw["mib"],
                tensor_parallel=raw["tp"],
                pipeline_parallel=1,
                gpu_memory_utilization=raw["util"],
                version=raw["version"],
                weights_gib=raw["weights"],
                measured_kv_gib=raw["kv"],
                hf_config=_hf_config(raw["model"]),
                max_num_seqs=raw.get("seqs"),
                max_num_batched_tokens=raw.get("mnbt"),
            )
        )
    return cases


def summary(errors: list[CaseError]) -> dict[str, float]:
    """Median, mean, p10, p90, max over/under of predicted minus measured (GiB)."""
    values = sorted(e.error_gib for e in errors)
    deciles = statistics.quantiles(values, n=10) if len(values) >= 2 else [values[0]] * 9
    return {
        "n": len(values),
        "median": statistics.median(values),
        "mean": statistics.fmean(values),
        "p10": deciles[0],
        "p90": deciles[-1],
        "max_over": max(values),
        "max_under": min(values),
        "median_abs": statistics.median(abs(v) for v in values),
    }


def main() -> None:
    """Print the per-case table and the summaries of both sets."""
    for title, cases in (("fit set: vLLM 0.19.0 H100 sweep", sweep_cases()), ("held out", held_out_cases())):
        errors = evaluate(cases)
        print(f"== {title}")
        print(f"{'case':70} {'pred':>8} {'meas':>8} {'err':>7}")
        for e in errors:
            print(f"{e.case_id[:70]:70} {e.predicted_kv_gib:8.2f} {e.measured_kv_gib:8.2f} {e.error_gib:+7.2f}")
        s = summary(errors)
        print(
            f"-- n={s['n']:.0f} median {s['median']:+.2f} GiB, mean {s['mean']:+.2f}, p10 {s['p10']:+.2f}, "
            f"p90 {s['p90']:+.2f}, |median| {s['median_abs']:.2f}, max over {s['max_over']:+.2f}, "
            f"max under {s['max_under']:+.2f}\n"
        )


if __name__ == "__main__":
    main()
