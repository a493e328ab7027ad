"""``ctxfit diagnose``: JSON keys, table output, --history / --current / --event / --reason, exit codes."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml
from ctxfit.cli import main

ROOT = Path(__file__).resolve().parents[2]
KIMI_SPEC = {
    "engine": {"kind": "vllm", "version": "0.11.0"},
    "model": {"name": "moonshotai/Kimi-K2.5", "weightsPerGPU": "70.8Gi"},
    "gpu": {"count": 8, "product": "NVIDIA-RTX-PRO-6000-Blackwell-Server-Edition", "memory": "97887Mi"},
    "parallelism": {"tensor": 8},
    "context": {"target": 262144, "minimum": 32768, "headroom": 0.25},
    "memory": {"gpuMemoryUtilization": 0.95},
}
KIMI_MESSAGE = (
    "ValueError: To serve at least one request with the models's max seq len (262144), (17.16 GiB KV cache is "
    "needed, which is larger than the available KV cache memory (11.70 GiB). Based on the available memory, the "
    "estimated maximum model length is 178752. Try increasing `gpu_memory_utilization` or decreasing "
    "`max_model_len` when initializing the engine.\n"
)
NEXT_KEYS = {"contextLength", "gpuMemoryUtilization", "memFractionStatic", "kvCacheDtype", "maxNumSeqs",
             "cudaGraphMaxBatchSize", "memoryLimit", "shmSize", "startupTimeoutSeconds"}


@pytest.fixture
def files(tmp_path: Path) -> dict[str, Path]:
    server = tmp_path / "server.yaml"
    server.write_text(yaml.safe_dump({"apiVersion": "ctxfit.io/v1alpha1", "kind": "InferenceServer",
                                      "metadata": {"name": "kimi"}, "spec": KIMI_SPEC}), encoding="utf-8")
    message = tmp_path / "message.txt"
    message.write_text(KIMI_MESSAGE, encoding="utf-8")
    return {"server": server, "message": message, "dir": tmp_path}


def diagnose(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    code = main(["diagnose", *args])
    out = capsys.readouterr()
    return code, out.out, out.err


def test_json_document(files: dict[str, Path], capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = diagnose(capsys, "-f", str(files["server"]), "--message-file", str(files["message"]), "-o", "json")
    assert code == 0
    doc = json.loads(out)
    assert list(doc) == ["failure", "permanent", "next", "explanation"]
    assert set(doc["failure"]) == {"kind", "numbers", "evidence"}
    assert set(doc["next"]) == NEXT_KEYS
    assert doc["failure"]["kind"] == "KVCacheTooSmall"
    assert doc["failure"]["numbers"]["estimatedMaxContextLength"] == 178752
    assert doc["permanent"] is False
    assert doc["next"]["contextLength"] == 131072
    assert doc["next"]["memoryLimit"].endswith("Gi")
    assert "178752" in doc["explanation"] and "131072" in doc["explanation"]


def test_table_is_the_default(files: dict[str, Path], capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = diagnose(capsys, "-f", str(files["server"]), "--message-file", str(files["message"]))
    assert code == 0
    for text in ("KVCacheTooSmall", "estimatedMaxContextLength", "178,752", "contextLength *", "131072", "retry"):
        assert text in out, text


def test_history_skips_a_failed_configuration(files: dict[str, Path], capsys: pytest.CaptureFixture[str]) -> None:
    history = files["dir"] / "history.yaml"
    history.write_text(yaml.safe_dump([{"contextLength": 131072, "failure": "GraphCaptureOOM"}]), encoding="utf-8")
    code, out, _ = diagnose(capsys, "-f", str(files["server"]), "--message-file", str(files["message"]),
                            "--history", str(history), "-o", "json")
    assert code == 0
    assert json.loads(out)["next"]["contextLength"] == 98304


def test_history_bounds_attempts(files: dict[str, Path], capsys: pytest.CaptureFixture[str]) -> None:
    history = files["dir"] / "history.yaml"
    history.write_text(yaml.safe_dump([{"contextLength": c, "failure": "KVCacheTooSmall"}
                                       for c in (524288, 393216, 327680, 300000)]), encoding="utf-8")
    code, out, _ = diagnose(capsys, "-f", str(files["server"]), "--message-file", str(files["message"]),
                            "--history", str(history), "-o", "json")
    doc = json.loads(out)
    assert code == 0 and doc["permanent"] is True and doc["next"] is None
    assert "spec.attempts" in doc["explanation"]


def test_current_overrides_the_plan(files: dict[str, Path], capsys: pytest.CaptureFixture[str]) -> None:
    current = files["dir"] / "current.yaml"
    current.write_text(yaml.safe_dump({"shmSize": "64Mi", "memoryLimit": "100Gi"}), encoding="utf-8")
    message = files["dir"] / "shm.txt"
    message.write_text("Error while creating shared memory segment /dev/shm/nccl-x (size 9637888)\n", encoding="utf-8")
    code, out, _ = diagnose(capsys, "-f", str(files["server"]), "--message-file", str(message),
                            "--current", str(current), "-o", "json")
    doc = json.loads(out)
    assert code == 0 and doc["failure"]["kind"] == "SharedMemoryTooSmall"
    assert doc["next"]["shmSize"] == "1Gi" and doc["next"]["memoryLimit"] == "100Gi"


def test_reason_exit_code_and_events(files: dict[str, Path], capsys: pytest.CaptureFixture[str]) -> None:
    empty = files["dir"] / "empty.txt"
    empty.write_text("", encoding="utf-8")
    code, out, _ = diagnose(capsys, "-f", str(files["server"]), "--message-file", str(empty), "--reason", "Error",
                            "--exit-code", "143", "--event", "Startup probe failed: connection refused",
                            "--event", "Container vllm failed startup probe, will be restarted", "-o", "json")
    doc = json.loads(out)
    assert code == 0 and doc["failure"]["kind"] == "StartupProbeTimeout"
    assert doc["failure"]["numbers"] == {"exitCode": 143}
    current = _write(files["dir"] / "current.yaml", {"contextLength": 262144, "memoryLimit": "160Gi"})
    code, out, _ = diagnose(capsys, "-f", str(files["server"]), "--message-file", str(files["message"]),
                            "--reason", "OOMKilled", "--exit-code", "137", "--current", str(current), "-o", "json")
    doc = json.loads(out)
    assert doc["failure"]["kind"] == "HostOOMKilled"
    assert doc["next"]["memoryLimit"] == "240Gi"
    assert doc["next"]["contextLength"] == 262144  # a host OOM never touches the context


def test_permanent_verdict_is_printed(files: dict[str, Path], capsys: pytest.CaptureFixture[str]) -> None:
    message = files["dir"] / "weights.txt"
    message.write_text("RuntimeError: Failed to load model - not enough GPU memory.\n", encoding="utf-8")
    code, out, _ = diagnose(capsys, "-f", str(files["server"]), "--message-file", str(message))
    assert code == 0
    assert "WeightsDoNotFit" in out and "permanent" in out


def test_message_from_stdin(files: dict[str, Path], monkeypatch: pytest.MonkeyPatch,
                            capsys: pytest.CaptureFixture[str]) -> None:
    import io

    monkeypatch.setattr(sys, "stdin", io.StringIO(KIMI_MESSAGE))
    code, out, _ = diagnose(capsys, "-f", str(files["server"]), "--message-file", "-", "-o", "json")
    assert code == 0 and json.loads(out)["failure"]["kind"] == "KVCacheTooSmall"


def _write(path: Path, data: Any) -> Path:
    path.write_text(data if isinstance(data, str) else yaml.safe_dump(data), encoding="utf-8")
    return path


@pytest.mark.parametrize(
    ("case", "expected"),
    [
        ("missing-manifest", "cannot read"),
        ("bad-spec", "parallelism"),
        ("missing-message", "--message-file: cannot read"),
        ("history-not-a-list", "--history: expected a YAML list"),
        ("history-bad-kind", "--history[0].failure: 'Exploded' is not one of"),
        ("history-bad-quantity", "--history[0]."),
        ("history-bad-yaml", "--history:"),
        ("current-not-a-mapping", "--current: expected a mapping"),
    ],
)
def test_bad_input_exits_2_with_one_line(files: dict[str, Path], capsys: pytest.CaptureFixture[str], case: str,
                                         expected: str) -> None:
    d = files["dir"]
    server, message = str(files["server"]), str(files["message"])
    extra: list[str] = []
    if case == "missing-manifest":
        server = str(d / "nope.yaml")
    elif case == "bad-spec":
        bad = {**KIMI_SPEC, "parallelism": {"tensor": 3}}
        server = str(_write(d / "bad.yaml", {"apiVersion": "ctxfit.io/v1alpha1", "kind": "InferenceServer",
                                             "spec": bad}))
    elif case == "missing-message":
        message = str(d / "nope.txt")
    elif case == "history-not-a-list":
        extra = ["--history", str(_write(d / "h.yaml", {"contextLength": 1}))]
    elif case == "history-bad-kind":
        extra = ["--history", str(_write(d / "h.yaml", [{"failure": "Exploded"}]))]
    elif case == "history-bad-quantity":
        extra = ["--history", str(_write(d / "h.yaml", [{"memoryLimit": "lots", "failure": "Unknown"}]))]
    elif case == "history-bad-yaml":
        extra = ["--history", str(_write(d / "h.yaml", "- [unclosed"))]
    elif case == "current-not-a-mapping":
        extra = ["--current", str(_write(d / "c.yaml", [1, 2]))]
    code, out, err = diagnose(capsys, "-f", server, "--message-file", message, *extra)
    assert code == 2
    assert out == ""
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("ctxfit: error: ")
    assert expected in lines[0], lines[0]


def test_console_script_module(files: dict[str, Path]) -> None:
    out = subprocess.run(
        [sys.executable, "-m", "ctxfit.cli", "diagnose", "-f", str(files["server"]), "--message-file",
         str(files["message"]), "-o", "json"],
        capture_output=True, text=True, cwd=ROOT, timeout=60,
    )
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout)["next"]["contextLength"] == 131072
