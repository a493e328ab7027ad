"""CUDA version inside the official ``vllm/vllm-openai`` images, by vLLM version.

The image declares ``NVIDIA_REQUIRE_CUDA=cuda>=X.Y``; the NVIDIA container runtime refuses to start it
on a node whose driver supports an older CUDA ("unsatisfied condition: cuda>=12.8, please update your
driver"), and a driver too old for the image's PyTorch fails with "The NVIDIA driver on your system is
too old". Sources: vllm-project/vllm issue #5635 (images after 0.4.3 need cuda>=12.4: "we use 12.4
because the old versions of base container will be deleted soon"), vLLM issue #18813 (the 0.9.0 image
needs cuda>=12.8). Later images keep at least 12.8 (lower bound; newer tags may need more).
"""

from __future__ import annotations

IMAGE_CUDA: tuple[tuple[tuple[int, int, int], tuple[int, int]], ...] = (
    ((0, 9, 0), (12, 8)),
    ((0, 4, 3), (12, 4)),
    ((0, 0, 0), (12, 1)),
)
"""(first vLLM version, CUDA major.minor of its image), newest first."""


def image_cuda(version: tuple[int, int, int]) -> tuple[int, int]:
    """CUDA (major, minor) the official image of ``version`` needs from the node's driver."""
    return next(cuda for since, cuda in IMAGE_CUDA if version >= since)
