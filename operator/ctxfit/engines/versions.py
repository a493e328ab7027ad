"""Which engine versions ctxfit models, and what a plan of another version applies (pure).

A version selects the memory accounting, the flags and their spellings (``engines/<engine>/memory.py``,
``flags.py``). Those rules were read in the released wheels ``flags.TABLE.versions_read`` names (vLLM 0.8.0-0.33.0,
SGLang 0.4.0-0.5.23; ``tests/fixtures/engine-flags/*.json``, ``registry.json``), and vLLM's V0 accounting further
back on the V0 start-ups of ``tests/fixtures/startups`` (0.6.4 the oldest; ``vllm/memory.py``, family V0). Every rule
compares the version with a boundary inside that range, so a release before the oldest gets the oldest's rules and
one after the newest the newest's: the plan of an unmodelled release is the plan of the nearest modelled one, which
the engine may not match. ``check_version`` says which case a spec is in, as a typed ``VersionCoverage``; the CLI
prints a warning line and the operator sets condition ``EngineVersionModelled`` from it (never a refusal).

The version is ``spec.engine.version``; unset, the plan applies ``vocab.inputs.DEFAULT_ENGINE_VERSION`` whatever
``spec.engine.image`` runs, so an image whose tag names another release, or no release (``latest``, a digest, a
tag of one's own), is reported too.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from enum import StrEnum
from functools import cache

from ctxfit.api import EngineKind, InferenceServerSpec
from ctxfit.vocab.inputs import DEFAULT_ENGINE_VERSION

Version = tuple[int, int, int]

_VERSION = re.compile(r"^v?(\d+)\.(\d+)(?:\.(\d+))?")
V0_OLDEST_MEASURED: Version = (0, 6, 0)
"""vLLM's V0 accounting (``vllm/memory.py``: the 0.6.5 profiler baseline, 512 batched tokens with chunked prefill
before 0.6.5) is fitted on V0 start-ups from 0.6.4 (tests/fixtures/startups): the 0.6 line is the oldest modelled."""


class VersionCoverage(StrEnum):
    """Whether the plan models the engine version the server runs (``EngineVersionModelled`` reasons)."""

    MODELLED = "VersionModelled"
    OLDER = "OlderThanModelled"
    NEWER = "NewerThanModelled"
    NOT_SET = "VersionNotSet"
    """``spec.engine.version`` unset and the image's tag names another release than the default the plan applies."""
    UNKNOWN = "VersionUnknown"
    """``spec.engine.version`` unset and the image's tag names no release: what runs is not known."""


@dataclass(frozen=True)
class ModelledRange:
    """The releases of one engine ctxfit's rules were read or fitted on: ``first`` to ``last``; with
    ``patches_are_releases`` False (vLLM: patch releases fix bugs) the last minor's later patches are included, with
    True (SGLang: 0.5.1 ... 0.5.23 each add flags and change defaults) they are not."""

    engine: EngineKind
    first: Version
    last: Version
    patches_are_releases: bool

    def text(self) -> str:
        last = _show(self.last) if self.patches_are_releases else f"{self.last[0]}.{self.last[1]}.x"
        return f"{_show(self.first)} - {last}"

    def newer(self, version: Version) -> bool:
        """``version`` is a release after the range."""
        return version > self.last if self.patches_are_releases else version[:2] > self.last[:2]


