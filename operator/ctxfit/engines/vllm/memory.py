"""vLLM per-GPU memory model, one rule set per engine version family (docs/engine-memory.md A.1).

    requested = CUDA total x gpu-memory-utilization        (V1 v1/worker/utils.py::request_memory;
                                                            V0 worker/worker.py::determine_num_available_blocks)
    kv_pool   = requested - weights - non-torch - activation peak - [CUDA-graph estimate]
    fits(L)  <=> request_bytes(L) <= kv_pool - one null block   (kv_cache_planning._check_enough_kv_cache_memory)

Families (``Family``) and what differs between them:

- **V0** (``vllm/worker``; releases before 0.7, 0.7 unless ``VLLM_USE_V1=1``, 0.8-0.10 with ``VLLM_USE_V1=0`` or an
  oracle fallback, ``oracle.py``): ``determine_num_available_blocks`` budgets
  ``total x util - (weights + non_torch_increase + torch_peak_increase)``. The profiled forward is
  ``max_num_batched_tokens`` tokens, and its default depends on chunked prefill (``config.py::SchedulerConfig``):
  with chunked prefill 2048 (512 before 0.6.5), without it ``max(max_model_len, 2048)``. Chunked prefill turns
  itself on only when ``max_model_len > 32768`` and the model has no sliding window
  (``engine/arg_utils.py::create_engine_config``, "Chunked prefill is enabled by default for models with
  max_model_len > 32K"), so a V0 start-up at 32k profiles a 32k-token forward and one at 64k a 2k-token one. The
  sampler warm-up sorts the whole vocabulary (``model_runner._dummy_run``: ``top_k = vocab - 1``). At PP > 1 the
  predicted (last) stage also holds the intermediate tensors it was handed, ``2 x tokens x hidden``
  (``pipeline.py``). No CUDA-graph term (captured after the KV cache, outside the budget). 0.6.5-0.6.x count ~1.5
  GiB more non-torch (``V0_PROFILER_BASELINE_BYTES``).
- **All families**: a bitsandbytes 4-bit checkpoint adds its dequantized weight shards to the profiled
  forward (``dequant.py``).
- **V1 before 0.20**: ``gpu_worker.determine_available_memory`` budgets the same terms; the forward is
  ``max_num_batched_tokens`` (always chunked, ``batch_defaults``), whatever the context. The sampler step
  (``overhead.SamplerWarmup``, ``bands.py``): none in 0.7 (logits of all tokens), FlashInfer's in 0.8-0.11 (a
  sort without FlashInfer), a sort in 0.12-0.16, Triton's top-k/top-p from 0.17, FlashInfer's again from 0.21;
  the fitted constants are per release band (``bands.BANDS``). The CUDA-graph estimate is printed but not deducted
  (``VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS`` defaults to 0 in 0.18/0.19). Before 0.12 the baseline
  snapshot precedes the distributed init, so the NCCL init lands in non-torch too.
- **V1 from 0.20**: as V1, and the CUDA-graph estimate is deducted: 0.20.0 ``envs.py`` defaults
  ``VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS`` to "1", and ``gpu_worker.determine_available_memory``
  subtracts ``model_runner.profile_cudagraph_memory()`` (which captures the largest graphs of each mode in a
  scratch pool and extrapolates) from ``requested_memory = ceil(total x util)``. Its size follows the
  number of graphs captured (``cudagraph.estimate_bytes``). Under Model Runner V2 (the default for dense models
  from 0.25, for some architectures from 0.22, for every model from 0.29; ``runner.py``) up to 0.28
  ``profile_cudagraph_memory`` returns 0: nothing is deducted and the graphs land outside the budget, as before
  0.20; from 0.29 it deducts the pool it captures (``cudagraph.cuda_graph_bytes``). Checked in the 0.20-0.28
  wheels and not modelled, because no term changes: the sampler warm-up runs twice from 0.21 (FlashInfer, then
  ``forward_native``; the peak is the larger of the two); 0.27 budgets ``total_consumed +
  transient_peak_headroom`` (``utils/mem_utils.py``), the same terms measured device-wide; 0.28 captures up to
  1024 tokens on SM100 by default, but ctxfit always passes ``--max-cudagraph-capture-size``. One term moves:
  from 0.27 the budget is device-wide (``CONSUMED_DEVICE_WIDE_SINCE``), so Model Runner V2's penalty state, outside
  the budget up to 0.26, is inside it.

Fitted constants (``FITTED``): the activation copies (``overhead.ActivationCopies``) and the non-torch
terms, per family, by ``bench/overhead_fit.py --fit`` on tests/fixtures/startups (vLLM 0.19 H100 sweep and
the other start-ups of startups.yaml); the same script prints the leave-one-out error per family. V1 from
0.20 has five measured start-ups in two configurations: it uses the V1 constants with no free parameter of its own.

- ``non_torch``: non-torch increase during the profile run (sweep TP 1: 0.24-0.27 GiB; V0 ledgers
  0.07-0.35 GiB; the fit's safe-side bias takes 0.32 GiB).
- ``nvlink_buffers``: extra non-torch at TP > 1 on NVSwitch systems (sweep TP 2/4: +1.8-2.0 GiB; see
  ``overhead`` for why PCIe parts do not have it).
- CUDA-graph estimate deducted from 0.20 (``cudagraph.estimate_bytes``): ``0.28 GiB + 0.0175 GiB`` per layer on
  the stage (x2 for MLA, x1.2 for other MoE), the per-layer part scaled by the graphs vLLM captures (PIECEWISE +
  FULL, from the capture sizes and ``max_num_seqs``) over 102, fitted on the sweep's printed estimates
  (``bench/graph_fit.py``); the captured pool (``cudagraph.cuda_graph_bytes``) is ``0.42 GiB + 0.016 GiB`` per
  layer (x2.5 MLA, x1.3 MoE), fitted on the sweep's measured pools.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from enum import StrEnum
from typing import TYPE_CHECKING

from ctxfit.api import AttentionKind, EffectiveConfig, GiB
from ctxfit.engines.base import BudgetTerms
from ctxfit.engines.overhead import (
    CUDA_CONTEXT,
    DEFAULT_VOCAB,
    NCCL_INIT_NVSWITCH,
    ActivationCopies,
    ActivationSizes,
    SamplerWarmup,
    activation_peak,
    activation_sizes,
    nvswitch_system,
)

from .bands import v1_band, v1_sampler_warmup
from .cudagraph import cuda_graph_bytes as v1_cuda_graph_bytes
from .cudagraph import estimate_bytes, v0_cuda_graph_bytes
from .dequant import dequant_bytes
from .features import extra_terms, graph_shape
from .flags import eager_reason
from .oracle import v1_falls_back_to_v0
from .pipeline import v0_intermediate_tensor_bytes
from .runner import MODEL_RUNNER_V2_ESTIMATES_SINCE, plan_uses_model_runner_v2, sampler_state_bytes
from .v0batch import V0_MIN_BATCHED_TOKENS, v0_batched_tokens

if TYPE_CHECKING:
    from ctxfit.vocab.inputs import PlanInputs

V1_OPT_IN_SINCE = (0, 7, 0)
V1_DEFAULT_SINCE = (0, 8, 0)
"""The V1 engine is opt-in (``VLLM_USE_V1=1``) in 0.7, the default from 0.8.0 (``VLLM_USE_V1=0`` keeps V0),
and the only engine from 0.11.0 (docs/engine-memory.md A.3)."""
V0_REMOVED_SINCE = (0, 11, 0)
CUDAGRAPH_DEDUCTED_SINCE = (0, 20, 0)
"""VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS defaults to 1 from 0.20.0 (0 in 0.18/0.19, absent in 0.11)."""
CONSUMED_DEVICE_WIDE_SINCE = (0, 27, 0)
"""From 0.27.0 ``utils/mem_utils.py::memory_profiling`` budgets ``total_consumed + transient_peak_headroom``:
``total_consumed`` is the free memory the instance took from the worker's init snapshot to the end of the profile
run (weights, non-torch and every persistent torch buffer), the headroom the peak above what stays allocated (read in
the 0.27.0, 0.28.0, 0.29.0, 0.31.0 and 0.33.0 wheels; 0.26.0 budgets ``weights + non_torch_increase +
torch_peak_increase``). So Model Runner V2's penalty state (``runner.sampler_state_bytes``), allocated after the
snapshot by ``load_model``, is outside the budget up to 0.26 and inside it from 0.27."""
SNAPSHOT_AFTER_DISTRIBUTED_SINCE = (0, 12, 0)
"""Newer ``gpu_worker.init_device`` initializes "the distributed environment BEFORE taking memory snapshot"
(both orders seen in public copies of v1/worker/gpu_worker.py; the 0.12 boundary is [unverified])."""

V0_PROFILER_BASELINE_WINDOW = ((0, 6, 5), (0, 7, 0))
V0_PROFILER_BASELINE_BYTES = int(1.46 * GiB)
"""V0 releases between the memory-profiling overhaul (vllm PR 10511, Dec 2024) and its polish (PRs 11809,
12126, Jan 2025) count ~1.5 GiB more non-torch memory: PR 10511's own Llama-3-8B run on one H100 prints
``non_torch_memory 1.79GiB`` against 0.07-0.35 GiB in every other V0 ledger (1.79 - 0.33 fitted = 1.46).
0.6.4.post1 is affected too (vllm issue 11230, 4.09 GiB) but parses as 0.6.4, which is not."""

class Family(StrEnum):
    """vLLM version families whose memory accounting differs."""

    V0 = "vllm-v0"
    V1 = "vllm-v1"
    V1_020 = "vllm-v1-0.20"


@dataclass(frozen=True)
class OverheadConstants:
    """Fitted overhead constants of one family (bytes and copy counts)."""

    copies: ActivationCopies
    non_torch_bytes: int
    nvlink_buffers_bytes: int


_V1 = OverheadConstants(
    copies=ActivationCopies(sampler=3.674, sorting_sampler=9.7, forward=2.094, moe=2.083),
    non_torch_bytes=int(0.335 * GiB),
    nvlink_buffers_bytes=int(1.936 * GiB),
)
FITTED: dict[str, OverheadConstants] = {
    Family.V0.value: OverheadConstants(
        copies=ActivationCopies(sampler=3.674, sorting_sampler=8.417, forward=1.953, moe=2.083),
        non_torch_bytes=_V1.non_torch_bytes,
        nvlink_buffers_bytes=_V1.nvlink_buffers_bytes,
    ),
    "vllm-v1-0.7": replace(_V1, non_torch_bytes=int(0.327 * GiB)),
    "vllm-v1-0.12": replace(_V1, non_torch_bytes=int(0.147 * GiB)),
    "vllm-v1-0.17": _V1,
    Family.V1_020.value: replace(_V1, non_torch_bytes=int(0.637 * GiB)),
}
"""Per-band constants (``bands.py``: V0, the V1 bands 0.7-0.11 / 0.12-0.16 / 0.17-0.19, and 0.20+), printed by
``python bench/overhead_fit.py --fit`` (full-data fit)."""


def constants_band(fam: Family, version: tuple[int, int, int]) -> str:
    """The ``FITTED`` key of a family and release: V0 and 0.20+ are one band each, V1 below 0.20 splits by release."""
    return v1_band(version) if fam is Family.V1 else fam.value


def family(
    version: tuple[int, int, int],
    env: Mapping[str, str] | None = None,
    compute_capability: tuple[int, int] | None = None,
    kv_cache_dtype: str = "auto",
    *,
    mla: bool = False,
) -> Family:
    """The accounting family of a vLLM version; ``env`` is the container env (``VLLM_USE_V1=1`` selects V1
    on 0.7, ``VLLM_USE_V1=0`` V0 on 0.8-0.10); on 0.8-0.10 a GPU below compute capability 8.0, or a KV dtype
    the V1 attention backend does not take (``mla``: the model's attention), runs V0 unless the variable is set
    (``oracle.v1_falls_back_to_v0``)."""
    use_v1 = (env or {}).get("VLLM_USE_V1")
    if version < V1_OPT_IN_SINCE or (version < V1_DEFAULT_SINCE and use_v1 != "1"):
        return Family.V0
    if version < V0_REMOVED_SINCE and (
        use_v1 == "0" or v1_falls_back_to_v0(version, env or {}, compute_capability, kv_cache_dtype, mla=mla)
    ):
        return Family.V0
    return Family.V1_020 if version >= CUDAGRAPH_DEDUCTED_SINCE else Family.V1


def batch_defaults(
    cuda_total_bytes: int,
    version: tuple[int, int, int],
    product: str | None,
    env: Mapping[str, str] | None = None,
    compute_capability: tuple[int, int] | None = None,
    kv_cache_dtype: str = "auto",
    *,
    mla: bool = False,
) -> tuple[int, int]:
    """(max_num_batched_tokens, max_num_seqs) vLLM's OpenAI server picks (``engine/arg_utils.py``).

    V0: 256 sequences (its batched tokens follow ``v0_batched_tokens``). V1 0.7 (``_override_v1_engine_args``,
    0.7.2 wheel): 8192 tokens on H100/H200 by name, else 2048; 1024 sequences. 0.8.5: >= 70 GiB -> (8192,
    1024), else (2048, 256); 0.9.2 adds "not A100" (0.9.0 boundary [unverified]); 0.33 ``get_batch_defaults``
    adds >= 160 GiB -> (16384, 1024) from 0.20.
    """
    fam = family(version, env, compute_capability, kv_cache_dtype, mla=mla)
    if fam is Family.V0:
        return V0_MIN_BATCHED_TOKENS, 256
    name = (product or "").lower()
    if version < V1_DEFAULT_SINCE:
        return (8192 if "h100" in name or "h200" in name else 2048), 1024
    is_a100 = "a100" in name and version >= (0, 9, 0)
    if cuda_total_bytes >= 160 * GiB and version >= (0, 20, 0):
        return 16384, 1024
    if cuda_total_bytes >= 70 * GiB and not is_a100:
        return 8192, 1024
    return 2048, 256


def sampler_warmup(fam: Family, version: tuple[int, int, int], env: Mapping[str, str] | None = None,
                   image: str | None = None) -> SamplerWarmup:
    """The profile run's sampler step (``overhead.SamplerWarmup``): V0 sorts the whole vocabulary
    (``model_runner._dummy_run``); V1 by release, ``VLLM_USE_FLASHINFER_SAMPLER`` and the image
    (``bands.v1_sampler_warmup``)."""
    if fam is Family.V0:
        return SamplerWarmup.SORTING
    return v1_sampler_warmup(version, env or {}, image)


def is_mla(inputs: PlanInputs) -> bool:
    """Whether the model uses multi-head latent attention (0.10.2's V1 oracle picks its backend by it)."""
    return inputs.architecture.attention is AttentionKind.MLA


def container_env(inputs: PlanInputs) -> dict[str, str]:
    """The engine container's literal env values (``VLLM_USE_V1`` selects the family on 0.7-0.10)."""
    return {e.name: e.value for e in inputs.spec.engine.env if e.value is not None}


@dataclass(frozen=True)
class ProfileInputs:
    """What vLLM's profile-run overhead depends on for one plan (bytes), before the fitted constants."""

    family: Family
    requested_bytes: int
    weights_bytes: int
    sizes: ActivationSizes
    warmup: SamplerWarmup
    nvlink_multi_gpu: bool
    nccl_init_in_budget_bytes: int
    """Non-torch the profiler counts besides the fitted terms: NCCL init (V1 < 0.12), V0's 0.6.5-0.6.x baseline."""
    cuda_graph_bytes: int
    model_runner_v2: bool = False
    """vLLM >= 0.20 runs Model Runner V2 (``runner.py``)."""
    graphs_deducted: bool = False
    """vLLM subtracts ``cuda_graph_bytes`` from the KV budget: 0.20+ on the V1 model runner (its estimate), and
    Model Runner V2 from 0.29 (the captured pool); not before 0.20, nor on Model Runner V2 up to 0.28."""
    sampler_state_bytes: int = 0
    """Model Runner V2's penalty state (``runner.sampler_state_bytes``): in no printed term up to 0.26, so outside the
    budget; in ``total_consumed`` from 0.27 (``sampler_state_in_budget``)."""
    sampler_state_in_budget: bool = False
    """vLLM >= 0.27 counts the penalty state in its budget (``CONSUMED_DEVICE_WIDE_SINCE``)."""
    pp_intermediate_bytes: int = 0
    """V0 at PP > 1: intermediate tensors the (non-first) stage holds through its profile run (``pipeline.py``)."""
    band: str = ""
    """The ``FITTED`` key (``constants_band``); empty: the family's own."""
    eager: str | None = None
    """Why no CUDA graph is captured (``flags.eager_reason``), None when graphs are captured."""


def cuda_graph_bytes(
    inputs: PlanInputs,
    effective: EffectiveConfig,
    fam: Family,
    max_num_batched_tokens: int,
    *,
    model_runner_v2: bool = False,
) -> int:
    """CUDA-graph memory of one GPU, bytes (``cudagraph.py``): the estimate 0.20+ deducts under the V1 model
    runner, else the pool the capture keeps (V1's by graph count, V0's decode pool)."""
    capture = effective.cuda_graph_max_batch_size
    if fam is Family.V0:
        return v0_cuda_graph_bytes(inputs, capture)
    seqs = effective.max_num_seqs
    shape = graph_shape(inputs, effective)
    if fam is Family.V1_020 and not model_runner_v2:
        return estimate_bytes(inputs, capture, max_num_seqs=seqs, max_num_batched_tokens=max_num_batched_tokens,
                              shape=shape)
    return v1_cuda_graph_bytes(inputs, capture, max_num_seqs=seqs, max_num_batched_tokens=max_num_batched_tokens,
                               shape=shape)


def _product(inputs: PlanInputs) -> str | None:
    return inputs.gpu.product if inputs.gpu else inputs.spec.gpu.product


def profile_inputs(inputs: PlanInputs, effective: EffectiveConfig, *, max_num_batched_tokens: int) -> ProfileInputs:
    """Collect the family, budget and buffer sizes of one plan.

    Raises:
        ValueError: when ``effective.gpu_memory_utilization`` is unset.
    """
    if effective.gpu_memory_utilization is None:
        raise ValueError("vLLM needs gpu_memory_utilization")
    version = inputs.engine_version
    env = container_env(inputs)
    fam = family(version, env, inputs.compute_capability, effective.kv_cache_dtype, mla=is_mla(inputs))
    mrv2 = fam is Family.V1_020 and plan_uses_model_runner_v2(inputs, env)
    eager = eager_reason(inputs)
    deducted = fam is Family.V1_020 and (not mrv2 or version >= MODEL_RUNNER_V2_ESTIMATES_SINCE) and eager is None
    tokens = max_num_batched_tokens
    if fam is Family.V0 and not inputs.spec.batching.max_num_batched_tokens:
        sliding = inputs.architecture.sliding_window is not None
        tokens = v0_batched_tokens(
            effective.context_length, inputs.model_max_context, sliding_window=sliding, version=version
        )
    multi_gpu = inputs.tp > 1 and nvswitch_system(_product(inputs))
    nccl_init = 0
    if fam is Family.V0 and V0_PROFILER_BASELINE_WINDOW[0] <= version < V0_PROFILER_BASELINE_WINDOW[1]:
        nccl_init = V0_PROFILER_BASELINE_BYTES
    if fam is not Family.V0 and version < SNAPSHOT_AFTER_DISTRIBUTED_SINCE and inputs.tp * inputs.pp > 1:
        nccl_init = NCCL_INIT_NVSWITCH if nvswitch_system(_product(inputs)) else 0
    return ProfileInputs(
        family=fam,
        requested_bytes=int(inputs.cuda_total_bytes * effective.gpu_memory_utilization),
        weights_bytes=inputs.weights_per_gpu_bytes,
        sizes=activation_sizes(
            max_num_seqs=effective.max_num_seqs,
            max_num_batched_tokens=tokens,
            vocab_size=inputs.vocab_size,
            intermediate_size=inputs.intermediate_size,
            moe=inputs.moe,
            tensor_parallel=inputs.tp,
            dequant_bytes=dequant_bytes(inputs),
        ),
        warmup=sampler_warmup(fam, version, env, inputs.spec.engine.image),
        nvlink_multi_gpu=multi_gpu,
        nccl_init_in_budget_bytes=nccl_init,
        cuda_graph_bytes=0 if eager else cuda_graph_bytes(inputs, effective, fam, tokens, model_runner_v2=mrv2),
        model_runner_v2=mrv2,
        graphs_deducted=deducted,
        sampler_state_bytes=(
            sampler_state_bytes(effective.max_num_seqs, inputs.vocab_size or DEFAULT_VOCAB) if mrv2 else 0
        ),
        sampler_state_in_budget=version >= CONSUMED_DEVICE_WIDE_SINCE,
        pp_intermediate_bytes=v0_intermediate_tensor_bytes(inputs, tokens) if fam is Family.V0 else 0,
        band=constants_band(fam, version),
        eager=eager,
    )


@dataclass(frozen=True)
class Overheads:
    """The in-budget overhead terms of one plan, bytes."""

    activation_bytes: int
    activation_note: str
    non_torch_bytes: int
    deducted_graph_bytes: int

    def kv_pool_bytes(self, profile: ProfileInputs) -> int:
        """``requested - weights - activation - non-torch - deducted graphs`` (may be negative)."""
        return (
            profile.requested_bytes
            - profile.weights_bytes
            - self.activation_bytes
            - self.non_torch_bytes
            - self.deducted_graph_bytes
        )


def overheads(profile: ProfileInputs, constants: OverheadConstants | None = None) -> Overheads:
    """The overhead terms of ``profile`` under ``constants`` (default: ``FITTED[profile.family]``)."""
    c = constants or FITTED[profile.band or profile.family.value]
    activation = activation_peak(profile.sizes, c.copies, warmup=profile.warmup)
    pp = profile.pp_intermediate_bytes
    note = activation.note + (f" + {pp / GiB:.2f} GiB pipeline intermediate tensors" if pp else "")
    non_torch = c.non_torch_bytes + profile.nccl_init_in_budget_bytes
    if profile.sampler_state_in_budget:
        non_torch += profile.sampler_state_bytes
    if profile.nvlink_multi_gpu:
        non_torch += c.nvlink_buffers_bytes
    graphs = profile.cuda_graph_bytes if profile.graphs_deducted else 0
    return Overheads(activation.bytes + pp, note, non_torch, graphs)


def _graph_note(profile: ProfileInputs) -> str:
    if profile.eager:
        return f"CUDA graphs: none ({profile.eager})"
    if profile.graphs_deducted:
        if profile.model_runner_v2:
            return "CUDA graphs: captured pool deducted from the budget (Model Runner V2, vLLM >= 0.29)"
        return "CUDA graphs: estimate deducted from the budget (vLLM >= 0.20, V1 model runner)"
    why = "Model Runner V2 < 0.29 deducts none" if profile.model_runner_v2 else "vLLM < 0.20 does not deduct them"
    return f"CUDA graphs: ~{profile.cuda_graph_bytes / GiB:.2f} GiB outside the budget ({why})"


def budget(inputs: PlanInputs, effective: EffectiveConfig, *, max_num_batched_tokens: int) -> BudgetTerms:
    """Per-GPU budget terms for vLLM (bytes); ``kv_cache_bytes`` may be negative (nothing fits).

    Raises:
        ValueError: when ``effective.gpu_memory_utilization`` is unset.
    """
    profile = profile_inputs(inputs, effective, max_num_batched_tokens=max_num_batched_tokens)
    terms = overheads(profile)
    extras = extra_terms(inputs, effective, max_num_batched_tokens)
    in_budget = sum(e.bytes for e in extras if e.in_budget)
    deducted = profile.graphs_deducted
    state_outside = 0 if profile.sampler_state_in_budget else profile.sampler_state_bytes
    outside = CUDA_CONTEXT + (0 if deducted else profile.cuda_graph_bytes) + state_outside
    topology = "NVSwitch all-reduce buffers" if profile.nvlink_multi_gpu else "no NVSwitch buffers"
    notes: tuple[str, ...] = (
        f"usable: CUDA total {inputs.cuda_total_bytes / GiB:.2f} GiB x gpu-memory-utilization "
        f"{effective.gpu_memory_utilization}",
        f"weights: {inputs.weights_source}",
        f"activation: {terms.activation_note} ({profile.band or profile.family.value})",
        f"other: non-torch at TP {inputs.tp} ({topology})",
        _graph_note(profile),
    )
    if profile.sampler_state_bytes:
        where = ("other: includes" if profile.sampler_state_in_budget else "outside:")
        why = ("in vLLM >= 0.27's total_consumed" if profile.sampler_state_in_budget else "in no profiled term")
        notes += (
            f"{where} Model Runner V2 sampler state ~{profile.sampler_state_bytes / GiB:.2f} GiB "
            f"({effective.max_num_seqs} seqs x vocab penalty counts, {why})",
        )
    return BudgetTerms(
        total_bytes=inputs.gpu_total_bytes,
        cuda_total_bytes=inputs.cuda_total_bytes,
        usable_bytes=profile.requested_bytes,
        weights_bytes=inputs.weights_per_gpu_bytes,
        activation_bytes=terms.activation_bytes,
        cuda_graph_bytes=terms.deducted_graph_bytes,
        other_bytes=terms.non_torch_bytes,
        kv_cache_bytes=terms.kv_pool_bytes(profile) - in_budget,
        outside_bytes=outside,
        notes=notes,
        extras=extras,
    )
