"""Bad input from the model itself in the operator: each broken repo of the Hub stand-in (tests/hubfixtures/broken.py)
is resolved by the operator's own resolution (the real huggingface_hub client), and the pass after it ends in a
condition and one Warning Event naming the repo, with nothing started; none of it is waiting (no retry loop), and
none of it raises out of the pass."""

from __future__ import annotations

import time
from dataclasses import replace
from typing import Any

import pytest
from ctxfit.api import InferenceServerSpec
from ctxfit.api.status import ConditionType
from ctxfit.controller.converge import converge
from ctxfit.controller.converge import plan as converge_plan
from ctxfit.controller.converge.resolution import need
from ctxfit.controller.converge.types import ResolutionRequest, ResolutionView
from ctxfit.controller.kube.resolution import Resolutions
from ctxfit.controller.settings import Settings

from tests.hubfixtures.broken import CASES, Broken, broken_repos
from tests.hubfixtures.repos import fixture_repo
from tests.hubfixtures.server import HubStandIn, hub_env
from tests.unit.controller.builders import H100, SETTINGS, never, snapshot

RES_SETTINGS = Settings(metrics_port=0, health_port=0, resolve_backoff_seconds=5, resolver_image="ctxfit:test")
BODY = {"metadata": {"namespace": "ns", "name": "kimi", "uid": "uid-1"}}


@pytest.fixture(scope="module")
def views(tmp_path_factory: pytest.TempPathFactory) -> dict[str, ResolutionView]:
    """repo -> what the operator's resolution knows once it ended, for every broken repo."""
    stand_in = HubStandIn(extra=broken_repos()).start()
    mp = pytest.MonkeyPatch()
    for key, value in hub_env(str(tmp_path_factory.mktemp("hub"))).items():
        mp.setenv(key, value)
    mp.setenv("HF_ENDPOINT", stand_in.url)
    res = Resolutions(None, RES_SETTINGS, lambda key: None)
    out: dict[str, ResolutionView] = {}
    try:
        for case in CASES:
            body = spec(case.repo)
            res.request(("ns", "kimi"), ResolutionRequest(need(InferenceServerSpec.model_validate(body), "ns")), BODY)
        deadline = time.monotonic() + 120
        while len(out) < len(CASES):
            assert time.monotonic() < deadline, f"resolved only {sorted(out)}"
            for case in CASES:
                view = res.view(("ns", "kimi"), spec(case.repo))
                if view is not None and not view.in_flight and (view.source or view.error):
                    out[case.repo] = view
            time.sleep(0.05)
    finally:
        res.close()
        stand_in.stop()
        mp.undo()
    return out


def spec(repo: str) -> dict[str, Any]:
    return {"model": {"name": repo}, "engine": {"kind": "vllm", "version": "0.19.0"},
            "gpu": {"product": "NVIDIA-H100-80GB-HBM3", "count": 1}, "context": {"target": 8192}}


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.repo.split("/")[1])
def test_each_broken_repo_ends_in_a_condition_and_one_event(case: Broken, views: dict[str, ResolutionView]) -> None:
    view = views[case.repo]
    if case.kind is not None and case.kind != "UnsupportedArchitecture":
        assert view.error == case.kind and view.source is None, (view.error, view.detail)
        assert view.retry_at is None  # permanent until the spec changes: not a Hub that is down
    out = converge(replace(snapshot(spec(case.repo), nodes=(H100,)), resolution=view), SETTINGS, never)
    st = out.status
    assert st.phase is not None and st.phase.value == "Failed"
    assert out.deployment is None and not st.attempts
    warnings = [e for e in out.events if e.type == "Warning"]
    assert len(warnings) == 1, out.events
    if case.kind is not None:
        cond = st.condition(ConditionType.MODEL_RESOLVED)
        assert cond is not None and (cond.status, cond.reason.value) == ("False", case.kind)
        assert warnings[0].reason.value == case.kind
    else:  # config.json reads, the planner refuses it: BudgetFits False / InvalidSpec naming the field
        cond = st.condition(ConditionType.BUDGET_FITS)
        assert cond is not None and (cond.status, cond.reason.value) == ("False", "InvalidSpec")
    assert case.repo in cond.message and (case.field or "") in cond.message
    assert warnings[0].message == cond.message
    again = converge(replace(snapshot(spec(case.repo), st, nodes=(H100,)), resolution=view), SETTINGS, never)
    assert not [e for e in again.events if e.type == "Warning"]  # the next pass says nothing new
    assert again.resolution_request is None


def test_an_unexpected_exception_of_the_planner_is_the_servers_failure(monkeypatch: pytest.MonkeyPatch) -> None:
    """The last line of defence: whatever class a model's files make the planner raise, the pass ends in a
    condition and an Event, never an exception out of the handler."""
    f = fixture_repo("Qwen/Qwen2.5-7B")
    from ctxfit.vocab.modelsource import ModelSource

    source = ModelSource(f.config, f.checkpoint(), "hub", "Qwen/Qwen2.5-7B", None, f.sha)
    body = spec("Qwen/Qwen2.5-7B")
    view = ResolutionView(need(InferenceServerSpec.model_validate(body), "ns").key, source)

    def boom(*_: Any, **__: Any) -> Any:
        raise TypeError("unsupported operand type(s) for //: 'str' and 'int'")

    monkeypatch.setattr(converge_plan, "plan_for", boom)
    out = converge(replace(snapshot(body, nodes=(H100,)), resolution=view), SETTINGS, never)
    cond = out.status.condition(ConditionType.BUDGET_FITS)
    assert cond is not None and cond.reason.value == "InvalidSpec" and "TypeError" in cond.message
    assert [e.reason.value for e in out.events if e.type == "Warning"] == ["InvalidSpec"]
    assert out.deployment is None
