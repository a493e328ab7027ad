"""Which GPU model runner a vLLM >= 0.20 worker uses, and why the memory model cares.

vLLM 0.20 and later ship two GPU model runners. ``v1/worker/gpu_worker.py::Worker`` logs "Using V2 Model Runner"
when ``vllm_config.use_v2_model_runner`` holds and builds ``v1/worker/gpu/model_runner.py::GPUModelRunner``
(MRV2); otherwise the V1 runner ``v1/worker/gpu_model_runner.py`` (MRV1). ``determine_available_memory``
deducts ``model_runner.profile_cudagraph_memory()`` from the KV budget (``VLLM_MEMORY_PROFILER_ESTIMATE_
CUDAGRAPHS``, on by default from 0.20), and MRV2's ``profile_cudagraph_memory`` is ``return 0`` ("It is TBD
whether we keep this API or not") in every wheel from 0.20.0 to 0.28.0: under MRV2 no CUDA-graph estimate
is deducted and the graphs are captured after the KV cache, outside the budget, as before 0.20. From 0.29.0
(``v1/worker/gpu/cudagraph_utils.py::profile_cudagraph_memory``, read in the 0.29.0 and 0.33.0 wheels) MRV2
captures every PIECEWISE graph into a throwaway pool and extrapolates FULL graphs from the largest few: its
deduction is the captured pool itself (``MODEL_RUNNER_V2_ESTIMATES_SINCE``), not the V1 runner's linear
extrapolation.

When MRV2 is the default (``VLLM_USE_V2_MODEL_RUNNER`` unset; ``=1``/``=0`` force it on/off):

- 0.20, 0.21: never (``envs.py`` defaults ``VLLM_USE_V2_MODEL_RUNNER`` to "0").
- 0.22, 0.23: ``config/vllm.py::_is_default_v2_model_runner_model``: an architecture in
  ``DEFAULT_V2_MODEL_RUNNER_ARCHITECTURES`` ({Qwen3ForCausalLM}; 0.23 adds LlamaForCausalLM and
  MistralForCausalLM), not MoE, not quantized.
- 0.24: an architecture in {Qwen3ForCausalLM, DeepseekV2ForCausalLM, Qwen2MoeForCausalLM,
  GraniteMoeForCausalLM, LlamaForCausalLM, MistralForCausalLM}.
- 0.25-0.27: not hybrid (Mamba / Gated DeltaNet), and a listed architecture (DeepseekV2ForCausalLM,
  GraniteMoeForCausalLM, Qwen2MoeForCausalLM, ...) or not MoE: every dense attention model.
- 0.28: a listed architecture, or not MoE and not hybrid.
- 0.29 and later: every model ("select MRV2 for supported configurations; the first tagged release with this
  default will be v0.29.0", vLLM's MRV2 rollout notes), the architecture lists gone.

Read in the 0.20.0-0.29.0 and 0.33.0 wheels. A generate model only (``runner_type``);
``_get_v2_model_runner_unsupported_features`` sends some configurations back to MRV1 (speculative decoding other
than EAGLE/MTP/DFlash, prefill context parallelism, sequence parallelism, custom logits processors, prompt
embeds), none of which ctxfit renders. Real start-ups: the four vLLM 0.26.0 Llama-3.1-8B start-ups of
tests/fixtures/startups (A40) print "Using V2 Model Runner", no "Estimated CUDA graph memory" line, and
``requested - weights - activation - non-torch`` to the 0.01 GiB.

When the architecture is unknown (no config.json ``architectures``), the V1 runner is assumed where the
rule depends on it: its graph deduction predicts the smaller pool.

MRV2's sampler state lives outside the budget (``sampler_state_bytes``): ``v1/worker/gpu/sample/penalties.py::
PenaltiesState.__init__`` allocates ``output_bin_counts`` (int32 ``[max_num_seqs, vocab]``) and ``prompt_bin_mask``
(int32 ``[max_num_seqs, ceil(vocab / 32)]``) on the GPU when the runner builds its ``Sampler`` (in
``GPUModelRunner.__init__`` in 0.21-0.22, in ``load_model`` after the weights' ``DeviceMemoryProfiler`` from 0.24;
read in the 0.21, 0.22, 0.24, 0.26, 0.28, 0.29 and 0.33 wheels). ``gpu_worker.init_device`` takes the memory
snapshot before it builds the runner, and ``memory_profiling`` (``utils/mem_utils.py``) counts torch memory only as
the weights and the peak increase of the profile run, so up to 0.26 these buffers are in none of the printed terms:
the KV pool is sized as if they did not exist, and they come on top of ``requested``. From 0.27 ``memory_profiling``
budgets ``total_consumed`` (free memory taken since the init snapshot), which holds them: inside the budget
(``memory.CONSUMED_DEVICE_WIDE_SINCE``). The last pipeline stage builds the
sampler; the per-GPU budget describes that stage.

MRV2's profile run (``model_runner.py::profile_run``, 0.21-0.33) is the V1 runner's in shape: a forward of
``max_num_batched_tokens`` over ``min(max_num_batched_tokens, max_num_seqs)`` dummy requests with attention
skipped, then ``_dummy_sampler_run`` on one logits row per request. Its sampler runs no top-k/top-p ("the sampler
may skip top_k, top_p, and logprobs") and the dummy requests are greedy (``sample/states.py`` temperatures start
at 0), so it keeps no sorted copy of the logits. No term is changed for it: the four A40 start-ups measure 1.01 GiB
of peak activation, more than the V1 constants (0.45 GiB) and more than this path's buffers explain (a 2048-token
forward and 256 logits rows, ~0.3 GiB). One candidate the source shows but cannot size: on a compile-cache miss
``compilation/decorators.py`` (0.26) AOT-compiles the model inside its first call, which is the profile run's
forward, so whatever Inductor allocates on the device while compiling (``config/compilation.py`` turns on
``benchmark_combo_kernel`` for torch >= 2.9) falls inside ``memory_profiling``'s peak; all four A40 start-ups
compile from scratch ("Compiling a graph for compile range (1, 2048) takes 8.69-15.88 s").
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ctxfit.vocab.inputs import PlanInputs

MODEL_RUNNER_V2_ENV = "VLLM_USE_V2_MODEL_RUNNER"
V2_DEFAULT_SINCE = (0, 22, 0)
V2_ARCHITECTURES: tuple[tuple[tuple[int, int, int], frozenset[str]], ...] = (
    ((0, 22, 0), frozenset({"Qwen3ForCausalLM"})),
    ((0, 23, 0), frozenset({"LlamaForCausalLM", "MistralForCausalLM", "Qwen3ForCausalLM"})),
    (
        (0, 24, 0),
        frozenset(
            {
                "Qwen3ForCausalLM",
                "DeepseekV2ForCausalLM",
                "Qwen2MoeForCausalLM",
                "GraniteMoeForCausalLM",
                "LlamaForCausalLM",
                "MistralForCausalLM",
            }
        ),
    ),
    ((0, 25, 0), frozenset({"DeepseekV2ForCausalLM", "Qwen2MoeForCausalLM", "GraniteMoeForCausalLM"})),
    (
        (0, 26, 0),
        frozenset(
            {
                "DeepseekV2ForCausalLM",
                "GraniteMoeForCausalLM",
                "InklingForCausalLM",
                "InklingForConditionalGeneration",
                "LongcatFlashNgramForCausalLM",
                "Qwen2MoeForCausalLM",
            }
        ),
    ),
    (
        (0, 27, 0),
        frozenset(
            {
                "DeepseekV2ForCausalLM",
                "GraniteMoeForCausalLM",
                "InklingForCausalLM",
                "InklingForConditionalGeneration",
                "KimiK3ForConditionalGeneration",
                "LongcatFlashNgramForCausalLM",
                "Qwen2MoeForCausalLM",
            }
        ),
    ),
    (
        (0, 28, 0),
        frozenset(
            {
                "DeepseekV2ForCausalLM",
                "DeepseekV4ForCausalLM",
                "GraniteMoeForCausalLM",
                "InklingForCausalLM",
                "InklingForConditionalGeneration",
                "KimiK3ForConditionalGeneration",
                "LongcatFlashNgramForCausalLM",
                "Qwen2MoeForCausalLM",
            }
        ),
    ),
)
"""``config/vllm.py::DEFAULT_V2_MODEL_RUNNER_ARCHITECTURES`` from each listed release on (read in the wheel of
each; 0.21 has none, 0.22 the first)."""
LISTED_ONLY_SINCE = (0, 24, 0)
"""0.22-0.23 also require a dense, unquantized model; 0.24 only the listed architecture."""
DENSE_DEFAULT_SINCE = (0, 25, 0)
"""From 0.25 any non-MoE, non-hybrid model defaults to MRV2 (``... or not model_config.is_moe``)."""
HYBRID_IF_LISTED_SINCE = (0, 28, 0)
"""0.25-0.27 keep every hybrid on MRV1; 0.28 only the unlisted ones."""
EVERY_MODEL_SINCE = (0, 29, 0)
"""0.29 ``use_v2_model_runner``: MRV2 unless a feature it lacks is configured."""
MODEL_RUNNER_V2_ESTIMATES_SINCE = (0, 29, 0)
"""MRV2's ``profile_cudagraph_memory`` returns 0 up to 0.28 and measures the captured pool from 0.29."""
INT32_BYTES = 4
PROMPT_MASK_BITS = 32
"""``prompt_bin_mask`` packs 32 vocabulary entries into one int32 (``cdiv(vocab_size, 32)`` columns)."""


