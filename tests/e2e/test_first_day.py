"""A user's first day against the real API server: `kubectl explain` documents every field, `describe`
of a vLLM server shows no `<nil>` field, and the operator logs its decisions per server."""

from __future__ import annotations

import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any

from .operator_kit import OperatorProcess, ServerClient, condition, manifest


def _explain(cluster: Any, *args: str, timeout: float = 60.0) -> str:
    """``kubectl explain`` once the API server's discovery and OpenAPI serve the CRD: right after it is Established
    (or re-created by an earlier test) kubectl may still say "couldn't find resource", from the server's lagging
    aggregated discovery or its own discovery cache; each try uses a fresh cache directory. Other errors raise."""
    deadline = time.monotonic() + timeout
    while True:
        with tempfile.TemporaryDirectory(prefix="kubectl-cache-") as cache:
            proc = cluster.kubectl_proc("explain", *args, "--cache-dir", cache)
        if proc.returncode == 0:
            out: str = proc.stdout
            return out
        if "couldn't find resource" not in proc.stderr or time.monotonic() > deadline:
            raise AssertionError(f"kubectl explain {' '.join(args)} failed ({proc.returncode}): {proc.stderr}")
        time.sleep(1.0)


def test_kubectl_explain_documents_the_fields(cluster: Any, crd: Path) -> None:
    out = _explain(cluster, "inferenceservers.spec.context.minimum")
    assert "<no description>" not in out and "Smallest useful context (tokens)" in out
    out = _explain(cluster, "inferenceservers.status.effective.memFractionStatic")
    assert "SGLang only" in out
    out = _explain(cluster, "inferenceservers.spec", "--recursive")
    assert "<no description>" not in out


def test_vllm_server_status_has_no_nil_and_logs_decisions(op: OperatorProcess, api: ServerClient,
                                                          namespace: str) -> None:
    api.create(manifest("kimi-128k.yaml"))
    server = api.wait_phase("kimi-k25", "Ready")
    assert "memFractionStatic" not in server["status"]["effective"]
    assert all("memFractionStatic" not in a["effective"] for a in server["status"]["attempts"])
    fits = condition(server, "BudgetFits")
    assert fits["reason"] == "Fits" and "does not fit" not in fits["message"]
    describe = subprocess.run([str(api.kubectl_bin), "describe", "infsrv", "kimi-k25", "-n", namespace],
                              capture_output=True, text=True, check=True, env=api.env).stdout
    assert "<nil>" not in describe and "Mem Fraction Static" not in describe
    # the pass that writes Ready logs its decision after the write: wait for the line, a status read can come first
    wanted = [f"[{namespace}/kimi-k25] {line}" for line in (
        "planned context 131072", "started attempt 1 with context 131072", "Ready: attempt 1 serves context 131072")]
    deadline = time.monotonic() + 15.0
    while not all(w in (log := op.log_path.read_text()) for w in wanted) and time.monotonic() < deadline:
        time.sleep(0.25)
    for w in wanted:
        assert w in log, log[-3000:]
