"""The resolution step (pure): what each pass asks for and says, from what the I/O layer knows (``ResolutionView``).

Resolved models come from the fixture repos (real config.json files, tensors checked against published totals).
"""

from __future__ import annotations

from dataclasses import replace
from datetime import timedelta
from typing import Any

import pytest
from ctxfit.api import InferenceServerSpec
from ctxfit.api.status import ConditionType, InferenceServerStatus
from ctxfit.controller.converge import converge
from ctxfit.controller.converge.resolution import inputs_from_status, need
from ctxfit.controller.converge.types import Outcome, ResolutionView
from ctxfit.vocab.modelsource import ModelSource

from tests.hubfixtures.repos import fixture_entries, fixture_repo
from tests.unit.controller.builders import H100, NOW, SETTINGS, never, snapshot

REPO = "Qwen/Qwen2.5-7B"  # in no catalog


def body(**model: Any) -> dict[str, Any]:
    return {"model": {"name": REPO, **model}, "engine": {"kind": "vllm", "version": "0.19.0"},
            "gpu": {"product": "NVIDIA-H100-80GB-HBM3", "count": 1}, "context": {"target": 8192}}


def source(repo: str = REPO) -> ModelSource:
    f = fixture_repo(repo)
    return ModelSource(f.config, f.checkpoint(), "hub", repo, None, f.sha)


def run(spec_body: dict[str, Any], view: ResolutionView | None = None, status: InferenceServerStatus | None = None,
        **kw: Any) -> Outcome:
    snap = replace(snapshot(spec_body, status, nodes=(H100,), **kw), resolution=view)
    return converge(snap, SETTINGS, never)


def key(spec_body: dict[str, Any], namespace: str = "ns") -> tuple[str, ...]:
    return need(InferenceServerSpec.model_validate(spec_body), namespace).key


def resolved_condition(out: Outcome) -> tuple[str, str, str]:
    cond = out.status.condition(ConditionType.MODEL_RESOLVED)
    assert cond is not None
    return cond.status, cond.reason.value, cond.message


def test_a_model_in_no_catalog_asks_for_a_resolution_and_starts_nothing() -> None:
    out = run(body())
    assert out.resolution_request is not None and out.resolution_request.need.kind == "hub"
    assert resolved_condition(out)[:2] == ("Unknown", "Resolving")
    assert out.status.phase is not None and out.status.phase.value == "Planning"
    assert out.deployment is None and not out.status.attempts and out.status.plan is None
    assert out.requeue_after is not None and out.requeue_after <= SETTINGS.resolve_poll_seconds


def test_resolved_model_is_planned_and_recorded() -> None:
    spec_body = body()
    out = run(spec_body, ResolutionView(key(spec_body), source(), NOW))
    st = out.status
    assert st.plan is not None and st.plan.fits and [a.number for a in st.attempts] == [1]
    assert out.deployment is not None
    assert st.model is not None and st.model.resolved is not None
    r = st.model.resolved
    assert (r.source, r.repo, r.sha) == ("hub", REPO, fixture_repo(REPO).sha)
    assert r.architectures == ["Qwen2ForCausalLM"] and r.architecture is not None
    assert r.architecture.num_layers == 28 and r.architecture.num_kv_heads == 4
    assert r.max_position_embeddings == 131072 and r.quantization == "bf16"
    assert r.checkpoint_bytes == fixture_repo(REPO).checkpoint().checkpoint_bytes
    assert r.weights_per_gpu_bytes == st.plan.per_gpu.weights_bytes
    assert resolved_condition(out)[:2] == ("True", "Resolved")
    assert any("resolved from hub" in reason for reason in st.plan.reasons)


def test_a_planned_server_asks_nothing_again_and_replans_from_status() -> None:
    spec_body = body()
    first = run(spec_body, ResolutionView(key(spec_body), source(), NOW))
    later = run(spec_body, None, first.status, now=NOW + timedelta(seconds=30))
    assert later.resolution_request is None
    assert later.status.plan == first.status.plan
    spec = InferenceServerSpec.model_validate(spec_body)
    assert first.status.model is not None
    again = inputs_from_status(spec, first.status.model.resolved)
    assert again.model.architecture == first.status.model.resolved.architecture  # type: ignore[union-attr]
    assert again.model.weights_per_gpu is not None


