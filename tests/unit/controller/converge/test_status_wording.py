"""Status wording rules: reason and message agree, phase names what happens, inapplicable fields are omitted,
the near-maximum warning only for memory-bound maxima."""

from __future__ import annotations

import dataclasses
import re
from datetime import timedelta
from typing import Any

import pytest
from ctxfit.api import InferenceServerSpec
from ctxfit.api.effective import EffectiveConfig
from ctxfit.api.status import ConditionType, InferenceServerStatus, Phase, Reason
from ctxfit.budget.context import choose_context
from ctxfit.budget.planner import plan
from ctxfit.controller.converge import converge
from ctxfit.controller.converge.wording import budget_condition, failure_phase
from ctxfit.recovery import Failure, FailureKind

from tests.unit.controller.builders import NOW, SETTINGS, applied, diagnosed, never, pod, snapshot, spec

NEAR_MAX = "the engine may find less"


def _spec(body: dict[str, Any]) -> InferenceServerSpec:
    return InferenceServerSpec.model_validate(body)


def _llama(**context: Any) -> dict[str, Any]:
    return {"model": {"name": "meta-llama/Llama-3.1-8B-Instruct"}, "engine": {"kind": "vllm", "version": "0.19.0"},
            "gpu": {"count": 1, "product": "NVIDIA-H100-80GB-HBM3"}, "context": context}


def _kimi(**context: Any) -> dict[str, Any]:
    return spec(**context)


def _plan(body: dict[str, Any]) -> Any:
    """Plan on the body's GPU product, else on the RTX PRO 6000 node the Kimi manifests target."""
    if "product" in body["gpu"]:
        return plan(_spec(body))
    return plan(_spec(body), node_product="NVIDIA-RTX-PRO-6000-Blackwell-Server-Edition", node_gpu_memory_mib=97887)


CASES = {
    "target-fits": (_kimi(target=131072), "True", Reason.FITS),
    "below-target": (_kimi(target=262144), "True", Reason.FITS_BELOW_TARGET),
    "position-capped": (_llama(), "True", Reason.FITS),
    "above-model-max": (_llama(target=500000), "True", Reason.FITS_BELOW_TARGET),
    "nothing-fits": (_kimi(target=262144, minimum=262144), "False", Reason.DOES_NOT_FIT),
}


@pytest.mark.parametrize(("body", "status", "reason"), CASES.values(), ids=CASES.keys())
def test_budget_condition_reason_agrees_with_message(body: dict[str, Any], status: str, reason: Reason) -> None:
    result = _plan(body)
    got_status, got_reason, message = budget_condition(result, _spec(body), 0.25)
    assert (got_status, got_reason) == (status, reason), message
    if got_status == "True":
        assert "does not fit" not in message and "below context.minimum" not in message
        assert message.startswith(f"context {result.context_length} fits")
    else:
        assert "does not fit" in message or "below" in message
    if got_reason is Reason.FITS_BELOW_TARGET:
        assert "below the target" in message


@pytest.mark.parametrize(("target", "fit", "minimum"), [(131072, 200000, 4096), (262144, 201152, 4096),
                                                        (262144, 3000, 4096), (2048, 4096, 4096)],
                         ids=["fits", "steps", "nothing", "below-minimum"])
def test_a_fits_condition_drops_the_choice_sentence_in_every_wording_of_choose_context(
        target: int, fit: int, minimum: int) -> None:
    """The sentence dropped is the plan's own ``choice`` (typed), whatever choose_context wrote; the others stay."""
    choice = choose_context(target=target, fit=fit, headroom=0.25, minimum=minimum, model_max=None)
    body = _kimi(target=131072)
    planned = _plan(body)
    assert planned.choice is not None and planned.choice.reason in planned.reasons, "the plan carries its choice"
    result = dataclasses.replace(planned, choice=choice, reasons=[choice.reason, "another planner note"])
    _, _, message = budget_condition(result, _spec(body), 0.25)
    assert choice.reason not in message and message.endswith("; another planner note")


def test_converge_never_writes_fits_with_a_does_not_fit_message() -> None:
    out = converge(snapshot(spec(target=262144)), SETTINGS, never)
    fits = out.status.condition(ConditionType.BUDGET_FITS)
    assert fits is not None and fits.status == "True" and fits.reason is Reason.FITS_BELOW_TARGET
    assert "does not fit" not in fits.message and "below the target 262144" in fits.message


def _effective(**update: Any) -> EffectiveConfig:
    base = EffectiveConfig(context_length=131072, gpu_memory_utilization=0.95, max_num_seqs=256,
                           cuda_graph_max_batch_size=512, memory_limit_bytes=1 << 40, shm_bytes=1 << 34,
                           startup_timeout_seconds=1800)
    return base.model_copy(update=update)


@pytest.mark.parametrize(("update", "phase", "reason"), [
    ({}, Phase.RETRYING, Reason.RETRYING),
    ({"context_length": 65536}, Phase.STEPPING_DOWN, Reason.STEPPING_DOWN),
    ({"cuda_graph_max_batch_size": 256}, Phase.STEPPING_DOWN, Reason.STEPPING_DOWN),
], ids=["same", "context", "graphs"])
def test_failure_phase_names_retry_or_step_down(update: dict[str, Any], phase: Phase, reason: Reason) -> None:
    assert failure_phase(_effective(), _effective(**update)) == (phase, reason)


