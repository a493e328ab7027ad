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

ROOT = Path(__file__).resolve().parents[3]
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


# Regression: the reviewer's reproducers (bad values, non-finite numbers, markup, closed pipes, no cap).

NAN_MESSAGE = ("ValueError: The model's max seq len (1048576) is larger than the maximum number of tokens that can "
               "be stored in KV cache (NaN).\n")
ABSURD_MESSAGE = (
    "ValueError: To serve at least one request with the models's max seq len (73786976294838206464), "
    "(99999999999999999999 GiB KV cache is needed, which is larger than the available KV cache memory (11.70 GiB). "
    "Based on the available memory, the estimated maximum model length is 98386976294838206464.\n"
)


def _one_error_line(err: str) -> str:
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("ctxfit: error: "), err
    assert "Traceback" not in err
    return lines[0]


@pytest.mark.parametrize(
    ("flag", "data", "expected"),
    [
        ("--history", "- {contextLength: .inf, failure: KVCacheTooSmall}\n",
         "--history[0].contextLength: must be a whole number"),
        ("--history", "- {memoryLimit: inf, failure: HostOOMKilled}\n", "--history[0].memoryLimit: must be a finite"),
        ("--history", "- {memoryLimit: .nan, failure: HostOOMKilled}\n", "--history[0].memoryLimit: must be a finite"),
        ("--current", "{contextLength: .inf}\n", "--current.contextLength: must be a whole number"),
        ("--current", "{memoryLimit: '-1Gi'}\n", "--current.memoryLimit: must be between 1Mi and 64Ti"),
        ("--current", "{gpuMemoryUtilization: abc}\n", "--current.gpuMemoryUtilization: must be a number"),
        ("--history", "- {gpuMemoryUtilization: abc, failure: Unknown}\n",
         "--history[0].gpuMemoryUtilization: must be a number"),
        ("--history", "- {contextLength: abc, failure: Unknown}\n", "--history[0].contextLength: must be a whole"),
        ("--current", "{gpuMemoryUtilization: 7}\n", "--current.gpuMemoryUtilization: must be in (0, 1]"),
        ("--current", "{gpuMemoryUtilization: .nan}\n", "--current.gpuMemoryUtilization: must be a number"),
        ("--current", "{kvCacheDtype: int3}\n", "--current.kvCacheDtype: must be one of auto"),
        ("--current", "{maxNumSeqs: 0}\n", "--current.maxNumSeqs: must be between 1 and 65536"),
        ("--current", "{cudaGraphMaxBatchSize: -4}\n", "--current.cudaGraphMaxBatchSize: must be between 1 and 4096"),
        ("--current", "{contextLength: 0}\n", "--current.contextLength: must be between 16 and 134217728"),
        ("--current", "{contextLength: -8}\n", "--current.contextLength: must be between 16"),
        ("--current", "{contextLength: 1.5}\n", "--current.contextLength: must be a whole number"),
        ("--current", "{contextLength: true}\n", "--current.contextLength: must be a whole number"),
        ("--current", "{memoryLimit: 0}\n", "--current.memoryLimit: must be between 1Mi and 64Ti"),
        ("--current", "{shmSize: 1Ei}\n", "--current.shmSize: must be between 1Mi and 64Ti"),
        ("--current", "{startupTimeoutSeconds: 5}\n", "--current.startupTimeoutSeconds: must be between 30"),
        ("--current", "{contextLenght: 4096}\n", "--current.contextLenght: unknown field; did you mean contextLength?"),
        ("--history", "- {failure: Unknown, bogus: 1}\n", "--history[0].bogus: unknown field"),
        ("--current", "{memFractionStatic: 0.8}\n", "--current.memFractionStatic: is not a vLLM setting"),
        ("--current", "{gpuMemoryUtilization: null}\n", "--current.gpuMemoryUtilization: required for vLLM"),
        ("--history", "- {contextLength: 4096}\n", "--history[0].failure: required"),
        ("--current", "[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[\n",
         "--current:"),
    ],
    ids=lambda v: v if isinstance(v, str) and len(v) < 40 and not v.startswith("-") else None,
)
def test_bad_fields_exit_2_naming_the_field(files: dict[str, Path], capsys: pytest.CaptureFixture[str], flag: str,
                                            data: str, expected: str) -> None:
    path = _write(files["dir"] / "input.yaml", data)
    code, out, err = diagnose(capsys, "-f", str(files["server"]), "--message-file", str(files["message"]),
                              flag, str(path), "-o", "json")
    assert code == 2 and out == ""
    assert expected in _one_error_line(err)


