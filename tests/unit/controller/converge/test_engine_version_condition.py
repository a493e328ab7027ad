"""Condition ``EngineVersionModelled`` (``converge/engine_version.py``): an engine release outside what ctxfit models
is planned all the same, with the condition False, its coverage as the reason and one Warning Event."""

from __future__ import annotations

from typing import Any

from ctxfit.api.status import ConditionType, Phase, Reason
from ctxfit.controller.converge import converge

from tests.unit.controller.builders import SETTINGS, applied, never, snapshot, spec


def _with_engine(**engine: Any) -> dict[str, Any]:
    body = spec()
    body["engine"] = {k: v for k, v in {**body["engine"], **engine}.items() if v is not None}
    return body


def _warnings(out: Any, reason: Reason) -> list[str]:
    return [e.message for e in out.events if e.type == "Warning" and e.reason is reason]


def test_a_modelled_release_is_true_and_posts_nothing() -> None:
    out = converge(snapshot(spec()), SETTINGS, never)
    cond = out.status.condition(ConditionType.ENGINE_VERSION_MODELLED)
    assert cond is not None and (cond.status, cond.reason) == ("True", Reason.VERSION_MODELLED)
    assert not [e for e in out.events if e.reason is Reason.VERSION_MODELLED]


def test_a_newer_release_is_planned_with_the_condition_false_and_one_warning() -> None:
    body = _with_engine(version="0.40.0")
    out = converge(snapshot(body), SETTINGS, never)
    assert out.status.phase is Phase.STARTING and out.status.plan is not None, "a warning, never a refusal"
    cond = out.status.condition(ConditionType.ENGINE_VERSION_MODELLED)
    assert cond is not None and (cond.status, cond.reason) == ("False", Reason.NEWER_THAN_MODELLED)
    assert "0.40.0" in cond.message and "0.33.0" in cond.message
    assert _warnings(out, Reason.NEWER_THAN_MODELLED) == [cond.message]
    again = converge(snapshot(body, out.status, deployment=applied(out)), SETTINGS, never)
    assert not _warnings(again, Reason.NEWER_THAN_MODELLED), "the Event is posted once, when the condition changes"
    assert again.status.condition(ConditionType.ENGINE_VERSION_MODELLED) == cond


def test_older_unset_and_unknown_releases_have_their_own_reasons() -> None:
    cases = [({"version": "0.4.0"}, Reason.OLDER_THAN_MODELLED),
             ({"version": None, "image": "registry.example.com/vllm:prod"}, Reason.VERSION_UNKNOWN),
             ({"version": None, "image": "vllm/vllm-openai:v0.19.0"}, Reason.VERSION_NOT_SET)]
    for engine, reason in cases:
        body = _with_engine(**engine)
        out = converge(snapshot(body), SETTINGS, never)
        cond = out.status.condition(ConditionType.ENGINE_VERSION_MODELLED)
        assert cond is not None and (cond.status, cond.reason) == ("False", reason), engine
        assert out.status.plan is not None and len(_warnings(out, reason)) == 1, engine
