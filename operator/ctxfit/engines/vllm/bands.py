"""vLLM V1 version bands: which sampler the profile run warms up, and which fitted constants apply.

The V1 profile run ends with ``gpu_model_runner._dummy_sampler_run``: ``max_num_seqs`` dummy requests with
``top_k = vocab - 1, top_p = 0.9`` (the same parameters in every wheel 0.8.0 - 0.33.0). What that costs depends on
the top-k/top-p implementation the release picks (``v1/sample/ops/topk_topp_sampler.py``, read in every wheel
0.8.0 - 0.33.0; ``VLLM_USE_FLASHINFER_SAMPLER`` in ``envs.py``):

- 0.8.0 - 0.11.x: FlashInfer's rejection sampler whenever FlashInfer (>= 0.2.3) is installed, as in the
  ``vllm/vllm-openai`` image ("Using FlashInfer for top-p & top-k sampling."; the variable defaults to None, read as
  on): ``top_k_top_p_sampling_from_logits`` keeps a masked copy and the probabilities, no sort. Without FlashInfer,
  or with ``VLLM_USE_FLASHINFER_SAMPLER=0``, the PyTorch-native sort (flashinfer issue 1180: the same server on the
  same GPU keeps 4.00 GiB of KV with FlashInfer, 2.49 GiB with the variable at 0). The PyPI wheels of 0.10.2 and
  0.11.0 list ``flashinfer-python`` only as an extra (0.12 as a requirement), so an image ctxfit does not know
  (``spec.engine.image``) is taken to sort: the larger reserve.
- 0.12 - 0.16: FlashInfer only with ``VLLM_USE_FLASHINFER_SAMPLER=1`` (``if envs.VLLM_USE_FLASHINFER_SAMPLER:``,
  default None): the native sort of the whole ``[max_num_seqs, vocab]`` fp32 logits (values, int64 indices, softmax,
  cumsum, masks).
- 0.17 - 0.20: a Triton top-k/top-p kernel for batches of 8 or more rows (``apply_top_k_top_p_triton``), no sort;
  FlashInfer still opt-in.
- 0.21+: FlashInfer by default again (``VLLM_USE_FLASHINFER_SAMPLER`` defaults to True; on GPUs FlashInfer does not
  support, the Triton kernel).

So the sorting warm-up (``SamplerWarmup.SORTING``) is the 0.12 - 0.16 default and the fallback of 0.8 - 0.11
without FlashInfer; every other V1 release warms up lean (``SamplerWarmup.LEAN``).

Bands of fitted constants (``memory.FITTED``; ``bench/overhead_fit.py`` fits and reports each): the non-torch
memory the profile run counts differs by release (ledgers at TP 1: 0.02-0.07 GiB in 0.10.x, 0.13 GiB in 0.15 -
0.17, 0.24-0.27 GiB in 0.18 / 0.19, 0.07-0.08 GiB under Model Runner V2 in 0.26; tests/fixtures/startups), so each
band has its own non-torch constant, the activation copies being shared where the warm-up is the same.
"""

from __future__ import annotations

from collections.abc import Mapping

from ctxfit.engines.overhead import SamplerWarmup

Version = tuple[int, int, int]

FLASHINFER_DEFAULT_UNTIL = (0, 12, 0)
"""0.8 - 0.11 sample with FlashInfer by default (variable unset = on)."""
TRITON_TOPK_SINCE = (0, 17, 0)
"""0.17 adds the Triton top-k/top-p kernel (lean) as the native path."""
V1_DEFAULT_SINCE = (0, 8, 0)

BANDS: tuple[tuple[str, Version, Version], ...] = (
    ("vllm-v1-0.7", (0, 7, 0), (0, 11, 99)),
    ("vllm-v1-0.12", (0, 12, 0), (0, 16, 99)),
    ("vllm-v1-0.17", (0, 17, 0), (0, 19, 99)),
)
"""(band, first, last release) of the V1 engine before 0.20; 0.20+ is ``vllm-v1-0.20`` (CUDA graphs deducted)."""


def v1_band(version: Version) -> str:
    """The constants band of a V1 release below 0.20 (``vllm-v1-0.17`` for an unknown one in between)."""
    for name, first, last in BANDS:
        if first <= version <= last:
            return name
    return "vllm-v1-0.17"


OFFICIAL_IMAGE = "vllm/vllm-openai"
"""The image ctxfit renders by default; it ships FlashInfer (vLLM's Dockerfile installs it)."""


def ships_flashinfer(image: str | None) -> bool:
    """Whether the engine image has FlashInfer: the default image (``spec.engine.image`` unset) and
    ``vllm/vllm-openai`` do; of any other image ctxfit cannot tell."""
    return not image or image.split("@")[0].split(":")[0].endswith(OFFICIAL_IMAGE)


def v1_sampler_warmup(version: Version, env: Mapping[str, str], image: str | None = None) -> SamplerWarmup:
    """The V1 profile run's sampler step for a release, the container env and the image (see the module doc)."""
    if version < V1_DEFAULT_SINCE:
        return SamplerWarmup.LOGITS_ONLY
    flag = env.get("VLLM_USE_FLASHINFER_SAMPLER")
    if version < FLASHINFER_DEFAULT_UNTIL:
        if flag == "0" or (flag != "1" and not ships_flashinfer(image)):
            return SamplerWarmup.SORTING
        return SamplerWarmup.LEAN
    if version < TRITON_TOPK_SINCE:
        return SamplerWarmup.LEAN if flag == "1" else SamplerWarmup.SORTING
    return SamplerWarmup.LEAN
