"""On the real local control plane: a verdict where one is due. A pipeline of more stages than the
model has layers (64 on Llama-3.1-8B's 32) used to wait in Planning for 64 nodes; it is the planner's DoesNotFit
verdict at once, and nothing is created (the same pass over the in-memory API server:
tests/unit/controller/test_verdicts_due.py, which also covers ``nodes: 2`` without LeaderWorkerSets)."""

from __future__ import annotations

from kubernetes.client import CustomObjectsApi

from .operator_kit import OperatorProcess, ServerClient, condition, group, manifest


def test_a_pipeline_longer_than_the_model_is_a_verdict_not_a_wait_for_nodes(op: OperatorProcess, api: ServerClient,
                                                                         groups: CustomObjectsApi) -> None:
    obj = manifest("kimi-k25-2x8-h100.yaml")
    obj["metadata"]["name"] = "llama-pp64"
    obj["spec"]["model"] = {"name": "meta-llama/Llama-3.1-8B-Instruct"}
    obj["spec"]["engine"].pop("args")
    obj["spec"]["gpu"] = {"count": 1, "product": "NVIDIA-H100-80GB-HBM3"}
    obj["spec"]["nodes"] = 64
    obj["spec"]["parallelism"] = {"tensor": 1, "pipeline": 64}
    obj["spec"]["context"] = {"target": 8192}
    for key in ("memory", "resources"):
        obj["spec"].pop(key)
    api.create(obj)
    server = api.wait_phase("llama-pp64", "Failed", timeout=60)
    assert "pipeline stages for a model of 32 layers" in server["status"]["message"], server["status"]
    fits = condition(server, "BudgetFits")
    assert (fits["status"], fits["reason"]) == ("False", "DoesNotFit"), fits
    assert "NoEligibleNode" not in {c["reason"] for c in server["status"]["conditions"]}
    op.settle(3)
    assert group(groups, api.namespace, "llama-pp64") is None and not api.pods("llama-pp64")
    assert api.deployment("llama-pp64", missing_ok=True) is None
