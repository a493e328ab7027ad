"""``spec.autoscaling`` / ``status.autoscaling``: the models' rules, and the same rules as CEL in the CRD."""

from __future__ import annotations

from typing import Any

import pytest
from ctxfit.api import InferenceServerSpec
from ctxfit.api.autoscaling import (
    AUTOSCALING_CEL_RULES,
    MIN_ZERO_MESSAGE,
    REPLICAS_MESSAGE,
    SCALE_TO_ZERO_MESSAGE,
    AutoscalingSpec,
    initial_replicas,
)
from ctxfit.api.crd import build_crd
from ctxfit.api.status import InferenceServerStatus
from pydantic import ValidationError

BASE: dict[str, Any] = {
    "model": {"name": "meta-llama/Llama-3.1-8B-Instruct"},
    "engine": {"kind": "vllm"},
    "gpu": {"count": 1},
}


def spec(**extra: Any) -> InferenceServerSpec:
    return InferenceServerSpec.model_validate({**BASE, **extra})


def test_absent_means_off() -> None:
    assert spec().autoscaling is None


def test_defaults() -> None:
    scaling = spec(autoscaling={"maxReplicas": 4}).autoscaling
    assert scaling is not None
    assert (scaling.min_replicas, scaling.max_replicas, scaling.scale_down_delay_seconds, scaling.scale_to_zero) == \
        (1, 4, 300, False)
    assert scaling.kv_cache_usage_target is None and scaling.queue_target is None


@pytest.mark.parametrize(("autoscaling", "message"), [
    ({}, "maxReplicas"),
    ({"maxReplicas": 0}, "maxReplicas"),
    ({"maxReplicas": 2, "minReplicas": 3}, "below autoscaling.minReplicas"),
    ({"maxReplicas": 2, "minReplicas": 0}, SCALE_TO_ZERO_MESSAGE),
    ({"maxReplicas": 2, "scaleToZero": True}, MIN_ZERO_MESSAGE),
    ({"maxReplicas": 2, "kvCacheUsageTarget": 1.0}, "kvCacheUsageTarget"),
    ({"maxReplicas": 2, "kvCacheUsageTarget": 0.0}, "kvCacheUsageTarget"),
    ({"maxReplicas": 2, "kvCacheUsageTarget": 0.0004}, "kvCacheUsageTarget"),
    ({"maxReplicas": 2, "queueTarget": 0}, "queueTarget"),
    ({"maxReplicas": 2, "scaleDownDelaySeconds": -1}, "scaleDownDelaySeconds"),
    ({"maxReplicas": 2, "bogus": 1}, "bogus"),
], ids=["no-max", "max-0", "max<min", "zero-without-flag", "flag-without-zero", "kv-1", "kv-0",
        "kv-below-keda-precision", "queue-0",
        "delay-negative", "unknown"])
def test_refused(autoscaling: dict[str, Any], message: str) -> None:
    with pytest.raises(ValidationError, match=message.replace("(", r"\(").replace(")", r"\)")):
        spec(autoscaling=autoscaling)


def test_scale_to_zero_accepted() -> None:
    scaling = spec(autoscaling={"maxReplicas": 2, "minReplicas": 0, "scaleToZero": True}).autoscaling
    assert scaling is not None and scaling.min_replicas == 0


@pytest.mark.parametrize(("replicas", "ok"), [(None, True), (2, True), (4, True), (1, False), (5, False)])
def test_explicit_replicas_within_bounds(replicas: int | None, ok: bool) -> None:
    extra: dict[str, Any] = {"autoscaling": {"minReplicas": 2, "maxReplicas": 4}}
    if replicas is not None:
        extra["replicas"] = replicas
    if ok:
        spec(**extra)
    else:
        with pytest.raises(ValidationError, match="initial count"):
            spec(**extra)


@pytest.mark.parametrize(("bounds", "replicas", "expected"), [
    ((1, 4), 1, 1), ((2, 4), 1, 2), ((1, 3), 7, 3), ((0, 3), 1, 1), ((0, 3), 0, 0),
])
def test_initial_replicas(bounds: tuple[int, int], replicas: int, expected: int) -> None:
    low, high = bounds
    scaling = AutoscalingSpec(min_replicas=low, max_replicas=high, scale_to_zero=low == 0)
    assert initial_replicas(scaling, replicas) == expected


def _spec_schema() -> dict[str, Any]:
    schema: dict[str, Any] = build_crd()["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]
    return schema


def test_cel_rules_in_the_crd() -> None:
    spec_schema = _spec_schema()
    node = spec_schema["properties"]["autoscaling"]
    assert node["x-kubernetes-validations"] == AUTOSCALING_CEL_RULES["AutoscalingSpec"]
    assert node["required"] == ["maxReplicas"]
    assert REPLICAS_MESSAGE in [r["message"] for r in spec_schema["x-kubernetes-validations"]]
    assert node["properties"]["kvCacheUsageTarget"]["exclusiveMinimum"] is True
    assert node["properties"]["kvCacheUsageTarget"]["exclusiveMaximum"] is True


def test_status_round_trip() -> None:
    wire = {"replicas": 2, "autoscaling": {"currentReplicas": 2, "desiredReplicas": 3, "kvCacheUsageThreshold": 0.78,
                                           "kvCacheTokensThreshold": 154000, "queueThreshold": 4,
                                           "scaledObject": "s", "paused": False, "capacitySource": "observed"}}
    status = InferenceServerStatus.from_body(wire)
    assert status.autoscaling is not None and status.autoscaling.desired_replicas == 3
    assert status.to_wire() == {**wire, "attempts": [], "conditions": []}