def test_hub_unreachable_is_waiting_then_ready_once_it_returns() -> None:
    spec_body = body()
    down = ResolutionView(key(spec_body), error="HubUnreachable", detail="HTTP 503 from the Hub",
                          retry_at=NOW + timedelta(seconds=20))
    out = run(spec_body, down)
    assert resolved_condition(out)[:2] == ("False", "HubUnreachable")
    assert "retrying in 20 s" in resolved_condition(out)[2]
    assert out.status.phase is not None and out.status.phase.value == "Planning"
    assert not out.status.attempts and out.deployment is None and out.resolution_request is None
    assert out.requeue_after == pytest.approx(20)
    assert [e.type for e in out.events] == ["Normal"]  # waiting, not failing
    due = run(spec_body, down, out.status, now=NOW + timedelta(seconds=21))
    assert due.resolution_request is not None  # retry when due
    back = run(spec_body, ResolutionView(key(spec_body), source(), NOW), due.status, now=NOW + timedelta(seconds=30))
    assert back.status.attempts and back.deployment is not None
    assert resolved_condition(back)[:2] == ("True", "Resolved")


@pytest.mark.parametrize("kind", ["ModelAccessDenied", "ModelNotFound", "RevisionNotFound"])
def test_permanent_failures_fail_with_what_to_do(kind: str) -> None:
    spec_body = body()
    out = run(spec_body, ResolutionView(key(spec_body), error=kind, detail="as the Hub says"))
    status, reason, message = resolved_condition(out)
    assert (status, reason) == ("False", kind)
    assert out.status.phase is not None and out.status.phase.value == "Failed"
    assert "spec.model" in message and out.deployment is None and not out.status.attempts
    assert [e.type for e in out.events] == ["Warning"]
    assert out.resolution_request is None
    changed = run(body(revision="v2"), ResolutionView(key(spec_body), error=kind), out.status)
    assert changed.resolution_request is not None and changed.resolution_request.forget_error


def test_a_foreign_resolver_pod_fails_with_what_to_do_and_is_asked_again_later() -> None:
    spec_body = body(tokenSecretRef={"name": "hf", "key": "token"})
    detail = ("Pod kimi-resolve-1 already exists and is not owned by this InferenceServer (it belongs to another "
              "InferenceServer (another uid: an earlier server of this name?))")
    retry = NOW + timedelta(seconds=20)
    out = run(spec_body, ResolutionView(key(spec_body), error="ForeignObject", detail=detail, retry_at=retry))
    status, reason, message = resolved_condition(out)
    assert (status, reason) == ("False", "ForeignObject") and "delete or rename that pod" in message
    assert out.status.phase is not None and out.status.phase.value == "Failed"
    assert out.deployment is None and not out.status.attempts
    assert [(e.type, e.reason.value) for e in out.events] == [("Warning", "ForeignObject")]
    assert out.requeue_after is not None and out.requeue_after <= 20
    due = run(spec_body, ResolutionView(key(spec_body), error="ForeignObject", detail=detail, retry_at=retry),
              out.status, now=retry + timedelta(seconds=1))
    assert due.resolution_request is not None and not [e for e in due.events if e.type == "Warning"]


def test_an_architecture_the_engine_version_does_not_serve_is_refused() -> None:
    spec_body = body()
    spec_body["model"]["name"] = "Qwen/Qwen3-VL-8B-Instruct"
    spec_body["engine"]["version"] = "0.10.0"  # Qwen3-VL arrived in vLLM 0.11.0
    out = run(spec_body, ResolutionView(key(spec_body), source("Qwen/Qwen3-VL-8B-Instruct"), NOW))
    status, reason, message = resolved_condition(out)
    assert (status, reason) == ("False", "UnsupportedArchitecture")
    assert "Qwen3VLForConditionalGeneration" in message and "0.11.0-0.33.0" in message
    assert out.deployment is None


