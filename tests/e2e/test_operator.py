"""Operator acceptance against the real local control plane: scenarios 1-7.

Each test gets its own namespace and runs the operator for real (``python -m ctxfit.controller`` as a
subprocess watching only that namespace, ``tests/e2e/test_operator_restart.py`` kills it mid-way).
The engine is kwok's simulated one (hack/README.md): pod labels/annotations from ``spec.pod`` choose
its fate, conditionally on the annotations the operator writes (``ctxfit.io/context-length``...).
"""

from __future__ import annotations

import copy
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml
from ctxfit.api import quantity_to_bytes
from ctxfit_cluster import NodeSpec

from .operator_kit import (
    GPU_PRODUCT_LABEL,
    OperatorProcess,
    ServerClient,
    condition,
    engine_args,
    kimi_262k,
    manifest,
    with_sim,
)

REPO = Path(__file__).resolve().parents[2]

GRAPH_MESSAGE = (
    "Capture cuda graph failed: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity of "
    "95.59 GiB of which 1.20 GiB is free."
)
WEIGHTS_MESSAGE = (
    "Loading safetensors checkpoint shards:  40% Completed | 48/119\ntorch.OutOfMemoryError: CUDA out of memory. "
    "Tried to allocate 1.50 GiB. GPU 0 has a total capacity of 95.59 GiB of which 512.00 MiB is free."
)


def test_kimi_128k_ready(op: OperatorProcess, api: ServerClient, namespace: str) -> None:
    """Scenario 1: kimi-128k.yaml -> vLLM flags, RTX PRO 6000 node, Ready, contextLength 131072."""
    api.create(manifest("kimi-128k.yaml"))
    server = api.wait_phase("kimi-k25", "Ready")
    assert server["status"]["contextLength"] == 131072
    assert condition(server, "Ready")["status"] == "True"
    assert condition(server, "BudgetFits")["status"] == "True"
    assert condition(server, "EngineVersionModelled")["reason"] == "VersionModelled"
    args = " ".join(engine_args(api.deployment("kimi-k25")))
    for flag in ("--max-model-len 131072", "--tensor-parallel-size 8", "--gpu-memory-utilization 0.95"):
        assert flag in args
    pod = api.pods("kimi-k25")[0]
    node = api.node(pod["spec"]["nodeName"])
    assert node["metadata"]["labels"][GPU_PRODUCT_LABEL] == "NVIDIA-RTX-PRO-6000-Blackwell-Server-Edition"
    assert pod["metadata"]["annotations"]["ctxfit.io/context-length"] == "131072"
    assert pod["metadata"]["labels"]["app.kubernetes.io/managed-by"] == "ctxfit"
    assert server["status"]["endpoint"] == f"http://kimi-k25.{namespace}.svc:8000"
    assert api.service("kimi-k25")["spec"]["ports"][0]["name"] == "http"
    metrics = op.scrape()
    assert f'ctxfit_server_context_length_tokens{{engine="vllm",name="kimi-k25",namespace="{namespace}"}} 131072.0' \
        in metrics
    assert op.healthz() == 200


def test_kimi_262k_steps_down_once(op: OperatorProcess, api: ServerClient) -> None:
    """Scenario 2: the engine's 'estimated maximum model length is 178752' -> one failure, then 131072."""
    api.create(kimi_262k())
    server = api.wait_phase("kimi-k25", "Ready")
    attempts = server["status"]["attempts"]
    assert [a["outcome"] for a in attempts] == ["Failed", "Succeeded"]
    assert attempts[0]["effective"]["contextLength"] == 262144
    assert attempts[0]["failureKind"] == "KVCacheTooSmall"
    assert attempts[1]["effective"]["contextLength"] == 131072
    assert server["status"]["contextLength"] == 131072
    assert condition(server, "Degraded")["reason"] == "SteppedDown"
    failed = [e for e in api.events("kimi-k25") if e["reason"] == "AttemptFailed"]
    assert len(failed) == 1 and "178752" in failed[0]["message"] and "131072" in failed[0]["message"]
    assert "--max-model-len 131072" in " ".join(engine_args(api.deployment("kimi-k25")))


