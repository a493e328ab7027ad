"""Can the engine the spec asks for load the resolved model? The CLI's form of ``ctxfit.engines.registry.unsupported``
(the operator's resolution step calls that pure function directly): a ``ResolveError`` of kind
``UnsupportedArchitecture`` naming the config field ctxfit could not map, or the engine versions that serve the
architecture (read in their released wheels)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from ctxfit.engines.registry import unsupported
from ctxfit.vocab.modelsource import ModelSource

from .errors import ResolveError, ResolveKind

if TYPE_CHECKING:
    from ctxfit.api import InferenceServerSpec


def require_supported(source: ModelSource, spec: InferenceServerSpec) -> None:
    """Raise ``ResolveError(UNSUPPORTED_ARCHITECTURE)`` when the model cannot be planned or served as asked."""
    problem = unsupported(source.config, spec)
    if problem is not None:
        raise ResolveError(ResolveKind.UNSUPPORTED_ARCHITECTURE, source.repo or spec.model.name, problem)
