"""Start-up overhead terms shared by the engines' memory models: the activation peak of vLLM's profile run,
and the collective-communication buffers a multi-GPU start-up allocates.

The activation peak is the largest of a few transient buffers, each ``copies x one buffer``:

- Sampler warm-up over ``max_num_seqs`` requests: fp32 logits ``[max_num_seqs, vocab]`` and their
  copies (probabilities, sorted values and int64 indices, top-k/top-p masks). vLLM V0 ``worker/
  model_runner.py::_dummy_run`` samples with ``top_k = vocab - 1, top_p = 0.99`` "to reflect the accurate
  memory usage" (a full-vocabulary sort, ~10 copies); V1 ``gpu_model_runner._dummy_sampler_run`` did the
  same until 0.16 and needs ~4 copies from 0.17 (llm-d-planner version sweep: Qwen3-14B on H100 profiles
  5.64 GiB in 0.15/0.16 and 2.23 GiB in 0.17/0.18 at 1024 sequences).
- Dense forward of ``max_num_batched_tokens`` tokens: the gate/up output ``[tokens, 2 x intermediate / TP]``
  in bf16 (the largest activation of a decoder layer), times a number of live copies.
- MoE: the fused-MoE intermediate caches ``[tokens, top_k, 2 x moe_intermediate / TP]`` bf16 (vLLM
  ``fused_moe`` cache1/cache2/cache3), alive at the same time as the sampler buffers' peak in V1.

- Weight dequantization (bitsandbytes 4-bit): each quantized matmul of the profiled forward
  materializes one bf16 copy of its weight shard (and, for MoE, all local experts) for the duration
  of the matmul; ``ActivationSizes.dequant_bytes`` carries that buffer, sized by
  ``engines/vllm/dequant.py``, on top of the forward it belongs to.

The copy counts are fitted per engine version family (``ActivationCopies``; the values live next to each
engine's memory model, the fit and its leave-one-out error in ``bench/overhead_fit.py``).

Collective buffers: on NVSwitch systems (HGX H100/H200/H20/B200) NCCL's NVLink SHARP (NVLS) and vLLM's
custom / symmetric-memory all-reduce allocate buffers outside PyTorch on the first collectives
(NCCL ``NCCL_NVLS_ENABLE``: https://docs.nvidia.com/deeplearning/nccl/user-guide/docs/env.html). PCIe
parts (RTX, L40S, H100 PCIe/NVL) and A100 (no NVLS) allocate little: measured non-torch at TP > 1 is
0.25-0.43 GiB there (vLLM V0 on 2x RTX 4090 and 4x A100-40GB, V1 0.28 on 8x RTX PRO 4500) against
1.8-2.0 GiB more on H100 SXM (vLLM 0.19 sweep, TP 2/4).
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

from ctxfit.api import GiB
from ctxfit.catalog import MoE

DEFAULT_VOCAB = 152064
"""Vocabulary assumed when config.json is unknown: the largest common LLM vocabulary below Gemma's (safe side)."""
DEFAULT_INTERMEDIATE = 14336
BF16_BYTES = 2
FP32_BYTES = 4

NCCL_INIT_NVSWITCH = int(1.5 * GiB)
"""Memory the distributed init takes before weights load on an NVSwitch system at TP > 1, the upper part of
what start-ups print (a larger value errs to the safe side): vLLM 0.19 sweep ``init_cuda_memory_gib`` minus
TP 1's 0.51 GiB is 1.02-1.04 GiB for dense models at TP 2/4 and 1.50-1.56 GiB for MoE models (their
expert-parallel groups add communicators); SGLang prints "Init torch distributed ends. mem usage=1.25 GB"
on 8x H100 (0.5.2) and 1.77-2.01 GB on 8x H200 (a 0.5 dev build). On PCIe parts the init adds nothing
measurable (SGLang on 4x RTX 4090: 0.44 GiB used before load, the CUDA context alone)."""
CUDA_CONTEXT = int(0.51 * GiB)
"""CUDA context + cuBLAS handles before weights load: vLLM 0.19 sweep ``init_cuda_memory_gib`` at TP 1."""

