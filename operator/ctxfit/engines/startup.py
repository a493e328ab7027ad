"""Start-up accounting dispatch: engine kind -> that engine's parser (exhaustive, no silent default)."""

from __future__ import annotations

from typing import assert_never

from ctxfit.api import EngineKind
from ctxfit.vocab.startup import StartupReport


def parse_startup(kind: EngineKind, text: str) -> StartupReport:
    """The engine's start-up accounting in ``text`` (``ctxfit.engines.vllm.startup``,
    ``ctxfit.engines.sglang.startup``); fields the log does not print are None. Never raises."""
    if kind is EngineKind.VLLM:
        from .vllm.startup import parse_startup as parse_vllm

        return parse_vllm(text)
    if kind is EngineKind.SGLANG:
        from .sglang.startup import parse_startup as parse_sglang

        return parse_sglang(text)
    assert_never(kind)


def logged_version(kind: EngineKind, text: str) -> tuple[int, int] | None:
    """(major, minor) of the engine that wrote ``text`` when the log states it (vLLM:
    ``ctxfit.engines.vllm.startup.logged_version``); None when not observed (SGLang does not log its version in
    the start-up lines it prints). Never raises."""
    if kind is EngineKind.VLLM:
        from .vllm.startup import logged_version as vllm_version

        return vllm_version(text)
    if kind is EngineKind.SGLANG:
        return None
    assert_never(kind)
