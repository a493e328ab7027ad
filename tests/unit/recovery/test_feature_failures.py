# ruff: noqa: E501 - engine log lines are kept whole
"""Out-of-memory failures in the LoRA buffers or the speculative draft are their own kinds, and the
policy steps the knobs they add (maxLoras, numSpeculativeTokens, the memory outside the budget).

The logs are built from the engines' own frames and lines (module paths and function names read in the wheels:
``ctxfit.recovery.features``) around the real PyTorch / SGLang error texts."""

from __future__ import annotations

from typing import Any

import pytest
from ctxfit.api import EngineKind, InferenceServerSpec
from ctxfit.budget.planner import plan
from ctxfit.recovery.classify import Observation, classify
from ctxfit.recovery.policy import decide
from ctxfit.vocab.kinds import FailureKind

OOM = ("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 1.50 GiB. GPU 0 has a total capacity of 79.19 "
       "GiB of which 512.00 MiB is free. Including non-PyTorch memory, this process has 78.67 GiB memory in use.")

VLLM_LORA = f"""(EngineCore_DP0 pid=211) INFO 05-02 10:00:01 [gpu_model_runner.py:2602] Starting to load model meta-llama/Llama-3.1-8B-Instruct...
(EngineCore_DP0 pid=211) ERROR 05-02 10:00:09 [core.py:708] EngineCore failed to start.
Traceback (most recent call last):
  File "/usr/local/lib/python3.12/dist-packages/vllm/v1/worker/gpu_model_runner.py", line 2640, in load_model
    self.model = self.load_lora_model(self.model, self.vllm_config, self.device)
  File "/usr/local/lib/python3.12/dist-packages/vllm/v1/worker/lora_model_runner_mixin.py", line 50, in load_lora_model
    return self.lora_manager.create_lora_manager(model, vllm_config)
  File "/usr/local/lib/python3.12/dist-packages/vllm/lora/model_manager.py", line 371, in _create_lora_modules
    from_layer(module, self.lora_slots, self.lora_config, packed_moduled_lst, self.model.config)
  File "/usr/local/lib/python3.12/dist-packages/vllm/lora/layers/base_linear.py", line 66, in create_lora_weights
    torch.zeros(
{OOM}
"""

SGLANG_LORA = f"""[2025-10-01 12:00:00 TP0] Load weight end. type=LlamaForCausalLM, dtype=torch.bfloat16, avail mem=62.10 GB, mem usage=14.99 GB.
[2025-10-01 12:00:00 TP0] Scheduler hit an exception: Traceback (most recent call last):
  File "/sgl-workspace/sglang/python/sglang/srt/model_executor/model_runner.py", line 446, in initialize
    self.init_lora_manager()
  File "/sgl-workspace/sglang/python/sglang/srt/lora/lora_manager.py", line 420, in init_memory_pool
    self.memory_pool = LoRAMemoryPool(
  File "/sgl-workspace/sglang/python/sglang/srt/lora/mem_pool.py", line 170, in init_buffers
    torch.empty(
{OOM}
"""

VLLM_DRAFTER = f"""(EngineCore_DP0 pid=9) INFO 05-02 10:00:09 [default_loader.py:262] Loading weights took 3.04 seconds
(EngineCore_DP0 pid=9) INFO 05-02 10:00:09 [gpu_model_runner.py:2650] Loading drafter model...
(EngineCore_DP0 pid=9) ERROR 05-02 10:00:10 [core.py:708] EngineCore failed to start.
Traceback (most recent call last):
  File "/usr/local/lib/python3.12/dist-packages/vllm/v1/worker/gpu_model_runner.py", line 2651, in load_model
    self.drafter.load_model(self.model)
{OOM}
"""

SGLANG_DRAFT_POOL = """[2025-10-01 12:00:00 TP0] KV Cache is allocated. #tokens: 412000, K size: 25.15 GB, V size: 25.15 GB
[2025-10-01 12:00:01 TP0] Scheduler hit an exception: Traceback (most recent call last):
  File "/sgl-workspace/sglang/python/sglang/srt/managers/scheduler.py", line 2900, in run_scheduler_process
    scheduler = Scheduler(server_args, port_args, gpu_id, tp_rank, moe_ep_rank, pp_rank, dp_rank)
  File "/sgl-workspace/sglang/python/sglang/srt/speculative/eagle_worker.py", line 120, in __init__
    super().__init__(
  File "/sgl-workspace/sglang/python/sglang/srt/model_executor/model_runner.py", line 1642, in init_memory_pool
    self.max_total_num_tokens = self.profile_max_num_token(total_gpu_memory)
RuntimeError: Not enough memory. Please try to increase --mem-fraction-static. Current value: mem_fraction_static=0.85
"""

