"""``spec.autoscaling`` at admission, on the real local API server: the CRD's CEL rules refuse what the models
refuse (max below min, zero replicas without ``scaleToZero`` and the other way round, an initial ``replicas``
outside the bounds, targets out of range), each with its message, and accept the valid forms. The same rules
as pydantic validators: tests/unit/api/test_autoscaling_api.py.
"""

from __future__ import annotations

from typing import Any

import pytest

from .operator_kit import GROUP, PLURAL, VERSION, ServerClient, base


def scaled(autoscaling: dict[str, Any], **spec: Any) -> dict[str, Any]:
    obj = base("scaled")
    obj["spec"]["autoscaling"] = autoscaling
    obj["spec"].update(spec)
    return obj


REFUSED = {
    "max-below-min": (scaled({"minReplicas": 3, "maxReplicas": 2}), "at least autoscaling.minReplicas"),
    "max-below-default-min": (scaled({"maxReplicas": 0}), "maxReplicas"),
    "zero-without-flag": (scaled({"minReplicas": 0, "maxReplicas": 2}), "needs scaleToZero: true"),
    "flag-without-zero": (scaled({"maxReplicas": 2, "scaleToZero": True}), "scaleToZero: true needs minReplicas: 0"),
    "no-max": (scaled({"minReplicas": 1}), "maxReplicas"),
    "replicas-above-max": (scaled({"maxReplicas": 2}, replicas=3), "initial count"),
    "replicas-below-min": (scaled({"minReplicas": 2, "maxReplicas": 4}, replicas=1), "initial count"),
    "replicas-zero": (scaled({"maxReplicas": 2}, replicas=0), "initial count"),
    "kv-target-one": (scaled({"maxReplicas": 2, "kvCacheUsageTarget": 1}), "kvCacheUsageTarget"),
    "kv-target-zero": (scaled({"maxReplicas": 2, "kvCacheUsageTarget": 0}), "kvCacheUsageTarget"),
    # KEDA would send it to the HPA as averageValue "0.000", which the API server refuses: nothing would scale
    "kv-target-below-keda-precision": (scaled({"maxReplicas": 2, "kvCacheUsageTarget": 0.0004}), "kvCacheUsageTarget"),
    "queue-zero": (scaled({"maxReplicas": 2, "queueTarget": 0}), "queueTarget"),
    "delay-negative": (scaled({"maxReplicas": 2, "scaleDownDelaySeconds": -5}), "scaleDownDelaySeconds"),
}


@pytest.mark.parametrize("case", list(REFUSED), ids=list(REFUSED))
def test_refused_at_admission(api: ServerClient, case: str) -> None:
    obj, expected = REFUSED[case]
    result = api.kubectl_apply(obj)
    assert result.returncode != 0, f"{case} was accepted"
    assert expected in result.stderr, result.stderr
    assert not api.custom.list_namespaced_custom_object(GROUP, VERSION, api.namespace, PLURAL)["items"]


ACCEPTED = {
    "max-only": scaled({"maxReplicas": 4}),
    "everything": scaled({"minReplicas": 2, "maxReplicas": 6, "kvCacheUsageTarget": 0.7, "queueTarget": 4,
                          "scaleDownDelaySeconds": 0}, replicas=3),
    "scale-to-zero": scaled({"minReplicas": 0, "maxReplicas": 2, "scaleToZero": True}),
    "scale-to-zero-start-at-zero": scaled({"minReplicas": 0, "maxReplicas": 2, "scaleToZero": True}, replicas=0),
    "replicas-at-max": scaled({"maxReplicas": 2}, replicas=2),
    "kv-target-smallest": scaled({"maxReplicas": 2, "kvCacheUsageTarget": 0.001}),
}


@pytest.mark.parametrize("case", list(ACCEPTED), ids=list(ACCEPTED))
def test_accepted_and_stored_as_written(api: ServerClient, case: str) -> None:
    obj = ACCEPTED[case]
    result = api.kubectl_apply(obj)
    assert result.returncode == 0, result.stderr
    stored = api.get("scaled")
    assert stored["spec"]["autoscaling"] == obj["spec"]["autoscaling"]  # no defaults written into the spec