def listed_architectures(version: tuple[int, int, int]) -> frozenset[str]:
    """``DEFAULT_V2_MODEL_RUNNER_ARCHITECTURES`` of ``version`` (empty before 0.22)."""
    listed: frozenset[str] = frozenset()
    for since, names in V2_ARCHITECTURES:
        if version >= since:
            listed = names
    return listed


def uses_model_runner_v2(
    version: tuple[int, int, int],
    *,
    architectures: tuple[str, ...],
    moe: bool,
    hybrid: bool,
    quantized: bool,
    env: Mapping[str, str] | None = None,
) -> bool:
    """True when a vLLM ``version`` worker runs Model Runner V2 (see the module docstring for the rule).

    Args:
        version: vLLM (major, minor, patch).
        architectures: config.json ``architectures`` (empty when unknown).
        moe: mixture-of-experts model.
        hybrid: Mamba / Gated DeltaNet layers next to attention.
        quantized: a weight quantization method is set (only 0.22-0.23 look at it).
        env: the container env; ``VLLM_USE_V2_MODEL_RUNNER`` "1"/"0" overrides the default.
    """
    forced = (env or {}).get(MODEL_RUNNER_V2_ENV)
    if forced is not None and forced.strip().lower() in ("1", "true", "0", "false"):
        return forced.strip().lower() in ("1", "true")
    if version < V2_DEFAULT_SINCE:
        return False
    if version >= EVERY_MODEL_SINCE:
        return True
    listed = any(a in listed_architectures(version) for a in architectures)
    if version < LISTED_ONLY_SINCE:
        return listed and not moe and not quantized
    if version < DENSE_DEFAULT_SINCE:
        return listed
    if hybrid and not (listed and version >= HYBRID_IF_LISTED_SINCE):
        return False
    return listed or not moe


