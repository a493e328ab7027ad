"""On the real local control plane: servers with LoRA adapters, an EAGLE head, a draft model and MTP plan,
render and start; a LoRA-buffer failure and a draft-pool failure step down the knob they add.

The engine is kwok's simulated one (hack/README.md): the failure's text is the engines' own (frames and lines read in
the wheels, tests/unit/recovery/test_feature_failures.py), conditional on the annotation the operator writes
(``ctxfit.io/max-loras``, ``ctxfit.io/num-speculative-tokens``).
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from .operator_kit import OperatorProcess, ServerClient, condition, engine_args, manifest, with_sim

VLLM_LORA_OOM = (
    "Traceback (most recent call last):\n"
    '  File "/usr/local/lib/python3.12/dist-packages/vllm/v1/worker/lora_model_runner_mixin.py", line 50, in '
    "load_lora_model\n"
    '  File "/usr/local/lib/python3.12/dist-packages/vllm/lora/model_manager.py", line 371, in _create_lora_modules\n'
    '  File "/usr/local/lib/python3.12/dist-packages/vllm/lora/layers/base_linear.py", line 66, in '
    "create_lora_weights\n"
    "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 1.50 GiB. GPU 0 has a total capacity of 79.19 "
    "GiB of which 512.00 MiB is free."
)
SGLANG_DRAFT_POOL = (
    "Scheduler hit an exception: Traceback (most recent call last):\n"
    '  File "/sgl-workspace/sglang/python/sglang/srt/speculative/eagle_worker.py", line 120, in __init__\n'
    '  File "/sgl-workspace/sglang/python/sglang/srt/model_executor/model_runner.py", line 1642, in '
    "init_memory_pool\n"
    "RuntimeError: Not enough memory. Please try to increase --mem-fraction-static. Current value: "
    "mem_fraction_static=0.83"
)


def _extras(server: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {e["term"]: e for e in server["status"]["plan"]["perGPU"].get("extras", [])}


@pytest.mark.parametrize(("file", "name", "flags", "terms"), [
    ("llama31-8b-lora.yaml", "llama31-8b-lora",
     ["--enable-lora", "--max-loras 4", "--max-lora-rank 64", "--lora-modules sql=/models/ctxfit-adapters/sql"],
     ["LoRA buffers"]),
    ("llama31-8b-eagle.yaml", "llama31-8b-eagle", ['"method":"eagle"', '"model":"/models/ctxfit-draft"'],
     ["draft weights"]),
    ("llama31-8b-draft-sglang.yaml", "llama31-8b-draft",
     ["--speculative-algorithm STANDALONE", "--speculative-draft-model-path /models/ctxfit-draft"],
     ["draft weights", "draft KV pool"]),
    ("deepseek-v3-mtp.yaml", "deepseek-v3-mtp", ['"method":"mtp"', '"num_speculative_tokens":1'], ["MTP layers"]),
])
def test_server_plans_renders_and_starts(op: OperatorProcess, api: ServerClient, file: str, name: str,
                                         flags: list[str], terms: list[str]) -> None:
    api.create(manifest(file))
    server = api.wait_phase(name, "Ready")
    args = " ".join(engine_args(api.deployment(name)))
    for flag in flags:
        assert flag in args, args
    extras = _extras(server)
    for term in terms:
        assert extras[term]["bytes"] > 0 and extras[term]["source"], extras
    assert condition(server, "BudgetFits")["status"] == "True"
    template = api.deployment(name)["spec"]["template"]["spec"]
    downloads = {e["name"]: e.get("value") for c in template.get("initContainers", []) for e in c["env"]}
    if "lora" in name:
        assert ["example-org/llama31-8b-sql-lora", "main", "/models/ctxfit-adapters/sql"] in json.loads(
            downloads["CTXFIT_EXTRA"])
        assert server["status"]["effective"]["maxLoras"] == 4
    elif "mtp" not in name:
        assert json.loads(downloads["CTXFIT_EXTRA"])[0][2] == "/models/ctxfit-draft"
        assert server["status"]["effective"]["numSpeculativeTokens"] >= 1


def test_lora_buffer_failure_halves_the_adapter_slots(op: OperatorProcess, api: ServerClient) -> None:
    obj = with_sim(manifest("llama31-8b-lora.yaml"), "crash", message=VLLM_LORA_OOM, fail_if=("ctxfit.io/max-loras", 2))
    api.create(obj)
    server = api.wait_phase("llama31-8b-lora", "Ready")
    attempts = server["status"]["attempts"]
    assert [a["outcome"] for a in attempts] == ["Failed", "Succeeded"]
    assert attempts[0]["failureKind"] == "LoRABuffersOOM"
    assert (attempts[0]["effective"]["maxLoras"], attempts[1]["effective"]["maxLoras"]) == (4, 2)
    assert attempts[1]["effective"]["contextLength"] == attempts[0]["effective"]["contextLength"]
    assert "--max-loras 2" in " ".join(engine_args(api.deployment("llama31-8b-lora")))
    failed = [e for e in api.events("llama31-8b-lora") if e["reason"] == "AttemptFailed"]
    assert failed and "maxLoras" in failed[0]["message"]


def test_draft_pool_failure_halves_the_speculative_tokens(op: OperatorProcess, api: ServerClient) -> None:
    obj = with_sim(manifest("llama31-8b-draft-sglang.yaml"), "crash", message=SGLANG_DRAFT_POOL,
                   fail_if=("ctxfit.io/num-speculative-tokens", 2))
    api.create(obj)
    server = api.wait_phase("llama31-8b-draft", "Ready")
    attempts = server["status"]["attempts"]
    assert [a["outcome"] for a in attempts] == ["Failed", "Succeeded"]
    assert attempts[0]["failureKind"] == "DraftModelOOM"
    assert (attempts[0]["effective"]["numSpeculativeTokens"], attempts[1]["effective"]["numSpeculativeTokens"]) == (
        4, 2)
    assert "--speculative-num-steps 2" in " ".join(engine_args(api.deployment("llama31-8b-draft")))
