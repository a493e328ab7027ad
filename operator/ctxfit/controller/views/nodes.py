"""Nodes whose NVIDIA driver is too old for the engine image, and nodes a start already failed on (pure).

Reads the GFD CUDA labels against the image's CUDA. The labels and the exclusion rule: docs/design/engines.md.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping

from ctxfit.api import InferenceServerSpec
from ctxfit.api.status import Attempt, AttemptOutcome
from ctxfit.engines import get_engine
from ctxfit.render.deployment import engine_image

CUDA_RUNTIME_LABELS = (
    ("nvidia.com/cuda.runtime-version.major", "nvidia.com/cuda.runtime-version.minor"),
    ("nvidia.com/cuda.runtime.major", "nvidia.com/cuda.runtime.minor"),
)
"""GFD labels of the CUDA version the driver supports, current names first."""

DRIVER_TOO_OLD_KIND = "CUDADriverTooOld"
"""``FailureKind`` value of a start that failed because the node's driver is too old."""

_CUDA_TAG = re.compile(r"cu(\d{2})(\d)\b")


def node_cuda(labels: Mapping[str, str]) -> tuple[int, int] | None:
    """(major, minor) CUDA the node's driver supports, from GFD labels; None when not labelled."""
    for major_key, minor_key in CUDA_RUNTIME_LABELS:
        try:
            return int(labels[major_key]), int(labels.get(minor_key, "0"))
        except (KeyError, ValueError):
            continue
    return None


def required_cuda(spec: InferenceServerSpec, operator_image: str | None = None) -> tuple[int, int] | None:
    """CUDA (major, minor) the image that runs needs (``render.engine_image``: the operator's image when
    ``CTXFIT_<ENGINE>_IMAGE`` is set); None when unknown (another image without a ``cuXYZ`` tag)."""
    engine = get_engine(spec.engine.kind)
    image = engine_image(spec, operator_image)
    if image == engine.default_image(spec.engine.version):
        return engine.image_cuda(spec.engine.version)
    match = _CUDA_TAG.search(image.rsplit(":", 1)[-1])
    return (int(match.group(1)), int(match.group(2))) if match else None


def driver_too_old(node: tuple[int, int] | None, required: tuple[int, int] | None) -> bool:
    """True only when both are known and the node's CUDA is below the image's."""
    return node is not None and required is not None and node < required


def failed_driver_nodes(attempts: Iterable[Attempt]) -> list[str]:
    """Nodes where an attempt failed with ``CUDADriverTooOld``, sorted, without duplicates."""
    return sorted({a.node for a in attempts if a.outcome is AttemptOutcome.FAILED
                   and a.failure_kind == DRIVER_TOO_OLD_KIND and a.node})