@dataclass(frozen=True)
class VersionCheck:
    """``check_version``'s answer.

    Attributes:
        coverage: the case (the decision reads this, never ``message``).
        modelled: the engine's ``ModelledRange``.
        planned: the version whose rules the plan applies (``spec.engine.version``, else the default).
        nearest: the modelled release those rules are, in effect (``planned`` when modelled).
        written: what the version was read from (``spec.engine.version``'s value, or the image reference).
    """

    coverage: VersionCoverage
    modelled: ModelledRange
    planned: Version
    nearest: Version
    written: str | None

    @property
    def ok(self) -> bool:
        """The plan models the version the server runs."""
        return self.coverage is VersionCoverage.MODELLED

    def message(self) -> str:
        """One line for humans: what was asked, what ctxfit models, what the plan applies."""
        name = "vLLM" if self.modelled.engine is EngineKind.VLLM else "SGLang"
        span = f"{name} {self.modelled.text()}"
        if self.coverage is VersionCoverage.MODELLED:
            return f"{name} {_show(self.planned)} is modelled ({span})"
        if self.coverage is VersionCoverage.OLDER:
            return (f"spec.engine.version {self.written}: older than the {span} ctxfit models; the plan applies the "
                    f"rules of the nearest modelled release, {_show(self.nearest)}, which this engine may not match")
        if self.coverage is VersionCoverage.NEWER:
            return (f"spec.engine.version {self.written}: newer than the {span} ctxfit models; the plan applies the "
                    f"rules of the nearest modelled release, {_show(self.nearest)}, which this engine may not match")
        if self.coverage is VersionCoverage.NOT_SET:
            return (f"spec.engine.image {self.written} runs another release than the {name} {_show(self.planned)} "
                    "the plan applies (spec.engine.version is unset): set spec.engine.version to the image's version")
        return (f"spec.engine.image {self.written}: its tag names no {name} version and spec.engine.version is "
                f"unset; the plan applies {name} {_show(self.planned)}: set spec.engine.version to the image's version")

    def to_json(self) -> dict[str, object]:
        """``ctxfit plan -o json`` ``engineVersion``: ``coverage``, ``modelled``, ``planned``, ``nearest``,
        ``message``."""
        return {"coverage": self.coverage.value, "modelled": self.modelled.text(), "planned": _show(self.planned),
                "nearest": _show(self.nearest), "message": self.message()}


def _show(version: Version) -> str:
    return ".".join(str(p) for p in version)


def _parse(text: str | None) -> Version | None:
    match = _VERSION.match(text.strip()) if text else None
    if match is None:
        return None
    return int(match.group(1)), int(match.group(2)), int(match.group(3) or 0)


@cache
def modelled_range(kind: EngineKind) -> ModelledRange:
    """The releases the engine package models (its flag table's ``versions_read``; vLLM from the V0 line).
    Cached: the tables are constants and every pass asks (``EngineVersionModelled``)."""
    if kind is EngineKind.VLLM:
        from .vllm.flags import TABLE
    else:
        from .sglang.flags import TABLE
    oldest, _, newest = TABLE.versions_read.partition("-")
    first, last = _parse(oldest), _parse(newest)
    assert first is not None and last is not None, TABLE.versions_read
    if kind is EngineKind.VLLM:
        return ModelledRange(kind, min(first, V0_OLDEST_MEASURED), last, patches_are_releases=False)
    return ModelledRange(kind, first, last, patches_are_releases=True)


def image_tag(image: str | None) -> str | None:
    """The tag of an image reference (``vllm/vllm-openai:v0.19.0`` -> ``v0.19.0``), None without one (a digest
    only, or no tag)."""
    if not image:
        return None
    name = image.split("@", 1)[0]
    last = name.rsplit("/", 1)[-1]
    return last.split(":", 1)[1] if ":" in last else None


def check_version(spec: InferenceServerSpec) -> VersionCheck:
    """Whether the plan of ``spec`` models the engine release it runs (see the module docstring)."""
    kind = spec.engine.kind
    span = modelled_range(kind)
    default = DEFAULT_ENGINE_VERSION[kind.value]
    written = spec.engine.version
    version = _parse(written)
    if version is None:  # unset (the API's pattern makes a set version parse): the image says what runs
        image = spec.engine.image
        if not image:
            return VersionCheck(VersionCoverage.MODELLED, span, default, default, None)
        tagged = _parse(image_tag(image))
        if tagged is None:
            return VersionCheck(VersionCoverage.UNKNOWN, span, default, default, image)
        if tagged[:2] != default[:2]:
            return VersionCheck(VersionCoverage.NOT_SET, span, default, default, image)
        return VersionCheck(VersionCoverage.MODELLED, span, default, default, image)
    if version < span.first:
        return VersionCheck(VersionCoverage.OLDER, span, version, span.first, written)
    if span.newer(version):
        return VersionCheck(VersionCoverage.NEWER, span, version, span.last, written)
    return VersionCheck(VersionCoverage.MODELLED, span, version, version, written)
