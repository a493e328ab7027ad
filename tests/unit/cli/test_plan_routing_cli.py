"""``ctxfit plan`` shows the pool of a server with ``spec.routing.inferencePool``, the name it serves and the
context label its pods will carry; the numbers are the renderer's."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import yaml
from ctxfit.api import InferenceServer
from ctxfit.budget.multinode import plan_group
from ctxfit.render import RenderInput
from ctxfit.render.inferencepool import CONTEXT_RANGE_LABEL
from ctxfit.render.leaderworkerset import render_workload

ROOT = Path(__file__).resolve().parents[3]
GOLDEN = ROOT / "tests" / "golden" / "gateway"


def run_cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "ctxfit.cli", *args], capture_output=True, text=True, cwd=ROOT,
                          timeout=60)


def _pod_labels(case: str) -> dict[str, str]:
    server = InferenceServer.model_validate(yaml.safe_load((GOLDEN / case / "inferenceserver.yaml").read_text()))
    result, _ = plan_group(server.spec)
    workload = render_workload(RenderInput(name=server.metadata.name, namespace="n", uid="u", spec=server.spec,
                                           effective=result.effective, attempt=1))
    template = (workload["spec"]["template"] if workload["kind"] == "Deployment"
                else workload["spec"]["leaderWorkerTemplate"]["leaderTemplate"])
    return dict(template["metadata"]["labels"])


def test_json_has_the_pool_and_the_label_the_pods_get() -> None:
    for case, role, ports in (("vllm-join-l4", "Joined", [8000]), ("vllm-dp2", "Created", [8000, 8001]),
                              ("sglang-lws-2x8", "Created", [8000])):
        proc = run_cli("plan", "-f", f"tests/golden/gateway/{case}/inferenceserver.yaml", "-o", "json")
        assert proc.returncode == 0, proc.stderr
        routing = json.loads(proc.stdout)["routing"]
        assert (routing["role"], routing["targetPorts"]) == (role, ports)
        assert routing["contextRange"] == _pod_labels(case)[CONTEXT_RANGE_LABEL]
        assert routing["contextLength"] == json.loads(proc.stdout)["contextLength"]


def test_table_names_the_pool_and_served_name() -> None:
    proc = run_cli("plan", "-f", "tests/golden/gateway/vllm-join-l4/inferenceserver.yaml")
    assert proc.returncode == 0, proc.stderr
    line = next(x for x in proc.stdout.splitlines() if x.startswith("routing:"))
    assert "joins InferencePool llama31-8b as 'llama-3.1-8b'" in line
    assert f"{CONTEXT_RANGE_LABEL}={_pod_labels('vllm-join-l4')[CONTEXT_RANGE_LABEL]}" in line


def test_no_routing_without_a_pool() -> None:
    proc = run_cli("plan", "-f", "manifests/llama31-8b-h100.yaml", "-o", "json")
    assert "routing" not in json.loads(proc.stdout)
    assert not [x for x in run_cli("plan", "-f", "manifests/llama31-8b-h100.yaml").stdout.splitlines()
                if x.startswith("routing:")]
