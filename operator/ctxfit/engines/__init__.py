"""Engine modules (one per engine) behind the ``Engine`` Protocol; dispatch is exhaustive."""

from __future__ import annotations

from typing import assert_never

from ctxfit.api import EngineKind

from .base import BudgetTerms, Engine, KVDtypeDecision, Launch


def get_engine(kind: EngineKind) -> Engine:
    """The engine implementation for ``kind``. Exhaustive over ``EngineKind`` (mypy checks it)."""
    if kind is EngineKind.VLLM:
        from .vllm import VLLM

        return VLLM()
    if kind is EngineKind.SGLANG:
        from .sglang import SGLang

        return SGLang()
    assert_never(kind)


__all__ = ["BudgetTerms", "Engine", "KVDtypeDecision", "Launch", "get_engine"]