@pytest.mark.parametrize("which", ["--history", "--current", "-f"])
def test_non_utf8_files_are_named(files: dict[str, Path], capsys: pytest.CaptureFixture[str], which: str) -> None:
    bad = files["dir"] / "latin1.yaml"
    bad.write_bytes(b"\xff\xfe- {failure: Unknown}\n")
    server = str(bad) if which == "-f" else str(files["server"])
    extra = [which, str(bad)] if which != "-f" else []
    code, out, err = diagnose(capsys, "-f", server, "--message-file", str(files["message"]), *extra)
    line = _one_error_line(err)
    assert code == 2 and out == ""
    assert "latin1.yaml" in line and "UTF-8" in line


def test_non_utf8_message_is_read(files: dict[str, Path], capsys: pytest.CaptureFixture[str]) -> None:
    message = files["dir"] / "message.bin"
    message.write_bytes(b"\xff\xfe" + KIMI_MESSAGE.encode())
    code, out, _ = diagnose(capsys, "-f", str(files["server"]), "--message-file", str(message), "-o", "json")
    assert code == 0 and json.loads(out)["next"]["contextLength"] == 131072


@pytest.mark.parametrize(("value", "expected"), [
    ("abc", "--exit-code: must be a whole number, got 'abc'"),
    ("1.5", "--exit-code: must be a whole number"),
    ("99999999999999999999", "--exit-code: must be an int32"),
])
def test_exit_code_errors_are_one_line(files: dict[str, Path], capsys: pytest.CaptureFixture[str], value: str,
                                       expected: str) -> None:
    code, out, err = diagnose(capsys, "-f", str(files["server"]), "--message-file", str(files["message"]),
                              "--exit-code", value)
    assert code == 2 and out == ""
    assert expected in _one_error_line(err)


def test_markup_in_user_text_is_printed_literally(files: dict[str, Path], capsys: pytest.CaptureFixture[str]) -> None:
    server = _write(files["dir"] / "markup.yaml", {"apiVersion": "ctxfit.io/v1alpha1", "kind": "InferenceServer",
                                                   "metadata": {"name": "x-markup"}, "spec": KIMI_SPEC})
    message = _write(files["dir"] / "markup.txt", "RuntimeError: [bold]boom[/] :smile: [/]\n")
    code, out, err = diagnose(capsys, "-f", str(server), "--message-file", str(message), "--reason", "[red]x[/]")
    assert code == 0, err
    assert "x-markup: diagnosis" in out and "[bold]boom[/] :smile: [/]" in out


def test_a_name_the_api_server_would_refuse_is_refused_and_printed_literally(
        files: dict[str, Path], capsys: pytest.CaptureFixture[str]) -> None:
    server = _write(files["dir"] / "markup.yaml", {"apiVersion": "ctxfit.io/v1alpha1", "kind": "InferenceServer",
                                                   "metadata": {"name": "x[/]"}, "spec": KIMI_SPEC})
    code, out, err = diagnose(capsys, "-f", str(server), "--message-file", str(files["message"]))
    assert code == 2 and out == ""
    line = _one_error_line(err)
    assert "x[/]" in line and "metadata.name: must be a DNS-1035 label" in line


def test_closed_stdout_ends_quietly(files: dict[str, Path]) -> None:
    for output in ("json", "table"):
        proc = subprocess.Popen(
            [sys.executable, "-m", "ctxfit.cli", "diagnose", "-f", str(files["server"]), "--message-file",
             str(files["message"]), "-o", output],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=ROOT,
        )
        assert proc.stdout is not None and proc.stderr is not None
        proc.stdout.close()  # the reader goes away before the first write (like `| head -0`)
        err = proc.stderr.read().decode()
        assert proc.wait(timeout=60) == 1, err
        assert err == "", err


def test_next_context_is_capped_at_the_model_maximum(files: dict[str, Path],
                                                     capsys: pytest.CaptureFixture[str]) -> None:
    message = _write(files["dir"] / "nan.txt", NAN_MESSAGE)
    code, out, _ = diagnose(capsys, "-f", str(files["server"]), "--message-file", str(message), "-o", "json")
    doc = json.loads(out)
    assert code == 0 and doc["failure"]["kind"] == "KVCacheTooSmall" and not doc["permanent"]
    assert "estimatedMaxContextLength" not in doc["failure"]["numbers"]  # "(NaN)" is not a number
    assert doc["next"]["contextLength"] == 262144  # Kimi-K2.5's maximum and the target; 1048576 failed
    assert "262144" in doc["explanation"]


def test_absurd_numbers_are_ignored(files: dict[str, Path], capsys: pytest.CaptureFixture[str]) -> None:
    message = _write(files["dir"] / "absurd.txt", ABSURD_MESSAGE)
    code, out, _ = diagnose(capsys, "-f", str(files["server"]), "--message-file", str(message), "-o", "json")
    doc = json.loads(out)
    assert code == 0 and doc["failure"]["kind"] == "KVCacheTooSmall"
    assert set(doc["failure"]["numbers"]) == {"availableBytes"}
    assert 16 <= doc["next"]["contextLength"] <= 131072
    assert "73786976294838206464" not in doc["explanation"]