KV_AFTER_DRAFTER = """(EngineCore_DP0 pid=9) INFO 05-02 10:00:09 [gpu_model_runner.py:2650] Loading drafter model...
(EngineCore_DP0 pid=9) INFO 05-02 10:00:11 [gpu_model_runner.py:2700] Model loading took 16.00 GiB memory and 9.1 seconds
(EngineCore_DP0 pid=9) INFO 05-02 10:00:20 [gpu_worker.py:298] Available KV cache memory: 0.40 GiB
ValueError: To serve at least one request with the model's max seq len (32768), (4.12 GiB KV cache is needed, which is larger than the available KV cache memory (0.40 GiB). Based on the available memory, the estimated maximum model length is 3072. Try increasing `gpu_memory_utilization` or decreasing `max_model_len` when initializing the engine.
"""


@pytest.mark.parametrize(("engine", "log", "kind"), [
    (EngineKind.VLLM, VLLM_LORA, FailureKind.LORA_BUFFERS_OOM),
    (EngineKind.SGLANG, SGLANG_LORA, FailureKind.LORA_BUFFERS_OOM),
    (EngineKind.VLLM, VLLM_DRAFTER, FailureKind.DRAFT_MODEL_OOM),
    (EngineKind.SGLANG, SGLANG_DRAFT_POOL, FailureKind.DRAFT_MODEL_OOM),
])
def test_oom_in_lora_or_draft_code_is_its_own_kind(engine: EngineKind, log: str, kind: FailureKind) -> None:
    failure = classify(Observation(reason="Error", exit_code=1, log_tail=log), engine)
    assert failure.kind is kind, failure
    assert "(in " in failure.evidence


def test_kv_too_small_after_the_drafter_loaded_keeps_its_kind() -> None:
    failure = classify(Observation(reason="Error", exit_code=1, log_tail=KV_AFTER_DRAFTER), EngineKind.VLLM)
    assert failure.kind is FailureKind.KV_CACHE_TOO_SMALL


def _spec(engine: str, **extra: Any) -> InferenceServerSpec:
    doc: dict[str, Any] = {"model": {"name": "meta-llama/Llama-3.1-8B-Instruct"},
                           "engine": {"kind": engine, "version": "0.20.0" if engine == "vllm" else "0.5.4"},
                           "gpu": {"count": 1, "product": "NVIDIA-H100-80GB-HBM3"}, "context": {"target": 32768}}
    doc.update(extra)
    return InferenceServerSpec.model_validate(doc)


LORA = {"adapters": [{"name": "a", "source": "org/a", "rank": 64}], "maxLoras": 8}
EAGLE = {"method": "eagle", "numSpeculativeTokens": 4,
         "draft": {"name": "org/eagle", "weightsPerGPU": "1Gi",
                   "architecture": {"attention": "gqa", "numLayers": 1, "numKVHeads": 8, "headDim": 128}}}


@pytest.mark.parametrize("engine", ["vllm", "sglang"])
def test_lora_buffer_failure_halves_the_adapter_slots(engine: str) -> None:
    spec = _spec(engine, lora=LORA)
    current = plan(spec).effective
    failure = classify(Observation(reason="Error", exit_code=1,
                                   log_tail=VLLM_LORA if engine == "vllm" else SGLANG_LORA))
    first = decide(spec, current, failure)
    assert not first.permanent and first.next is not None
    assert first.next.max_loras == 4 and first.next.context_length == current.context_length
    assert "maxLoras" in first.explanation


@pytest.mark.parametrize(("engine", "log"), [("vllm", VLLM_DRAFTER), ("sglang", SGLANG_DRAFT_POOL)])
def test_draft_failure_halves_the_speculative_tokens_then_frees_memory(engine: str, log: str) -> None:
    from ctxfit.recovery.policy import FailedAttempt

    spec = _spec(engine, speculative=EAGLE)
    current = plan(spec).effective
    failure = classify(Observation(reason="Error", exit_code=1, log_tail=log))
    first = decide(spec, current, failure)
    assert first.next is not None and first.next.num_speculative_tokens == 2
    second = decide(spec, first.next, failure, [FailedAttempt(current, failure.kind)])
    assert second.next is not None and second.next.num_speculative_tokens == 1
    third = decide(spec, second.next, failure, [FailedAttempt(current, failure.kind), FailedAttempt(first.next, failure.kind)])
    assert third.next is not None and third.next.num_speculative_tokens == 1
    fraction = third.next.gpu_memory_utilization or third.next.mem_fraction_static
    assert fraction is not None and fraction < (current.gpu_memory_utilization or current.mem_fraction_static or 1)
