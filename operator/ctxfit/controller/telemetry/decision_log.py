"""One INFO log line per decision per server: planned, started attempt N, failed as KIND, stepped to X (or
retrying, or moved to another GPU product), Ready, Failed. See docs/design/decision-log.md."""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Any, cast

import kopf

from ctxfit.api.status import AttemptOutcome, InferenceServerStatus, Phase

from ..converge.types import Outcome

DECISIONS_LOGGER = "ctxfit.decisions"


@dataclass(frozen=True)
class DecisionLine:
    """One decision: ``verb`` (planned, started, failed, stepped, retrying, moved, ready, gave-up), a sentence,
    facts."""

    verb: str
    message: str
    fields: dict[str, Any] = field(default_factory=dict)


def _attempt_of(deployment: dict[str, Any]) -> int | None:
    annotations = deployment.get("spec", {}).get("template", {}).get("metadata", {}).get("annotations", {})
    value = annotations.get("ctxfit.io/attempt")
    return int(value) if value is not None else None


def decisions(old: InferenceServerStatus, out: Outcome) -> list[DecisionLine]:
    """What this pass decided, in order (see the module docstring). Empty when nothing changed."""
    new = out.status
    found: list[DecisionLine] = []
    if new.plan is not None and (old.plan is None or old.spec_key != new.spec_key):
        plan = new.plan
        if plan.fits:
            found.append(DecisionLine("planned", f"planned context {plan.context_length} on {plan.gpu_product} "
                                  f"(predicted max {plan.max_context_length}, {plan.kv_bytes_per_token} B/token/GPU)",
                                  {"context": plan.context_length, "maxContext": plan.max_context_length}))
        else:
            found.append(DecisionLine("planned", f"does not fit on {plan.gpu_product}: {'; '.join(plan.reasons)}",
                                  {"context": 0, "maxContext": plan.max_context_length}))
    for attempt in out.finished:
        if attempt.outcome is AttemptOutcome.FAILED:
            found.append(DecisionLine("failed", f"attempt {attempt.number} failed as {attempt.failure_kind}: "
                                  f"{attempt.evidence or 'no evidence'}",
                                  {"attempt": attempt.number, "kind": attempt.failure_kind}))
    moved = (old.spec_key == new.spec_key and new.plan is not None and old.node_product is not None
             and new.node_product not in (None, old.node_product))
    if moved and new.plan is not None:
        avoided = ", ".join(sorted(new.excluded_names()))
        found.append(DecisionLine("moved", f"moved from {old.node_product} to {new.node_product} (excluded: "
                                  f"{avoided}); planned context {new.plan.context_length}",
                                  {"product": new.node_product, "context": new.plan.context_length}))
    known = {a.number for a in old.attempts} if old.spec_key == new.spec_key else set()
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
    started = {a.number for a in new.attempts if a.number not in known and a.not_before is None}
    if out.deployment is not None:
        started.add(_attempt_of(out.deployment) or 0)
    for number in sorted(started):
        current = by_number.get(number)
        if current is not None and current.outcome is AttemptOutcome.RUNNING and new.phase is not Phase.FAILED:
            context = current.effective.context_length
            found.append(DecisionLine("started", f"started attempt {number} with context {context}",
                                  {"attempt": number, "context": context}))
    for attempt in out.finished:
        if attempt.outcome is AttemptOutcome.SUCCEEDED:
            found.append(DecisionLine("ready", f"Ready: attempt {attempt.number} serves context "
                                  f"{attempt.effective.context_length}", {"attempt": attempt.number,
                                                                         "context": attempt.effective.context_length}))
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