def test_current_above_the_target_is_capped(files: dict[str, Path], capsys: pytest.CaptureFixture[str]) -> None:
    current = _write(files["dir"] / "current.yaml", {"contextLength": 1048576})
    code, out, _ = diagnose(capsys, "-f", str(files["server"]), "--message-file", str(files["message"]),
                            "--reason", "OOMKilled", "--current", str(current), "-o", "json")
    doc = json.loads(out)
    assert code == 0 and doc["failure"]["kind"] == "HostOOMKilled"
    assert doc["next"]["contextLength"] == 262144 and "capped" in doc["explanation"]


@pytest.mark.parametrize("which", ["--current", "-f"])
def test_yaml_constructor_limits_name_the_file(files: dict[str, Path], capsys: pytest.CaptureFixture[str],
                                               which: str) -> None:
    digits = "9" * 6000  # PyYAML's int() hits Python's 4300-digit limit: a ValueError, not a YAMLError
    if which == "-f":
        text = files["server"].read_text(encoding="utf-8").replace("count: 8", f"count: {digits}")
        path = _write(files["dir"] / "huge.yaml", text)
        args = ["-f", str(path), "--message-file", str(files["message"])]
    else:
        path = _write(files["dir"] / "huge.yaml", f"{{contextLength: {digits}}}\n")
        args = ["-f", str(files["server"]), "--message-file", str(files["message"]), "--current", str(path)]
    code, out, err = diagnose(capsys, *args)
    assert code == 2 and out == ""
    assert "huge.yaml" in _one_error_line(err)


def test_driver_too_old_names_the_node(files: dict[str, Path], capsys: pytest.CaptureFixture[str]) -> None:
    message = files["dir"] / "driver.txt"
    message.write_text("RuntimeError: The NVIDIA driver on your system is too old (found version 12040).\n",
                       encoding="utf-8")
    code, out, _ = diagnose(capsys, "-f", str(files["server"]), "--message-file", str(message), "--node", "gpu-7",
                            "-o", "json")
    doc = json.loads(out)
    assert code == 0 and doc["permanent"] is True and doc["next"] is None
    assert doc["failure"]["kind"] == "CUDADriverTooOld" and doc["failure"]["node"] == "gpu-7"
    assert "node gpu-7" in doc["explanation"] and "CUDA 12.4" in doc["explanation"]


def test_unknown_quotes_the_error_line_in_whole_words(files: dict[str, Path],
                                                      capsys: pytest.CaptureFixture[str]) -> None:
    message = files["dir"] / "unknown.txt"
    detail = " ".join(f"token{i}" for i in range(200))
    message.write_text(f"INFO up\nTypeError: unexpected keyword {detail}\nINFO shutting down\n", encoding="utf-8")
    history = _write(files["dir"] / "history.yaml", [])
    code, out, _ = diagnose(capsys, "-f", str(files["server"]), "--message-file", str(message), "--history",
                            str(history), "-o", "json")
    doc = json.loads(out)
    assert code == 0 and doc["failure"]["kind"] == "Unknown" and doc["permanent"] is False
    evidence = doc["failure"]["evidence"]
    assert evidence.startswith("TypeError: unexpected keyword") and evidence.endswith("...")
    assert evidence[:-3].split(" ")[-1] in detail.split(" ")
    assert "TypeError: unexpected keyword" in doc["explanation"]


def test_a_server_the_planner_cannot_plan_is_diagnosed_with_a_warning_saying_so(
        files: dict[str, Path], capsys: pytest.CaptureFixture[str]) -> None:
    """``plan`` refuses an unknown GPU product; ``diagnose`` still classifies the failure but says, in one line on
    stderr, that it assumed the spec's own values (and how to give what ran); a plannable server has no warning."""
    code, _, err = diagnose(capsys, "-f", str(files["server"]), "--message-file", str(files["message"]))
    assert code == 0 and "warning" not in err
    spec = {**KIMI_SPEC, "gpu": {"count": 8, "product": "NVIDIA-Imaginary-9000"}}
    odd = files["dir"] / "odd.yaml"
    odd.write_text(yaml.safe_dump({"apiVersion": "ctxfit.io/v1alpha1", "kind": "InferenceServer",
                                   "metadata": {"name": "odd"}, "spec": spec}), encoding="utf-8")
    code, out, err = diagnose(capsys, "-f", str(odd), "--message-file", str(files["message"]), "-o", "json")
    assert code == 0 and json.loads(out)["failure"]["kind"] == "KVCacheTooSmall"
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"ctxfit: warning: {odd}: the planner cannot plan this server (")
    assert "NVIDIA-Imaginary-9000" in lines[0] and "--current FILE" in lines[0]
