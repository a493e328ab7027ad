"""Condition ``EngineVersionModelled`` (pure): whether the plan models the engine release the server runs.

``ctxfit.engines.versions.check_version`` decides from the spec (``spec.engine.version``, else the image's tag)
as a typed ``VersionCoverage``; this step only maps it: True/``VersionModelled``, or False with the coverage as the
reason (``OlderThanModelled``, ``NewerThanModelled``, ``VersionNotSet``, ``VersionUnknown``) and a Warning Event
when it becomes so. Never a refusal: the server is planned with the rules of the nearest modelled release, which
the message names (``ctxfit plan`` prints the same line as a warning).
"""

from __future__ import annotations

from ctxfit.api import InferenceServerSpec
from ctxfit.api.status import ConditionType, Reason
from ctxfit.engines.versions import check_version

from .status import set_condition
from .types import EventNote, Outcome


def mark_engine_version(out: Outcome, spec: InferenceServerSpec, now: str, generation: int) -> None:
    """Set ``EngineVersionModelled`` for ``spec`` (every pass; an Event only when it changes to False)."""
    check = check_version(spec)
    reason = Reason(check.coverage.value)
    message = check.message()
    if check.ok:
        set_condition(out, ConditionType.ENGINE_VERSION_MODELLED, "True", reason, message, now, generation)
        return
    set_condition(out, ConditionType.ENGINE_VERSION_MODELLED, "False", reason, message, now, generation,
                  EventNote("Warning", reason, message))