NVSWITCH_MARKERS = ("HBM3", "H200", "H20", "H800", "B200", "B300", "GB200", "GB300", "SXM5")
"""GFD product substrings of NVSwitch (NVLS-capable, Hopper or newer) systems."""
PCIE_MARKERS = ("PCIE", "NVL", "RTX", "L40", "L4", "A10", "T4")


class SamplerWarmup(StrEnum):
    """What the profile run does after the dummy forward (vLLM ``gpu_model_runner``, ``model_runner``).

    SORTING: a sampler warm-up over ``max_num_seqs`` requests with ``top_k = vocab - 1`` (V0 ``_dummy_run``;
    V1 ``_dummy_sampler_run`` 0.8-0.16, read in the 0.8.5 and 0.9.2 wheels). LEAN: the same warm-up from 0.17,
    whose sampler keeps fewer full-vocabulary buffers (the dummy parameters are unchanged in 0.20.0).
    LOGITS_ONLY: V1 0.7 has no sampler warm-up ("TODO(woosuk): Consider the memory usage of the sampler",
    0.7.2 ``profile_run``); it computes bf16 logits of all ``max_num_tokens`` tokens, one copy.
    """

    SORTING = "sorting"
    LEAN = "lean"
    LOGITS_ONLY = "logits-only"


@dataclass(frozen=True)
class ActivationCopies:
    """Live copies of each transient buffer at the profile peak (dimensionless, fitted per family).

    Attributes:
        sampler: fp32 ``[max_num_seqs, vocab]`` buffers of a V1 (>= 0.17) sampler warm-up.
        sorting_sampler: the same for a sampler warm-up that sorts the whole vocabulary (V0, V1 < 0.17).
        forward: bf16 ``[tokens, 2 x intermediate / TP]`` buffers of the dense forward.
        moe: fused-MoE intermediate caches.
    """

    sampler: float
    sorting_sampler: float
    forward: float
    moe: float


@dataclass(frozen=True)
class ActivationSizes:
    """One copy of each transient buffer, bytes (what ``ActivationCopies`` multiplies)."""

    sampler_logits_bytes: int
    forward_mlp_bytes: int
    moe_cache_bytes: int
    max_num_seqs: int
    max_num_batched_tokens: int
    vocab: int
    dequant_bytes: int = 0
    """Transient bf16 weight copies of a quantized forward (bitsandbytes), alive with the forward's buffers."""


@dataclass(frozen=True)
class ActivationEstimate:
    """Activation peak, bytes, with the part that dominated (for the report)."""

    bytes: int
    note: str


