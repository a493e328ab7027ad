"""SGLang's runtime rejection above the KV pool ("exceeds the maximum allowed length") is KVCacheTooSmall,
with the pool-bounded maximum as the capacity, and the policy steps to a context the pool holds."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml
from ctxfit.api import EngineKind
from ctxfit.recovery import Observation, classify, decide
from ctxfit.recovery.current import fallback_effective, observed_effective
from ctxfit.vocab.kinds import FailureKind

from tests.unit.recovery.casekit import assert_case, build_spec, observation

CASES: list[dict[str, Any]] = yaml.safe_load(
    (Path(__file__).resolve().parents[2] / "fixtures" / "sglang-context-rejections.yaml").read_text())


@pytest.mark.parametrize("case", CASES, ids=[c["id"] for c in CASES])
def test_rejection_case(case: dict[str, Any]) -> None:
    spec = build_spec(case["server"])
    failure = classify(observation(case), spec.engine.kind)
    current = observed_effective(fallback_effective(spec), failure, spec)
    decision = decide(spec, current, failure)
    assert_case(case, failure, current.to_wire(), decision.permanent,
                decision.next.to_wire() if decision.next else None)


@pytest.mark.parametrize(("line", "maximum"), [
    ("[2026-02-01 10:00:00 TP0] Input length (200,000 tokens) exceeds the maximum allowed length (131071 tokens). "
     "Use a shorter input or enable --allow-auto-truncate.", 131071),
    ("Input length (70000 tokens) exceeds the maximum allowed length (8191 tokens).", 8191),
], ids=["commas-and-prefix", "bare"])
def test_other_numbers_and_prefixes(line: str, maximum: int) -> None:
    failure = classify(Observation(reason="Error", exit_code=1, message=line, events=()), EngineKind.SGLANG)
    assert failure.kind is FailureKind.KV_CACHE_TOO_SMALL
    assert failure.numbers["estimatedMaxContextLength"] == maximum


def test_other_programs_length_messages_do_not_match() -> None:
    text = "ValidationError: Username exceeds the maximum allowed length (24)."
    failure = classify(Observation(reason="Error", exit_code=1, message=text, events=()), EngineKind.SGLANG)
    assert failure.kind is not FailureKind.KV_CACHE_TOO_SMALL
