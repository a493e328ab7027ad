"""Recovery: classify why an engine pod died, and choose the next configuration.

Pure: imports neither kopf nor the Kubernetes API client. The operator calls:

- ``classify(Observation(reason, exit_code, message, log_tail, events), engine) -> Failure``
- ``initial_effective(spec) -> EffectiveConfig`` when status has no effective configuration yet, and
  ``observed_effective(current, failure, spec)`` to correct it with what the engine printed;
- ``decide(spec, current, failure, history, replan=..., memory_cap_bytes=...) -> Decision``.
"""

from ctxfit.vocab.kinds import MEMORY_KINDS, Failure, FailureKind

from .classify import Observation, classify
from .current import fallback_effective, initial_effective, observed_effective
from .policy import CheckName, Decision, FailedAttempt, PolicyContext, Replan, changed_knobs, decide

__all__ = [
    "MEMORY_KINDS",
    "CheckName",
    "Decision",
    "FailedAttempt",
    "Failure",
    "FailureKind",
    "Observation",
    "PolicyContext",
    "Replan",
    "changed_knobs",
    "classify",
    "decide",
    "fallback_effective",
    "initial_effective",
    "observed_effective",
]
