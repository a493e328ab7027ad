"""One INFO log line per decision per server: planned, started attempt N, failed as KIND, stepped to X (or
retrying, or moved to another GPU product), Ready, Failed. See docs/design/decision-log.md."""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Any, cast

import kopf

from ctxfit.api.status import Attempt, AttemptOutcome, InferenceServerStatus, Phase

from ..converge.types import Outcome

DECISIONS_LOGGER = "ctxfit.decisions"


@dataclass(frozen=True)
class DecisionLine:
    """One decision: ``verb`` (planned, started, failed, stepped, retrying, moved, ready, ready-held, gave-up), a
    sentence, facts."""

    verb: str
    message: str
    fields: dict[str, Any] = field(default_factory=dict)


def _attempt_of(deployment: dict[str, Any]) -> int | None:
    annotations = deployment.get("spec", {}).get("template", {}).get("metadata", {}).get("annotations", {})
    value = annotations.get("ctxfit.io/attempt")
    return int(value) if value is not None else None


def _planned(old: InferenceServerStatus, new: InferenceServerStatus) -> list[DecisionLine]:
    if new.plan is None or (old.plan is not None and old.spec_key == new.spec_key):
        return []
    plan = new.plan
    if plan.fits:
        return [DecisionLine("planned", f"planned context {plan.context_length} on {plan.gpu_product} "
                             f"(predicted max {plan.max_context_length}, {plan.kv_bytes_per_token} B/token/GPU)",
                             {"context": plan.context_length, "maxContext": plan.max_context_length})]
    return [DecisionLine("planned", f"does not fit on {plan.gpu_product}: {'; '.join(plan.reasons)}",
                         {"context": 0, "maxContext": plan.max_context_length})]


def _next_attempts(new: InferenceServerStatus, known: set[int], moved: bool) -> list[DecisionLine]:
    """Each new attempt after another: the same configuration again (retrying) or what changed (stepped); none
    when the server ``moved`` to another GPU product (its own line says so)."""
    found: list[DecisionLine] = []
    by_number = {a.number: a for a in new.attempts}
    for attempt in new.attempts:
        before = by_number.get(attempt.number - 1)
        if attempt.number in known or before is None or moved:
            continue
        if before.effective == attempt.effective:
            found.append(DecisionLine("retrying", f"retrying the configuration of attempt {before.number} as attempt "
                                      f"{attempt.number}", {"attempt": attempt.number}))
        else:
            changed = {k: v for k, v in attempt.effective.to_wire().items() if before.effective.to_wire().get(k) != v}
            text = ", ".join(f"{k}={v}" for k, v in changed.items())
            found.append(DecisionLine("stepped", f"stepped to {text} (attempt {attempt.number})",
                                      {"attempt": attempt.number, **changed}))
    return found


def _started(new: InferenceServerStatus, out: Outcome, known: set[int]) -> list[DecisionLine]:
    """Attempts started in this pass: recorded without a backoff, or whose workload this pass applies."""
    started = {a.number for a in new.attempts if a.number not in known and a.not_before is None}
    if out.deployment is not None:
        started.add(_attempt_of(out.deployment) or 0)
    by_number = {a.number: a for a in new.attempts}
    found: list[DecisionLine] = []
    for number in sorted(started):
        current = by_number.get(number)
        if current is not None and current.outcome is AttemptOutcome.RUNNING and new.phase is not Phase.FAILED:
            context = current.effective.context_length
            found.append(DecisionLine("started", f"started attempt {number} with context {context}",
                                      {"attempt": number, "context": context}))
    return found


def _moved(old: InferenceServerStatus, new: InferenceServerStatus) -> list[DecisionLine]:
    """The same spec planned again on another GPU product (the one it was on excluded)."""
    moved = (old.spec_key == new.spec_key and new.plan is not None and old.node_product is not None
             and new.node_product not in (None, old.node_product))
    if not moved or new.plan is None:
        return []
    avoided = ", ".join(sorted(new.excluded_names()))
    return [DecisionLine("moved", f"moved from {old.node_product} to {new.node_product} (excluded: {avoided}); "
                         f"planned context {new.plan.context_length}",
                         {"product": new.node_product, "context": new.plan.context_length})]


def _ready(attempt: Attempt, new: InferenceServerStatus) -> DecisionLine:
    """The attempt's engine serves: Ready, or held not Ready (a refused or foreign child): the line says which."""
    context = attempt.effective.context_length
    fields = {"attempt": attempt.number, "context": context}
    if new.phase is Phase.READY:
        return DecisionLine("ready", f"Ready: attempt {attempt.number} serves context {context}", fields)
    return DecisionLine("ready-held", f"attempt {attempt.number} serves context {context}, but the server is "
                        f"{new.phase.value if new.phase else 'not Ready'}: {new.message or 'not Ready'}", fields)


def _released(old: InferenceServerStatus, new: InferenceServerStatus, served: list[Attempt]) -> list[DecisionLine]:
    """Ready reached in a later pass than the one that saw the engine serve (the line then was "ready-held":
    the Service or another child came after, or a refusal cleared): one "Ready" line for the serving attempt."""
    current = new.current_attempt
    if (served or new.phase is not Phase.READY or old.phase is Phase.READY or current is None
            or current.outcome is not AttemptOutcome.SUCCEEDED):
        return []
    return [_ready(current, new)]


def decisions(old: InferenceServerStatus, out: Outcome) -> list[DecisionLine]:
    """What this pass decided, in order (see the module docstring). Empty when nothing changed."""
    new = out.status
    found = _planned(old, new)
    found += [DecisionLine("failed", f"attempt {a.number} failed as {a.failure_kind}: {a.evidence or 'no evidence'}",
                           {"attempt": a.number, "kind": a.failure_kind})
              for a in out.finished if a.outcome is AttemptOutcome.FAILED]
    moved = _moved(old, new)
    found += moved
    known = {a.number for a in old.attempts} if old.spec_key == new.spec_key else set()
    found += _next_attempts(new, known, bool(moved))
    found += _started(new, out, known)
    served = [a for a in out.finished if a.outcome is AttemptOutcome.SUCCEEDED]
    found += [_ready(a, new) for a in served]
    found += _released(old, new, served)
    if new.phase is Phase.FAILED and old.phase is not Phase.FAILED:
        found.append(DecisionLine("gave-up", f"Failed: {new.message or ''}", {}))
    return found


def log_decisions(body: dict[str, Any], found: list[DecisionLine]) -> None:
    """Write each decision as one INFO line on the server's per-object logger (no Event is posted)."""
    if not found:
        return
    target = logging.getLogger(DECISIONS_LOGGER)
    if not target.isEnabledFor(logging.INFO):
        return
    log = kopf.LocalObjectLogger(body=kopf.Body(cast(kopf.RawBody, body)), settings=kopf.OperatorSettings())
    log.logger = target
    for decision in found:
        log.info(decision.message, extra={"decision": decision.verb, "facts": decision.fields})
