"""Can the engine the spec asks for load the resolved model? (pure; the same check for the CLI and the operator)

Two questions, in order: does ctxfit read the architecture from config.json (``ctxfit.vocab.hfconfig``; the
message names the field it could not map), and does the engine version register one of config.json
``architectures`` in its own model registry, read in its released wheel (``ctxfit.engines.registry``; the message
says which versions do). A spec that gives ``model.architecture`` skips the first; an engine version without a
read wheel, or the Transformers backend, skips the second.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ctxfit.engines.registry import check_architecture
from ctxfit.vocab.hfconfig import architecture_from_hf_config
from ctxfit.vocab.modelsource import ModelSource

from .errors import ResolveError, ResolveKind

if TYPE_CHECKING:
    from ctxfit.api import InferenceServerSpec


def require_supported(source: ModelSource, spec: InferenceServerSpec) -> None:
    """Raise ``ResolveError(UNSUPPORTED_ARCHITECTURE)`` when the model cannot be planned or served as asked.

    Raises:
        ResolveError: ``UnsupportedArchitecture``, one line (the field, or the registry's answer).
    """
    repo = source.repo or spec.model.name
    if spec.model.architecture is None:
        try:
            architecture_from_hf_config(source.config)
        except (ValueError, TypeError, KeyError, AssertionError) as exc:
            raise ResolveError(ResolveKind.UNSUPPORTED_ARCHITECTURE, repo,
                               f"config.json: {exc}") from None
    from ctxfit.engines.sglang import DEFAULT_VERSION as SGLANG_DEFAULT
    from ctxfit.engines.vllm import DEFAULT_VERSION as VLLM_DEFAULT

    kind = str(getattr(spec.engine.kind, "value", spec.engine.kind))
    version = spec.engine.version or (SGLANG_DEFAULT if kind == "sglang" else VLLM_DEFAULT)
    archs = source.config.get("architectures")
    check = check_architecture(archs if isinstance(archs, list) else [], kind, version, list(spec.engine.args or []))
    if check.served is False:
        raise ResolveError(ResolveKind.UNSUPPORTED_ARCHITECTURE, repo, check.message)