def plan_uses_model_runner_v2(inputs: PlanInputs, env: Mapping[str, str]) -> bool:
    """``uses_model_runner_v2`` for a plan's model and engine."""
    return uses_model_runner_v2(
        inputs.engine_version,
        architectures=inputs.architectures,
        moe=inputs.moe is not None,
        hybrid=inputs.hybrid is not None,
        quantized=inputs.quantization is not None,
        env=env,
    )


def sampler_state_bytes(max_num_seqs: int, vocab_size: int) -> int:
    """GPU bytes of MRV2's per-request penalty state: outside vLLM's KV budget up to 0.26, inside from 0.27 (module
    docstring).

    ``output_bin_counts`` int32 ``[max_num_seqs, vocab]`` + ``prompt_bin_mask`` int32 ``[max_num_seqs,
    ceil(vocab / 32)]`` (``v1/worker/gpu/sample/penalties.py::PenaltiesState.__init__``, 0.21-0.33).

    Raises:
        ValueError: when ``max_num_seqs`` or ``vocab_size`` is not positive.
    """
    if max_num_seqs <= 0 or vocab_size <= 0:
        raise ValueError(f"max_num_seqs and vocab_size must be positive, got {max_num_seqs} and {vocab_size}")
    mask_columns = -(-vocab_size // PROMPT_MASK_BITS)
    return max_num_seqs * (vocab_size + mask_columns) * INT32_BYTES