def test_oomkilled_raises_memory_limit(api: ServerClient, cluster: Any, namespace: str, tmp_path: Path) -> None:
    """Scenario 3: OOMKilled at 500Gi -> the memory limit rises, the context does not.

    The simulated engine is OOMKilled while the pod's ``ctxfit.io/memory-limit-bytes`` is below 600Gi
    (between the first limit and the operator's x1.5 step), so the operator's own step makes it Ready.
    """
    obj = with_sim(manifest("kimi-128k.yaml"), "oomkilled")
    obj["spec"]["pod"]["annotations"].update({
        "sim.ctxfit.io/fail-if-annotation": "ctxfit.io/memory-limit-bytes",
        "sim.ctxfit.io/fail-if-below": str(quantity_to_bytes("600Gi")),
    })
    op = OperatorProcess(Path(cluster.kubeconfig), namespace, tmp_path / "operator.log",
                         CTXFIT_BACKOFF_SECONDS="3").start()
    try:
        api.create(obj)
        server = api.wait_phase("kimi-k25", "Ready")
    finally:
        op.stop()
    first, second = server["status"]["attempts"]
    assert (first["outcome"], second["outcome"]) == ("Failed", "Succeeded")
    assert first["failureKind"] == "HostOOMKilled"
    assert first["effective"]["memoryLimit"] == "500Gi"
    limit = quantity_to_bytes(second["effective"]["memoryLimit"])
    assert limit > quantity_to_bytes("500Gi") and limit >= quantity_to_bytes("600Gi")
    assert second["effective"]["contextLength"] == first["effective"]["contextLength"] == 131072
    assert server["status"]["contextLength"] == 131072
    assert api.get("kimi-k25")["spec"]["pod"]["labels"]["sim.ctxfit.io/behavior"] == "oomkilled"
    limits = api.deployment("kimi-k25")["spec"]["template"]["spec"]["containers"][0]["resources"]["limits"]
    assert limits["memory"] == second["effective"]["memoryLimit"]
    ready = [p for p in api.pods("kimi-k25")
             if any(c["type"] == "Ready" and c["status"] == "True" for c in p["status"].get("conditions") or [])]
    assert ready and all(int(p["metadata"]["annotations"]["ctxfit.io/memory-limit-bytes"]) == limit for p in ready)


def test_glm5_does_not_fit(api: ServerClient, op: OperatorProcess) -> None:
    """Scenario 4: GLM-5 at 200000 with 90.8Gi of weights per GPU -> Failed, BudgetFits False, no Deployment."""
    obj = manifest("glm5-200k.yaml")
    obj["spec"]["model"]["weightsPerGPU"] = "90.8Gi"
    api.create(obj)
    server = api.wait_phase("glm5", "Failed")
    fits = condition(server, "BudgetFits")
    assert fits["status"] == "False" and fits["reason"] == "DoesNotFit"
    assert "200000 tokens need" in fits["message"]
    assert server["status"]["plan"]["fits"] is False
    assert api.deployment("glm5", missing_ok=True) is None
    assert any(e["reason"] == "DoesNotFit" for e in api.events("glm5"))


def test_dsv4_graph_capture_halves_batch(api: ServerClient, op: OperatorProcess) -> None:
    """Scenario 5: SGLang 'Capture cuda graph failed' -> cuda-graph-max-bs 32 -> 16, context stays 524288."""
    obj = with_sim(manifest("dsv4-flash-512k.yaml"), "crash", message=GRAPH_MESSAGE,
                   fail_if=("ctxfit.io/cuda-graph-max-bs", 16))
    api.create(obj)
    server = api.wait_phase("dsv4-flash", "Ready")
    first, second = server["status"]["attempts"]
    assert first["failureKind"] == "GraphCaptureOOM"
    assert (first["effective"]["cudaGraphMaxBatchSize"], second["effective"]["cudaGraphMaxBatchSize"]) == (32, 16)
    assert server["status"]["contextLength"] == 524288
    assert "--cuda-graph-max-bs-decode 16" in " ".join(engine_args(api.deployment("dsv4-flash")))


