"""The CLI's standard streams and input sizes: output that cannot be written, a closed stdin or stdout, an input
that never ends, two documents for one server. Each is one line on stderr and a non-zero exit, never a traceback
nor a silent exit 0 (the real CLI in a subprocess, with the file descriptors as a shell leaves them)."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.unit.cli.clikit import ROOT

MANIFEST = str(ROOT / "manifests" / "llama31-8b-h100.yaml")


def ctxfit(*args: str, stdout: int | object = subprocess.PIPE, close: int | None = None,
           stdin: object = subprocess.DEVNULL) -> tuple[int, list[str]]:
    """Exit code and stderr lines of ``ctxfit ARGS`` (``close``: that descriptor closed in the child, as
    ``<&-`` / ``>&-`` do)."""
    pre: Callable[[], None] | None = (lambda: os.close(close)) if close is not None else None
    proc = subprocess.run([sys.executable, "-m", "ctxfit.cli", *args], cwd=ROOT, timeout=60, text=True,
                          stdin=None if close == 0 else stdin, stdout=None if close == 1 else stdout,
                          stderr=subprocess.PIPE, preexec_fn=pre)
    return proc.returncode, proc.stderr.strip().splitlines()


@pytest.mark.parametrize("args", [["plan", "-f", MANIFEST], ["plan", "-f", MANIFEST, "-o", "json"], ["crd"],
                                  ["diagnose", "-f", MANIFEST, "--message-file", MANIFEST]])
def test_output_to_a_full_disk_is_one_line_and_exit_1(args: list[str]) -> None:
    with open("/dev/full", "w") as full:
        code, lines = ctxfit(*args, stdout=full)
    assert code == 1 and lines == ["ctxfit: error: cannot write the output: No space left on device"], lines


def test_a_closed_stdout_is_exit_1_not_a_silent_success() -> None:
    code, lines = ctxfit("plan", "-f", MANIFEST, close=1)
    assert code == 1 and lines == ["ctxfit: error: cannot write the output: standard output is closed"], lines


@pytest.mark.parametrize("args", [["plan", "-f", "-"], ["diagnose", "-f", MANIFEST, "--message-file", "-"]])
def test_a_closed_stdin_is_one_line_and_exit_2(args: list[str]) -> None:
    code, lines = ctxfit(*args, close=0)
    assert code == 2 and len(lines) == 1 and lines[0].endswith("stdin is not open"), lines


def test_an_input_that_never_ends_is_refused_past_its_cap() -> None:
    code, lines = ctxfit("plan", "-f", "/dev/zero")
    assert code == 2 and lines == ["ctxfit: error: /dev/zero: larger than 16 MiB"], lines


def test_one_server_given_twice_in_a_file_is_refused(tmp_path: Path) -> None:
    text = Path(MANIFEST).read_text()
    twice = tmp_path / "twice.yaml"
    twice.write_text(text + "\n---\n" + text)
    for args in (["plan", "-f", str(twice)], ["plan", "-f", str(twice), "--name", "llama31-8b"],
                 ["diagnose", "-f", str(twice), "--name", "llama31-8b", "--message-file", MANIFEST]):
        code, lines = ctxfit(*args)
        assert code == 2 and lines == [f"ctxfit: error: {twice}: InferenceServer 'llama31-8b' is given twice "
                                       "(documents 1 and 2); kubectl apply would write it twice, the last one "
                                       "winning"], lines
    other = tmp_path / "two-namespaces.yaml"  # the same name in another namespace is another object
    other.write_text(text + "\n---\n" + text.replace("  name: llama31-8b\n", "  name: llama31-8b\n  namespace: b\n"))
    assert "namespace: b" in other.read_text()
    code, lines = ctxfit("plan", "-f", str(other))
    assert code == 0, lines


@pytest.mark.parametrize(("edit", "line"), [
    (("count: 1", "count: true"), "spec.gpu.count: must be an integer (got boolean True)"),
    (("target: 131072", 'target: "131072"'), "spec.context.target: must be an integer (got string '131072')"),
])
def test_a_type_kubectl_refuses_is_refused_not_coerced(tmp_path: Path, edit: tuple[str, str], line: str) -> None:
    text = Path(MANIFEST).read_text()
    assert edit[0] in text, "the manifest changed: the test proves nothing"
    path = tmp_path / "typed.yaml"
    path.write_text(text.replace(edit[0], edit[1], 1))
    code, lines = ctxfit("plan", "-f", str(path))
    assert code == 2 and lines == [f"ctxfit: error: {line}"], lines