def test_unrecognised_failure_retries_the_same_configuration_in_phase_retrying() -> None:
    body = spec()
    start = converge(snapshot(body), SETTINGS, never)
    unknown = Failure(FailureKind.UNKNOWN, {}, "segfault in the tokenizer")
    out = converge(snapshot(body, start.status, pods=(pod(1, terminated="Error"),), deployment=applied(start),
                            now=NOW + timedelta(seconds=30)), SETTINGS, diagnosed(unknown))
    first, second = out.status.attempts
    assert first.effective == second.effective
    assert out.status.phase is Phase.RETRYING
    ready = out.status.condition(ConditionType.READY)
    assert ready is not None and ready.reason is Reason.RETRYING


def _nulls(node: Any, path: str = "") -> list[str]:
    if node is None:
        return [path]
    if isinstance(node, dict):
        return [p for k, v in node.items() for p in _nulls(v, f"{path}.{k}")]
    if isinstance(node, list):
        return [p for i, v in enumerate(node) for p in _nulls(v, f"{path}[{i}]")]
    return []


def test_vllm_status_omits_sglang_fields_and_writes_no_nulls() -> None:
    start = converge(snapshot(spec(target=262144)), SETTINGS, never)
    wire = start.status.to_wire()
    assert not _nulls(wire), "kubectl describe shows a null as <nil>"
    assert "memFractionStatic" not in wire["effective"]  # type: ignore[operator]
    assert all("memFractionStatic" not in a["effective"] for a in wire["attempts"])  # type: ignore[union-attr]
    assert InferenceServerStatus.from_body(wire).to_wire() == wire


def test_sglang_status_omits_vllm_fields() -> None:
    out = converge(snapshot(spec("dsv4-flash-512k.yaml")), SETTINGS, never)
    wire = out.status.to_wire()
    assert not _nulls(wire)
    assert "gpuMemoryUtilization" not in wire["effective"]  # type: ignore[operator]


def test_near_maximum_warning_only_when_memory_bounds_the_maximum() -> None:
    capped = plan(_spec(_llama()))
    assert capped.context_length == capped.max_context_length == 131072
    assert not [r for r in capped.reasons if NEAR_MAX in r], "the model's position limit is not a memory limit"
    roomy = _plan(_kimi(target=262144))
    near = (roomy.max_context_length // 1024) * 1024
    tight = _plan(_kimi(target=near))
    assert tight.context_length == near
    assert [r for r in tight.reasons if NEAR_MAX in r]


@pytest.mark.parametrize("name", ["kimi-128k.yaml", "glm5-200k.yaml", "dsv4-flash-512k.yaml"])
@pytest.mark.parametrize("target", [4096, 32768, 131072, 200000, 262144, 524288, 1048576])
def test_budget_fits_never_contradicts_itself(name: str, target: int) -> None:
    body = spec(name, target=target)
    body["context"]["minimum"] = min(body["context"].get("minimum") or 4096, target)
    out = converge(snapshot(body), SETTINGS, never)
    fits = out.status.condition(ConditionType.BUDGET_FITS)
    assert fits is not None and fits.message
    if fits.status == "True":
        assert fits.reason in (Reason.FITS, Reason.FITS_BELOW_TARGET)
        assert "does not fit" not in fits.message and "is not enough" not in fits.message
        assert out.status.context_length is not None
        assert (fits.reason is Reason.FITS) == (out.status.context_length >= target)
        assert fits.message.startswith(f"context {out.status.context_length} fits")
    else:
        assert fits.reason in (Reason.DOES_NOT_FIT, Reason.INVALID_SPEC)
        assert out.status.phase is Phase.FAILED


CHOSE = re.compile(r"context (\d+) does not fit \(predicted max (\d+) tokens\); chose (\d+)")
BELOW = re.compile(r"context (\d+) fits, below the target (\d+) \(predicted max (\d+) tokens")


@pytest.mark.parametrize("target", [None, 262144], ids=["no-target", "target"])
def test_budget_condition_and_planned_event_state_the_same_target_and_context(target: int | None) -> None:
    """Reviewer finding (6): without context.target the condition called the predicted maximum "the target"
    while the Planned Event (the planner's choice) named the model's maximum; both now name the same numbers."""
    body = spec(target=target)
    if target is None:
        del body["context"]["target"]
    out = converge(snapshot(body), SETTINGS, never)
    fits = out.status.condition(ConditionType.BUDGET_FITS)
    assert fits is not None and fits.reason is Reason.FITS_BELOW_TARGET, fits
    planned = [e.message for e in out.events if e.reason is Reason.PLANNED]
    assert len(planned) == 1
    event, condition = CHOSE.search(planned[0]), BELOW.search(fits.message)
    assert event is not None and condition is not None, (planned[0], fits.message)
    wanted, predicted, chosen = (int(g) for g in event.groups())
    assert wanted == 262144, "Kimi-K2.5's maximum context, the target the planner used"
    assert (int(condition[1]), int(condition[2]), int(condition[3])) == (chosen, wanted, predicted)
    assert planned[0].startswith(f"planned context {chosen} ")
    assert predicted < wanted and f"below the target {predicted}" not in fits.message


def test_a_target_above_the_model_maximum_is_below_target_without_a_headroom_claim() -> None:
    body = _llama(target=500000)
    _, reason, message = budget_condition(_plan(body), _spec(body), 0.25)
    assert reason is Reason.FITS_BELOW_TARGET
    assert "below the target 500000" in message and "the model's maximum context is 131072" in message
    assert "kept free" not in message
