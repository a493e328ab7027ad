"""Start-up accounting by engine kind: ``Engine.parse_startup`` / ``Engine.logged_version``."""

from __future__ import annotations

from ctxfit.api import EngineKind
from ctxfit.vocab.startup import StartupReport

from . import get_engine


def parse_startup(kind: EngineKind, text: str) -> StartupReport:
    """The engine's start-up accounting in ``text`` (``ctxfit.engines.vllm.startup``,
    ``ctxfit.engines.sglang.startup``); fields the log does not print are None. Never raises."""
    return get_engine(kind).parse_startup(text)


def logged_version(kind: EngineKind, text: str) -> tuple[int, int] | None:
    """(major, minor) of the engine that wrote ``text`` when the log states it (vLLM:
    ``ctxfit.engines.vllm.startup.logged_version``); None when not observed (SGLang does not log its version in
    the start-up lines it prints). Never raises."""
    return get_engine(kind).logged_version(text)