def test_permanent_failure_scales_to_zero(api: ServerClient, op: OperatorProcess) -> None:
    """Scenario 6: WeightsDoNotFit is permanent -> Failed, Deployment at 0 replicas, no further attempts."""
    api.create(with_sim(manifest("kimi-128k.yaml"), "crash", message=WEIGHTS_MESSAGE))
    server = api.wait_phase("kimi-k25", "Failed")
    ready = condition(server, "Ready")
    assert ready["status"] == "False" and ready["reason"] == "PermanentFailure"
    assert [a["failureKind"] for a in server["status"]["attempts"]] == ["WeightsDoNotFit"]
    api.wait(lambda: api.deployment("kimi-k25")["spec"]["replicas"] == 0, "Deployment scaled to 0")
    api.wait(lambda: not api.pods("kimi-k25"), "engine pods gone")
    op.settle(3)
    status = api.get("kimi-k25")["status"]
    assert len(status["attempts"]) == 1
    # nothing runs: no CONTEXT in `kubectl get` (status.effective keeps what was tried)
    assert "contextLength" not in status and status["effective"]["contextLength"] == 131072
    row = subprocess.run([str(api.kubectl_bin), "get", "infsrv", "kimi-k25", "-n", api.namespace, "--no-headers",
                          "-o", "custom-columns=CONTEXT:.status.contextLength,PHASE:.status.phase"],
                         capture_output=True, text=True, env=api.env, check=True).stdout.split()
    assert row == ["<none>", "Failed"], row


def test_unmodelled_engine_release_is_planned_with_a_warning(api: ServerClient, op: OperatorProcess) -> None:
    """An engine release newer than ctxfit models is not refused: planned with the newest modelled release's rules,
    condition EngineVersionModelled False (NewerThanModelled) and one Warning Event saying so."""
    obj = manifest("llama31-8b-h100.yaml")
    obj["spec"]["engine"]["version"] = "0.40.0"
    api.create(obj)
    server = api.wait_phase("llama31-8b", "Ready")
    modelled = condition(server, "EngineVersionModelled")
    assert (modelled["status"], modelled["reason"]) == ("False", "NewerThanModelled")
    assert "0.40.0" in modelled["message"] and "0.33.0" in modelled["message"]
    warned = [e for e in api.events("llama31-8b") if e["reason"] == "NewerThanModelled"]
    assert [(e["type"], e["message"]) for e in warned] == [("Warning", modelled["message"])]


INVALID = [
    pytest.param({"parallelism": {"tensor": 4}}, "tensor x pipeline x data must equal gpu.count", id="tp-mismatch"),
    pytest.param({"memory": {"memFractionStatic": 0.5}}, "memFractionStatic: is an SGLang setting", id="sglang-knob"),
    pytest.param({"resources": {"memory": "12XB"}}, "spec.resources.memory", id="bad-quantity"),
    pytest.param({"context": {"target": 4096, "minimum": 8192}}, "context.minimum must not be above", id="min>target"),
    pytest.param({"engine": {"kind": "tgi"}}, "spec.engine.kind", id="unknown-engine"),
    pytest.param({"speculative": {"method": "draft"}}, "speculative.draft: required for methods", id="no-draft"),
    pytest.param({"speculative": {"method": "ngram", "draft": {"name": "org/draft"}}}, "takes no draft model",
                 id="ngram-with-draft"),
]


@pytest.mark.parametrize(("patch", "message"), INVALID)
def test_invalid_spec_rejected_by_api_server(api: ServerClient, patch: dict[str, Any], message: str) -> None:
    """Scenario 7a: the API server rejects invalid specs (schema and CEL) with a message naming the field."""
    obj = manifest("kimi-128k.yaml")
    for key, value in patch.items():
        obj["spec"][key] = {**obj["spec"].get(key, {}), **value}
    proc = api.kubectl_apply(obj)
    assert proc.returncode != 0
    assert message in proc.stderr, proc.stderr