def activation_sizes(
    *,
    max_num_seqs: int,
    max_num_batched_tokens: int,
    vocab_size: int | None,
    intermediate_size: int | None,
    moe: MoE | None,
    tensor_parallel: int,
    has_sampler: bool = True,
    dequant_bytes: int = 0,
) -> ActivationSizes:
    """One copy of each profile-run buffer on one GPU.

    Args:
        max_num_seqs: sequences in the sampler warm-up.
        max_num_batched_tokens: tokens in the dummy forward.
        vocab_size, intermediate_size: config.json fields (None -> ``DEFAULT_VOCAB``/``DEFAULT_INTERMEDIATE``).
        moe: MoE sizes or None (dense).
        tensor_parallel: TP size (divides the MLP / expert intermediate, not the logits, which are gathered).
        has_sampler: False on pipeline stages that do not sample.
        dequant_bytes: transient dequantized weights of the forward (0 unless quantized that way).

    Returns:
        ``ActivationSizes`` in bytes.
    """
    vocab = vocab_size or DEFAULT_VOCAB
    sampler = max_num_seqs * vocab * FP32_BYTES if has_sampler else 0
    inter = max(1, (intermediate_size or DEFAULT_INTERMEDIATE) // tensor_parallel)
    forward = max_num_batched_tokens * 2 * inter * BF16_BYTES
    moe_cache = 0
    if moe is not None:
        per_tp = max(1, moe.intermediate_size // tensor_parallel)
        moe_cache = max_num_batched_tokens * moe.top_k * 2 * per_tp * BF16_BYTES
    return ActivationSizes(sampler, forward, moe_cache, max_num_seqs, max_num_batched_tokens, vocab, dequant_bytes)


def activation_peak(sizes: ActivationSizes, copies: ActivationCopies, *, warmup: SamplerWarmup) -> ActivationEstimate:
    """Transient activation peak of the profile run, bytes.

    Dense: ``max(forward + dequant, sampler)`` (the forward's buffers, dequantized weight copies included,
    are freed before sampling). MoE: ``sampler + moe caches + dequant`` (the sweep's MoE rows sit above the
    sampler term by about the caches; the dequantized experts are added on the safe side).
    """
    if warmup is SamplerWarmup.LOGITS_ONLY:
        sampler = sizes.max_num_batched_tokens * sizes.vocab * BF16_BYTES
        what = f"logits of {sizes.max_num_batched_tokens} tokens x vocab {sizes.vocab}"
    else:
        sampler_copies = copies.sorting_sampler if warmup is SamplerWarmup.SORTING else copies.sampler
        sampler = int(sampler_copies * sizes.sampler_logits_bytes)
        what = f"sampler warm-up {sizes.max_num_seqs} seqs x vocab {sizes.vocab}"
    dequant = f" + {sizes.dequant_bytes / GiB:.2f} GiB dequantized weights" if sizes.dequant_bytes else ""
    if sizes.moe_cache_bytes:
        return ActivationEstimate(
            sampler + int(copies.moe * sizes.moe_cache_bytes) + sizes.dequant_bytes,
            f"{what} + fused-MoE caches at {sizes.max_num_batched_tokens} tokens{dequant}",
        )
    forward = int(copies.forward * sizes.forward_mlp_bytes) + sizes.dequant_bytes
    if forward > sampler:
        return ActivationEstimate(forward, f"dense forward of {sizes.max_num_batched_tokens} tokens{dequant}")
    return ActivationEstimate(sampler, what)


def nvswitch_system(product: str | None) -> bool:
    """True when ``product`` (a GFD ``nvidia.com/gpu.product``) is an NVSwitch, NVLS-capable part.

    Unknown product (only ``gpu.memory`` given): True, the larger footprint, so the prediction errs safe.
    """
    if not product:
        return True
    name = product.upper()
    if any(marker in name for marker in PCIE_MARKERS):
        return False
    return any(marker in name for marker in NVSWITCH_MARKERS)


PCIE_DIST_INIT_BASE = int(0.19 * GiB)
PCIE_DIST_INIT_PER_RANK = int(0.05 * GiB)
"""The distributed init on PCIe parts at TP x PP > 1 (SGLang's "Init torch distributed ends. mem usage=M GB": the
NCCL communicators of the world and TP groups, SGLang's own all-reduce buffers): 0.29 GB at TP 2
(https://github.com/sgl-project/sglang/issues/17402) and 0.39 GB at TP 4 on 4 x RTX PRO 6000
(https://github.com/sgl-project/sglang/issues/40558, NCCL 2.29): 0.19 GiB + 0.05 GiB per rank. Two older TP 4 PCIe
start-ups (L4, RTX 4090) lost less, so the term errs to the safe side there."""


def dist_init_bytes(product: str | None, world_size: int) -> int:
    """Memory the distributed init takes before weights load, bytes: none at world size 1, ``NCCL_INIT_NVSWITCH`` on
    NVSwitch systems, ``0.19 GiB + 0.05 GiB x world size`` on PCIe parts (it grows with the ranks)."""
    if world_size <= 1:
        return 0
    if nvswitch_system(product):
        return NCCL_INIT_NVSWITCH
    return PCIE_DIST_INIT_BASE + PCIE_DIST_INIT_PER_RANK * world_size


def pre_load_used_bytes(product: str | None, world_size: int) -> int:
    """GPU memory in use before weights load: CUDA context plus the distributed init (``dist_init_bytes``)."""
    return CUDA_CONTEXT + dist_init_bytes(product, world_size)
