"""On the real local control plane: engine args that silently replace the planned KV
budget (vLLM ``--num-gpu-blocks-override`` in any spelling argparse accepts, ``--kv-cache-memory-bytes``, ``--config
FILE``; SGLang ``--max-total-tokens``, ``--config``) are refused with a clear verdict: ``BudgetFits=False`` naming the
flag and the spec field to use, one Warning Event, nothing started. The flag tables are engines/*/flags.py (read
from the released wheels' parsers); the refusal is ``budget.planner``'s. Created as the impersonated ``ctxfit-edit``
user."""

from __future__ import annotations

import json
from typing import Any

import pytest

from .operator_kit import OperatorProcess, ServerClient, bind, can_i, condition, kubectl

USER = "kv-editor"
CASES = {  # name -> (engine, args, the flag the verdict names)
    "blocks": ("vllm", ["--num-gpu-blocks-override", "200000"], "--num-gpu-blocks-override"),
    "blocks-abbrev": ("vllm", ["--num-gpu-blocks=200000"], "--num-gpu-blocks-override"),
    "blocks-underscore": ("vllm", ["--num_gpu_blocks_override", "200000"], "--num-gpu-blocks-override"),
    "kv-bytes": ("vllm", ["--kv-cache-memory-bytes", "70G"], "--kv-cache-memory-bytes"),
    "config": ("vllm", ["--config", "/etc/engine/serve.yaml"], "--config"),
    "sgl-tokens": ("sglang", ["--max-total-tokens", "9000000"], "--max-total-tokens"),
    "sgl-config": ("sglang", ["--config=/etc/engine/serve.yaml"], "--config"),
}


def server(name: str, engine: str, args: list[str]) -> dict[str, Any]:
    return {"apiVersion": "ctxfit.io/v1alpha1", "kind": "InferenceServer", "metadata": {"name": name},
            "spec": {"model": {"name": "meta-llama/Llama-3.1-8B-Instruct"},
                     "engine": {"kind": engine, "version": "0.19.0" if engine == "vllm" else "0.5.5", "args": args},
                     "gpu": {"count": 1, "product": "NVIDIA-H100-80GB-HBM3"}, "context": {"target": 32768}}}


@pytest.fixture
def editor(cluster: Any, user_roles: None, api: ServerClient) -> str:
    bind(cluster, api.namespace, USER, "edit")
    api.wait(lambda: can_i(cluster, USER, api.namespace, "create", "inferenceservers.ctxfit.io"), "aggregation")
    return USER


def test_args_that_replace_the_kv_budget_are_refused(cluster: Any, op: OperatorProcess, api: ServerClient,
                                                     editor: str) -> None:
    for name, (engine, args, _) in CASES.items():
        out = kubectl(cluster, "create", "-f", "-", user=editor, namespace=api.namespace,
                      input=json.dumps(server(name, engine, args)))
        assert out.returncode == 0, out.stderr  # the CRD accepts it: the verdict is the planner's
    for name, (_, _, flag) in CASES.items():
        found = api.wait(lambda n=name: (s := api.get(n)).get("status", {}).get("phase") == "Failed" and s,
                         f"{name} refused")
        fits = condition(found, "BudgetFits")
        assert fits["status"] == "False" and "spec.engine.args" in fits["message"], fits
        assert flag in fits["message"] and " instead" in fits["message"], fits["message"]
        warnings = [e for e in api.events(name) if e["type"] == "Warning"]
        assert len(warnings) == 1 and flag in warnings[0]["message"], api.events(name)
        assert api.deployment(name, missing_ok=True) is None, "nothing runs on a budget ctxfit did not plan"
    op.settle(6)
    for name in CASES:
        assert len([e for e in api.events(name) if e["type"] == "Warning"]) == 1, "one Event, no retry loop"
    assert "Traceback" not in op.log_path.read_text()
