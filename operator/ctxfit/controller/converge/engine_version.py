"""Condition ``EngineVersionModelled`` (pure): whether the plan models the engine release the server runs.

Maps ``ctxfit.engines.versions.check_version`` to the condition and a Warning Event; never a refusal.
The reasons and the fallback: docs/design/engines.md.
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
