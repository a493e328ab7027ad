"""The driver's reserve per GPU product, in the catalog with sources and learnt per product by the
calibration table from the CUDA totals start-ups print (library, ``ctxfit calibrate``, the operator's verify pass).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from ctxfit.api import GiB, MiB
from ctxfit.budget.calibrate import (
    CalibrationKey,
    CalibrationTable,
    Sample,
    reserve_neutral_residual,
)
from ctxfit.budget.calibrated import apply_learned_reserve
from ctxfit.budget.planner import plan
from ctxfit.catalog import gpu_products, lookup_gpu
from ctxfit.controller.converge.flow import converge
from ctxfit.engines.vllm.startup import STARTUP_PATTERNS
from ctxfit.vocab.inputs import resolve_inputs
from ctxfit.vocab.startup import scan

from tests.unit.budget.manifestkit import manifest
from tests.unit.controller.builders import REPO, SETTINGS, applied, never, pod, snapshot, spec

sys.path.insert(0, str(REPO / "hack"))
from sim_startup import vllm_startup_log

ROOT = Path(__file__).resolve().parents[3]


@pytest.mark.parametrize(("product", "reserve_mib"), [
    ("Tesla-T4", 266), ("NVIDIA-A100-SXM4-80GB", 869), ("NVIDIA-A100-SXM4-40GB", 635), ("NVIDIA-L40S", 613),
    ("NVIDIA-H100-80GB-HBM3", 470), ("NVIDIA-GeForce-RTX-4090", 453),
    ("NVIDIA-RTX-PRO-6000-Blackwell-Server-Edition", 597),
])
def test_catalog_reserve_per_product_with_its_source(product: str, reserve_mib: int) -> None:
    entry = lookup_gpu(product)
    assert entry is not None and entry.driver_reserve_mib == reserve_mib
    assert "GiB" in entry.source  # the printed CUDA total it comes from


def test_reserves_differ_by_product() -> None:
    reserves = {p.driver_reserve_mib for p in gpu_products()}
    assert min(reserves) <= 300 and max(reserves) >= 800


@pytest.mark.parametrize(("line", "gib"), [
    ("[v1/worker/gpu_worker.py:661] Free memory on device (78.68/79.19 GiB) on startup. Desired GPU memory "
     "utilization is (0.95, 75.23 GiB).", 79.19),
    ("INFO 04-15 00:05:58 [worker.py:267] the current vLLM instance can use total_gpu_memory (39.38GiB) x "
     "gpu_memory_utilization (0.95) = 37.41GiB", 39.38),
    ("INFO 12-02 10:11:12 worker.py:232] Memory profiling results: total_gpu_memory=23.58GiB "
     "initial_memory_usage=15.21GiB", 23.58),
])
def test_the_printed_cuda_total_is_read(line: str, gib: float) -> None:
    report = scan(line, STARTUP_PATTERNS)
    assert report.cuda_total_bytes is not None and abs(report.cuda_total_bytes / GiB - gib) < 0.006


def _sample(i: int, reserve_mib: int, product_nvml_mib: int = 15360) -> Sample:
    nvml = product_nvml_mib * MiB
    return Sample(f"s{i}", "x", 0, GiB, GiB, "", nvml - reserve_mib * MiB, nvml)


def test_the_table_learns_the_median_reserve_per_product_and_the_plan_uses_it() -> None:
    table = CalibrationTable()
    for i, reserve in enumerate((240, 236, 250)):
        table.add(CalibrationKey("vllm", "0.19", "Tesla-T4", 1, 1), _sample(i, reserve))
    table.add(CalibrationKey("sglang", "0.5", "Tesla-T4", 2, 1), _sample(9, 238))
    learned = table.driver_reserve("Tesla-T4")
    assert learned == (240 * MiB, 4)  # the upper middle of an even count: the larger reserve, the safe side
    assert table.driver_reserve("NVIDIA-L4") is None
    spec_ = manifest("kimi-128k.yaml").model_copy(deep=True)
    spec_ = spec_.model_copy(update={"gpu": spec_.gpu.model_copy(update={"product": "Tesla-T4", "memory": None})})
    inputs = resolve_inputs(spec_)
    moved, reason = apply_learned_reserve(inputs, table)
    assert moved.cuda_total_bytes == inputs.gpu_total_bytes - 240 * MiB
    assert reason is not None and "learned from 4 start-ups: 240 MiB (catalog 266 MiB)" in reason
    assert any("driver reserve of Tesla-T4 learned" in r for r in plan(spec_, calibration=table).reasons)
    wire = CalibrationTable.from_wire(json.loads(json.dumps(table.to_wire())))
    assert wire.driver_reserve("Tesla-T4") == learned


def test_an_implausible_reserve_is_ignored() -> None:
    table = CalibrationTable()
    table.add(CalibrationKey("vllm", "0.19", "Tesla-T4", 1, 1), _sample(1, 20 * 1024))  # 20 GiB: a MIG slice
    assert table.driver_reserve("Tesla-T4") is None


def test_the_kv_residual_is_taken_at_the_printed_total() -> None:
    """A prediction off only by the reserve leaves no KV residual: the reserve is learnt once, not twice."""
    util = 0.9
    planned_total, printed_total = 80 * GiB, 79 * GiB
    predicted = 50 * GiB
    observed = predicted - int(util * GiB)  # the whole error is the 1 GiB of total
    assert reserve_neutral_residual(observed, predicted, fraction=util, planned_cuda_total=planned_total,
                                    printed_cuda_total=printed_total) == 0
    assert reserve_neutral_residual(observed, predicted, fraction=None, planned_cuda_total=None,
                                    printed_cuda_total=None) == observed - predicted


def test_the_operator_records_the_reserve_with_its_sample() -> None:
    body = spec()
    first = converge(snapshot(body), SETTINGS, never)
    plan_status = first.status.plan
    assert plan_status is not None
    log = vllm_startup_log(kv_cache_bytes=plan_status.per_gpu.kv_cache_bytes, max_model_len=131072,
                           kv_bytes_per_token=plan_status.kv_bytes_per_token)
    printed = 95.01
    log += f"(EngineCore_DP0 pid=212) DEBUG [v1/worker/gpu_worker.py:661] Free memory on device ({printed - 0.5:.2f}/" \
           f"{printed:.2f} GiB) on startup. Desired GPU memory utilization is (0.95, 90.26 GiB).\n"

    def read(_pod: object) -> str:
        return log

    out = converge(snapshot(body, first.status, pods=(pod(1, ready=True),), deployment=applied(first)), SETTINGS,
                   never, read)
    (_key, sample), = out.samples
    assert sample.gpu_memory_bytes == plan_status.per_gpu.total_bytes
    assert sample.cuda_total_bytes is not None and abs(sample.cuda_total_bytes / GiB - printed) < 0.006
    assert sample.reserve_bytes is not None and abs(sample.reserve_bytes / MiB - (97887 - printed * 1024)) < 6


def test_calibrate_cli_saves_the_reserve(tmp_path: Path) -> None:
    log = (ROOT / "tests" / "fixtures" / "calibrate" / "vllm019-llama31-8b-h100-tp1.log").read_text()
    (tmp_path / "l.log").write_text(log + "[v1/worker/gpu_worker.py:661] Free memory on device (78.68/79.19 GiB) on "
                                    "startup. Desired GPU memory utilization is (0.95, 75.23 GiB).\n")
    out = subprocess.run([sys.executable, "-m", "ctxfit.cli", "calibrate", "-f",
                          str(ROOT / "tests" / "fixtures" / "calibrate" / "llama31-8b-h100.yaml"), "--log",
                          str(tmp_path / "l.log"), "--save", str(tmp_path / "t.yaml")], cwd=ROOT, text=True,
                         capture_output=True, check=False)
    assert out.returncode == 0, out.stderr
    table = CalibrationTable.from_wire(yaml.safe_load((tmp_path / "t.yaml").read_text()))
    learned = table.driver_reserve("NVIDIA-H100-80GB-HBM3")
    assert learned is not None and abs(learned[0] / MiB - (81559 - 79.19 * 1024)) < 6
