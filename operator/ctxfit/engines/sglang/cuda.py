"""CUDA version inside the official ``lmsysorg/sglang`` images, by SGLang version.

Source: sgl-project/sglang ``docker/Dockerfile`` at v0.5.5 (``ARG CUDA_VERSION=12.9.1``,
``SGL_VERSION=0.5.5``). Older tags are not listed: ctxfit does not filter nodes for them (unknown).
"""

from __future__ import annotations

IMAGE_CUDA: tuple[tuple[tuple[int, int, int], tuple[int, int]], ...] = (((0, 5, 5), (12, 9)),)
"""(first SGLang version, CUDA major.minor of its image), newest first."""


def image_cuda(version: tuple[int, int, int]) -> tuple[int, int] | None:
    """CUDA (major, minor) the official image of ``version`` needs, or None when not known."""
    return next((cuda for since, cuda in IMAGE_CUDA if version >= since), None)