def test_planner_rejected_spec_gets_condition(api: ServerClient, op: OperatorProcess) -> None:
    """Scenario 7b: admitted but unplannable (a minimum context above the model's maximum) -> condition + Event; a
    model in no catalog while the Hub cannot be reached (here: none at all) waits in Planning, nothing started;
    the operator carries on."""
    obj = manifest("kimi-128k.yaml")
    obj["metadata"]["name"] = "overlong"
    obj["spec"]["context"] = {"target": 1_000_000, "minimum": 1_000_000}
    api.create(obj)
    server = api.wait_phase("overlong", "Failed")
    fits = condition(server, "BudgetFits")
    assert (fits["status"], fits["reason"]) == ("False", "InvalidSpec")
    assert "above the model's maximum context" in fits["message"]
    assert any(e["reason"] == "InvalidSpec" for e in api.events("overlong"))
    mystery = manifest("kimi-128k.yaml")
    mystery["metadata"]["name"] = "mystery"
    mystery["spec"]["model"] = {"name": "acme/mystery-model"}
    api.create(mystery)
    waiting = api.wait(lambda: (s := api.get("mystery")) and condition(s, "ModelResolved")["reason"] == "HubUnreachable"
                       and s, "mystery waiting for the Hub")
    assert waiting["status"]["phase"] == "Planning" and not waiting["status"].get("attempts")
    assert api.deployment("mystery", missing_ok=True) is None
    good = copy.deepcopy(manifest("kimi-128k.yaml"))
    api.create(good)
    api.wait_phase("kimi-k25", "Ready")
    assert op.alive()


def test_crd_file_is_what_the_cluster_serves(api: ServerClient) -> None:
    """The checked-in CRD is installed as is: short name, printer columns."""
    text = subprocess.run([str(api.kubectl_bin), "get", "crd", "inferenceservers.ctxfit.io", "-o", "yaml"],
                          capture_output=True, text=True, env=api.env, check=True).stdout
    crd = yaml.safe_load(text)
    assert crd["spec"]["names"]["shortNames"] == ["infsrv"]
    columns = [c["name"] for c in crd["spec"]["versions"][0]["additionalPrinterColumns"]]
    assert columns == ["Model", "Engine", "GPUs", "Context", "KV Tokens", "Target", "Replicas", "Pool", "Phase",
                       "Ready", "Age"]


def test_no_eligible_node_waits_for_one(api: ServerClient, op: OperatorProcess, cluster: Any, namespace: str) -> None:
    """No node with the GPU product: Planning + condition + Event, no Deployment; a new node unblocks it."""
    obj = manifest("kimi-128k.yaml")
    obj["spec"]["gpu"]["product"] = "NVIDIA-B200"
    obj["spec"]["gpu"].pop("memory")
    api.create(obj)
    server = api.wait_phase("kimi-k25", "Planning")
    fits = condition(server, "BudgetFits")
    assert (fits["status"], fits["reason"]) == ("Unknown", "NoEligibleNode")
    assert "NVIDIA-B200" in fits["message"]
    # the Warning is posted right after the status write that records it: wait for it, not for a race
    api.wait(lambda: any(e["reason"] == "NoEligibleNode" for e in api.events("kimi-k25")), "a NoEligibleNode Event",
             timeout=10)
    assert api.deployment("kimi-k25", missing_ok=True) is None
    node = cluster.add_node(NodeSpec(name=f"b200-{namespace}", product="NVIDIA-B200", gpu_memory_mib=183359,
                                     gpu_count=8, compute=(10, 0)))
    try:
        server = api.wait_phase("kimi-k25", "Ready")
        assert condition(server, "BudgetFits")["status"] == "True"
    finally:  # the session's node pool is shared: later modules (test_operator_diagnosis) read its products
        cluster.kubectl("delete", "node", node, "--ignore-not-found", "--wait=false", check=False)
