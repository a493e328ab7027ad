"""Generalization: real failure texts from public bug reports that are not in the handed cases
(tests/fixtures/review-wordings.yaml, each with its URL) are classified as their failure class, through the
library and through ``ctxfit diagnose`` (exit 0, JSON, no traceback)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml
from ctxfit.api import EngineKind
from ctxfit.cli import main
from ctxfit.recovery import FailureKind, Observation, classify

from tests.unit.recovery.diagnosekit import write_server

FIXTURE = Path(__file__).resolve().parents[2] / "fixtures" / "review-wordings.yaml"
CASES: list[dict[str, Any]] = yaml.safe_load(FIXTURE.read_text())

@pytest.mark.parametrize("case", CASES, ids=[c["id"] for c in CASES])
def test_real_wording_is_classified(case: dict[str, Any]) -> None:
    failure = classify(Observation(reason="Error", exit_code=1, message=case["text"]), EngineKind(case["engine"]))
    assert failure.kind is FailureKind(case["kind"]), (case["source"], failure)


@pytest.mark.parametrize("case", CASES, ids=[c["id"] for c in CASES])
def test_real_wording_through_the_cli(case: dict[str, Any], tmp_path: Path,
                                      capsys: pytest.CaptureFixture[str]) -> None:
    sglang = case["engine"] == "sglang"
    server = tmp_path / "s.yaml"
    write_server(server, case["engine"], "0.4.3" if sglang else "0.9.1")
    log = tmp_path / "log.txt"
    log.write_text(case["text"])
    code = main(["diagnose", "-f", str(server), "--message-file", str(log), "--reason", "Error",
                 "--exit-code", "1", "-o", "json"])
    out = capsys.readouterr()
    assert code == 0 and "Traceback" not in out.err
    assert json.loads(out.out)["failure"]["kind"] == case["kind"]


ARC_SERVER = """apiVersion: ctxfit.io/v1alpha1
kind: InferenceServer
metadata: {name: arc}
spec:
  model:
    name: some/model
    architecture: {kvBytesPerToken: 16384, maxPositionEmbeddings: 131072}
    weightsPerGPU: 10Gi
  engine: {kind: vllm, version: "0.19.0"}
  gpu: {count: 1, product: NVIDIA-L40S, memory: 46068Mi}
  context: {target: 100000, minimum: 8192}
  memory: {gpuMemoryUtilization: 0.9}
"""
# https://github.com/SergiioB/intel-arc-pro-b70-inference-cookbook/issues/4, the reporter's line wrap undone
ARC_MESSAGE = ("(EngineCore pid=316) ValueError: To serve at least one request with the model's max seq len (100000), "
               "(4.26 GiB KV cache is needed, which is larger than the available KV cache memory (4.25 GiB). Based on "
               "the avai")


def test_kv_step_trusts_the_engines_bytes_per_token_when_it_says_less_fits(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The spec's measured 16 KiB/token says 278k tokens fit in 4.25 GiB; vLLM's own numbers (4.26 GiB for 100000
    tokens, ~45.7 KB/token) say 99765. The step must come from the smaller: 99765 x 0.75 -> 65536, not 98304."""
    server, log, current = tmp_path / "s.yaml", tmp_path / "m.txt", tmp_path / "c.yaml"
    server.write_text(ARC_SERVER)
    log.write_text(ARC_MESSAGE)
    current.write_text("contextLength: 100000\n")
    code = main(["diagnose", "-f", str(server), "--message-file", str(log), "--current", str(current), "-o", "json"])
    doc = json.loads(capsys.readouterr().out)
    assert code == 0 and doc["failure"]["kind"] == "KVCacheTooSmall"
    assert doc["next"]["contextLength"] == 65536
    assert "from the message" in doc["explanation"]