def test_a_moving_branch_is_rechecked_and_a_move_plans_again() -> None:
    spec_body = body()
    first = run(spec_body, ResolutionView(key(spec_body), source(), NOW))
    later = NOW + timedelta(seconds=SETTINGS.model_recheck_seconds + 1)
    due = run(spec_body, None, first.status, now=later)
    assert due.resolution_request is not None and due.resolution_request.recheck
    moved = replace(source(), commit="b" * 40)
    out = run(spec_body, ResolutionView(key(spec_body), moved, later), first.status, now=later)
    assert "RevisionMoved" in [e.reason.value for e in out.events]
    assert out.status.model is not None and out.status.model.resolved is not None
    assert out.status.model.resolved.sha == "b" * 40
    pinned = body(revision=fixture_repo(REPO).sha)
    planned = run(pinned, ResolutionView(key(pinned), source(), NOW))
    assert run(pinned, None, planned.status, now=later).resolution_request is None  # a commit never moves


def test_catalog_and_spec_models_need_no_resolution() -> None:
    catalog = body()
    catalog["model"] = {"name": "meta-llama/Llama-3.1-8B-Instruct", "tokenSecretRef": {"name": "hf"}}
    out = run(catalog)
    assert out.resolution_request is None and out.deployment is not None
    assert out.status.model is not None and out.status.model.resolved is not None
    assert out.status.model.resolved.source == "catalog"
    given = body(architecture={"attention": "gqa", "numLayers": 28, "numKVHeads": 4, "headDim": 128,
                               "maxPositionEmbeddings": 32768}, weightsPerGPU="15Gi")
    out = run(given)
    assert out.resolution_request is None and out.status.model is not None
    assert out.status.model.resolved is not None and out.status.model.resolved.source == "spec"


@pytest.mark.parametrize(("model", "kind"), [
    ({"name": "acme/x"}, "hub"),
    ({"name": "acme/x", "tokenSecretRef": {"name": "hf"}}, "token"),
    ({"name": "/models/acme-x", "cache": {"persistentVolumeClaim": {"claimName": "w"}}}, "volume"),
    ({"name": "acme/x", "cache": {"persistentVolumeClaim": {"claimName": "w", "readOnly": True}}}, "volume"),
    ({"name": "Qwen/Qwen3-8B", "cache": {"persistentVolumeClaim": {"claimName": "w", "readOnly": True}}}, "catalog"),
    ({"name": "Qwen/Qwen3-8B", "revision": "v1"}, "hub"),
])
def test_need(model: dict[str, Any], kind: str) -> None:
    spec_body = body()
    spec_body["model"] = model
    wanted = need(InferenceServerSpec.model_validate(spec_body), "team-a")
    assert wanted.kind == kind
    if kind == "token":  # a token's resolution is shared only by servers of that namespace and Secret
        assert wanted.key[:4] == ("token", "team-a", "hf", "token")


@pytest.mark.parametrize("repo", [r for r in fixture_entries() if r != "deepseek-ai/DeepSeek-V3"])
def test_every_fixture_repo_plans_through_the_operator_step(repo: str) -> None:
    """Every fixture repo, nothing but its name in the spec, resolved -> planned by the operator's pass (8 x H100,
    TP 8; DeepSeek-V3 is left to the library and CLI tests: its 92k-tensor header takes seconds to build)."""
    spec_body = body()
    spec_body["model"] = {"name": repo}
    spec_body["gpu"] = {"product": "NVIDIA-H100-80GB-HBM3", "count": 8}
    spec_body["parallelism"] = {"tensor": 8}
    spec_body["context"] = {"target": 4096, "minimum": 1024}
    wanted = need(InferenceServerSpec.model_validate(spec_body), "ns")
    view = ResolutionView(wanted.key, source(repo), NOW) if wanted.reads else None
    out = run(spec_body, view)
    st = out.status
    assert st.plan is not None, st.message
    assert st.model is not None and st.model.resolved is not None
    assert st.model.resolved.weights_per_gpu_bytes == st.plan.per_gpu.weights_bytes > 0
    if wanted.reads:
        assert st.model.resolved.sha == fixture_repo(repo).sha
