"""In the operator: a Hub draft (``spec.speculative.draft`` in no catalog, without architecture and
weightsPerGPU) is resolved like the model before the first plan (the same waiting and failing states), recorded in
``status.model.draft``, and a re-plan reads it back without a Hub request."""

from __future__ import annotations

from dataclasses import replace
from datetime import timedelta
from typing import Any

from ctxfit.api import InferenceServerSpec
from ctxfit.api.status import ConditionType
from ctxfit.budget.planner import plan
from ctxfit.controller.converge import converge
from ctxfit.controller.converge.resolution import adapter_needs, draft_need, inputs_from_status, need
from ctxfit.controller.converge.types import Outcome, ResolutionView
from ctxfit.controller.views.cache import StorageView
from ctxfit.vocab.modelsource import ModelSource

from tests.hubfixtures.repos import fixture_repo
from tests.unit.controller.builders import H100, NOW, SETTINGS, never, snapshot

TARGET = "meta-llama/Llama-3.1-8B"  # in the catalog: needs no resolution
DRAFT = "meta-llama/Llama-3.2-3B"  # in no catalog


def body(target: str = TARGET, **draft: Any) -> dict[str, Any]:
    return {"model": {"name": target}, "engine": {"kind": "vllm", "version": "0.19.0"},
            "gpu": {"product": "NVIDIA-H100-80GB-HBM3", "count": 1}, "context": {"target": 8192},
            "speculative": {"method": "draft", "draft": {"name": DRAFT, **draft}, "numSpeculativeTokens": 4}}


def source(repo: str) -> ModelSource:
    f = fixture_repo(repo)
    return ModelSource(f.config, f.checkpoint(), "hub", repo, None, f.sha)


def draft_key(spec_body: dict[str, Any]) -> tuple[str, ...]:
    wanted = draft_need(InferenceServerSpec.model_validate(spec_body), "team-a")
    assert wanted is not None
    return wanted.key


def run(spec_body: dict[str, Any], draft: ResolutionView | None = None, model: ResolutionView | None = None,
        **kw: Any) -> Outcome:
    snap = replace(snapshot(spec_body, kw.pop("status", None), nodes=(H100,), **kw), resolution=model,
                   draft_resolution=draft)
    return converge(snap, SETTINGS, never)


def condition(out: Outcome) -> tuple[str, str, str]:
    cond = out.status.condition(ConditionType.MODEL_RESOLVED)
    assert cond is not None
    return cond.status, cond.reason.value, cond.message


def draft_weights(out: Outcome) -> int:
    assert out.status.plan is not None
    return next(e.bytes for e in out.status.plan.per_gpu.extras if e.term == "draft weights")


def test_a_hub_draft_is_resolved_before_the_first_plan() -> None:
    spec_body = body()
    out = run(spec_body)
    assert out.draft_resolution_request is not None and out.draft_resolution_request.need.repo == DRAFT
    assert out.resolution_request is None, "the catalog target needs nothing"
    status, reason, message = condition(out)
    assert (status, reason) == ("Unknown", "Resolving") and f"draft {DRAFT}" in message
    assert out.status.phase is not None and out.status.phase.value == "Planning"
    assert out.deployment is None and not out.status.attempts


def test_the_resolved_draft_is_planned_recorded_and_read_back_on_a_replan() -> None:
    spec_body = body()
    out = run(spec_body, ResolutionView(draft_key(spec_body), source(DRAFT), NOW))
    st = out.status
    assert st.plan is not None and st.plan.fits and out.deployment is not None
    weights = draft_weights(out)
    on_disk = fixture_repo(DRAFT).checkpoint().checkpoint_bytes
    assert abs(weights - on_disk) < 0.05 * on_disk, "TP 1: the draft's bf16 checkpoint, from its safetensors headers"
    assert st.model is not None and st.model.draft is not None
    d = st.model.draft
    assert (d.source, d.repo, d.sha) == ("hub", DRAFT, fixture_repo(DRAFT).sha)
    assert d.architecture is not None and d.architecture.num_layers == 28
    assert d.weights_per_gpu_bytes == weights
    assert condition(out)[:2] == ("True", "Resolved") and "draft" in condition(out)[2]
    later = run(spec_body, None, status=st, now=NOW + timedelta(seconds=30))
    assert later.draft_resolution_request is None and later.status.plan == st.plan
    spec = InferenceServerSpec.model_validate(spec_body)
    again = inputs_from_status(spec, st.model.resolved, st.model.draft)
    assert again.speculative is not None and again.speculative.draft is not None
    assert again.speculative.draft.architecture == d.architecture
    replanned = plan(again, node_product="NVIDIA-H100-80GB-HBM3")
    assert next(e.bytes for e in replanned.per_gpu.extras if e.label == "draft weights") == weights


def test_without_resolution_the_operator_could_not_plan_the_draft() -> None:
    """What the step prevents: planning the spec as it stands refuses the draft (no weights to read)."""
    out = run(body(), ResolutionView(draft_key(body()), error="ModelNotFound", detail="no such repo"))
    status, reason, message = condition(out)
    assert (status, reason) == ("False", "ModelNotFound")
    assert f"draft {DRAFT}" in message and "spec.speculative.draft" in message
    assert out.status.phase is not None and out.status.phase.value == "Failed" and out.deployment is None
    assert out.draft_resolution_request is None
    changed = run(body(revision="v2"), ResolutionView(draft_key(body()), error="ModelNotFound"), status=out.status)
    assert changed.draft_resolution_request is not None and changed.draft_resolution_request.forget_error


def test_an_unreachable_hub_waits_for_the_draft() -> None:
    spec_body = body()
    down = ResolutionView(draft_key(spec_body), error="HubUnreachable", detail="HTTP 503 from the Hub",
                          retry_at=NOW + timedelta(seconds=20))
    out = run(spec_body, down)
    assert condition(out)[:2] == ("False", "HubUnreachable") and "draft" in condition(out)[2]
    assert out.status.phase is not None and out.status.phase.value == "Planning"
    assert not out.status.attempts and out.deployment is None and [e.type for e in out.events] == ["Normal"]
    due = run(spec_body, down, status=out.status, now=NOW + timedelta(seconds=21))
    assert due.draft_resolution_request is not None


def test_a_hub_target_and_a_hub_draft_resolve_in_turn() -> None:
    spec_body = body("Qwen/Qwen2.5-7B")
    spec_body["speculative"]["draft"]["name"] = "Qwen/Qwen2.5-3B"
    model_key = need(InferenceServerSpec.model_validate(spec_body), "ns").key
    first = run(spec_body)
    assert first.resolution_request is not None and first.draft_resolution_request is None
    model = ResolutionView(model_key, source("Qwen/Qwen2.5-7B"), NOW)
    second = run(spec_body, None, model)
    assert second.draft_resolution_request is not None and second.deployment is None
    both = run(spec_body, ResolutionView(draft_key(spec_body), source("Qwen/Qwen2.5-3B"), NOW), model)
    assert both.status.plan is not None and both.deployment is not None
    assert both.status.model is not None and both.status.model.draft is not None
    assert both.status.model.draft.repo == "Qwen/Qwen2.5-3B"


def test_drafts_that_need_no_resolution() -> None:
    described = body(architecture={"attention": "gqa", "numLayers": 28, "numKVHeads": 8, "headDim": 128,
                                   "maxPositionEmbeddings": 131072}, weightsPerGPU="6Gi")
    assert draft_need(InferenceServerSpec.model_validate(described), "team-a") is None
    local = body()
    local["speculative"]["draft"]["name"] = "/models/draft"
    assert draft_need(InferenceServerSpec.model_validate(local), "team-a") is None
    catalog = body()
    catalog["speculative"]["draft"]["name"] = "meta-llama/Llama-3.1-8B-Instruct"
    assert draft_need(InferenceServerSpec.model_validate(catalog), "team-a") is None
    out = run(catalog)
    assert out.draft_resolution_request is None and out.status.model is not None and out.status.model.draft is None


# --- Hub LoRA adapters without a rank: adapter_config.json through the same step

ADAPTER = {"peft_type": "LORA", "r": 32, "lora_alpha": 64, "base_model_name_or_path": "meta-llama/Llama-3.1-8B",
           "target_modules": ["q_proj", "k_proj", "v_proj", "o_proj"], "task_type": "CAUSAL_LM"}
"""A PEFT adapter_config.json (the fields PEFT's LoraConfig writes)."""


def lora_body(engine: str = "sglang", version: str = "0.5.23") -> dict[str, Any]:
    return {"model": {"name": TARGET}, "engine": {"kind": engine, "version": version},
            "gpu": {"product": "NVIDIA-H100-80GB-HBM3", "count": 1}, "context": {"target": 8192},
            "lora": {"adapters": [{"name": "sql", "source": "acme/llama31-sql-lora"}], "maxLoras": 2}}


def adapter_view(spec_body: dict[str, Any], config: dict[str, Any] | None = None, **kw: Any) -> ResolutionView:
    ((_, wanted),) = adapter_needs(InferenceServerSpec.model_validate(spec_body), "team-a")
    if config is None:
        return ResolutionView(wanted.key, **kw)
    return ResolutionView(wanted.key, ModelSource(config, None, "hub", "acme/llama31-sql-lora", None, "d" * 40), NOW)


def run_lora(spec_body: dict[str, Any], views: tuple[ResolutionView, ...] = (), **kw: Any) -> Outcome:
    snap = replace(snapshot(spec_body, kw.pop("status", None), nodes=(H100,), **kw), adapter_resolutions=views)
    return converge(snap, SETTINGS, never)


def test_an_adapter_without_a_rank_waits_for_its_adapter_config() -> None:
    out = run_lora(lora_body())
    assert [r.need.key[0] for r in out.adapter_resolution_requests] == ["adapter"]
    status, reason, message = condition(out)
    assert (status, reason) == ("Unknown", "Resolving")
    assert "adapter sql" in message and "adapter_config.json" in message
    assert out.deployment is None and not out.status.attempts


def test_the_adapters_rank_and_modules_size_the_buffers_and_come_back_on_a_replan() -> None:
    spec_body = lora_body()
    out = run_lora(spec_body, (adapter_view(spec_body, ADAPTER),))
    st = out.status
    assert st.plan is not None and out.deployment is not None and st.effective is not None
    assert st.effective.max_lora_rank == 32
    buffers = next(e.bytes for e in st.plan.per_gpu.extras if e.term == "LoRA buffers")
    h, q, kv = 4096, 4096, 1024  # SGLang: buffers for the adapter's modules only (qkv_proj, o_proj), 32 layers
    assert buffers == 2 * 32 * 2 * ((3 * h + q + 2 * kv) + (q + h)) * 32
    assert st.model is not None and st.model.adapters is not None
    (read,) = st.model.adapters
    assert (read.name, read.rank, read.target_modules, read.sha) == ("sql", 32, ADAPTER["target_modules"], "d" * 40)
    again = inputs_from_status(InferenceServerSpec.model_validate(spec_body), st.model.resolved, None,
                               st.model.adapters)
    assert again.lora is not None and again.lora.adapters[0].rank == 32
    replanned = plan(again, node_product="NVIDIA-H100-80GB-HBM3")
    assert next(e.bytes for e in replanned.per_gpu.extras if e.label == "LoRA buffers") == buffers


def test_an_adapter_for_another_base_or_missing_is_refused_by_name() -> None:
    spec_body = lora_body()
    mistral = ADAPTER | {"base_model_name_or_path": "mistralai/Mistral-7B-v0.1"}
    other = run_lora(spec_body, (adapter_view(spec_body, mistral),))
    assert other.status.phase is not None and other.status.phase.value == "Failed" and other.deployment is None
    assert "sql" in (other.status.message or "") and "Mistral" in (other.status.message or "")
    missing = run_lora(spec_body, (adapter_view(spec_body, error="ModelNotFound", detail="no such repo"),))
    status, reason, message = condition(missing)
    assert (status, reason) == ("False", "ModelNotFound") and "adapter sql" in message and "spec.lora" in message


def test_the_cache_step_keeps_what_resolution_recorded() -> None:
    """With a StorageClass the cache step rewrites status.model (cache mode, claim): the draft and the adapters read
    stay (they are what re-plans use)."""
    spec_body = body()
    spec_body["lora"] = {"adapters": [{"name": "sql", "source": "acme/llama31-sql-lora"}], "maxLoras": 2}
    storage = StorageView("standard", {"standard": False})
    snap = replace(snapshot(spec_body, None, nodes=(H100,)), storage=storage,
                   draft_resolution=ResolutionView(draft_key(spec_body), source(DRAFT), NOW),
                   adapter_resolutions=(adapter_view(spec_body, ADAPTER),))
    out = converge(snap, SETTINGS, never)
    model = out.status.model
    assert out.deployment is not None and model is not None and model.cache is not None
    assert model.draft is not None and model.draft.repo == DRAFT
    assert model.adapters is not None and [a.rank for a in model.adapters] == [32]


def test_a_draft_method_without_a_draft_is_a_clean_spec_error() -> None:
    spec_body = body()
    del spec_body["speculative"]["draft"]
    out = run(spec_body)
    assert out.status.phase is not None and out.status.phase.value == "Failed" and out.deployment is None
    message = out.status.message or ""
    assert message.startswith("spec.speculative") and "Value error" not in message, message


def test_a_gated_draft_of_a_server_with_a_token_is_read_with_that_token() -> None:
    """``model.tokenSecretRef`` covers the draft too (the download container already gets it): the draft step asks
    for a resolver pod with that Secret, keyed by namespace and Secret, and plans from its result."""
    spec_body = body()
    spec_body["model"]["tokenSecretRef"] = {"name": "hf", "key": "token"}
    out = run(spec_body)
    request = out.draft_resolution_request
    assert request is not None and request.need.kind == "token" and request.need.secret == ("hf", "token")
    assert request.need.key == ("token", "ns", "hf", "token", DRAFT, "main")
    status, reason, message = condition(out)
    assert (status, reason) == ("Unknown", "Resolving") and "resolver pod" in message and "token Secret" in message
    done = run(spec_body, ResolutionView(request.need.key, source(DRAFT), NOW))
    assert done.status.plan is not None and done.status.plan.fits and done.deployment is not None
    assert done.status.model is not None and done.status.model.draft is not None
    assert done.status.model.draft.repo == DRAFT


def test_a_gated_adapter_of_a_server_with_a_token_is_read_with_that_token() -> None:
    spec_body = lora_body()
    spec_body["model"]["tokenSecretRef"] = {"name": "hf", "key": "token"}
    out = run_lora(spec_body)
    (request,) = out.adapter_resolution_requests
    assert request.need.kind == "token" and request.need.secret == ("hf", "token")
    assert request.need.key == ("adapter-token", "ns", "hf", "token", "acme/llama31-sql-lora", "main")
    status, reason, message = condition(out)
    assert (status, reason) == ("Unknown", "Resolving") and "adapter_config.json" in message
    assert "resolver pod" in message and "token Secret" in message
    view = ResolutionView(request.need.key, ModelSource(ADAPTER, None, "hub", "acme/llama31-sql-lora", None,
                                                        "d" * 40), NOW)
    done = run_lora(spec_body, (view,))
    assert done.status.effective is not None and done.status.effective.max_lora_rank == 32


def test_a_denied_draft_says_which_token_to_set() -> None:
    """Without a token a gated draft is refused by the Hub: the message names the draft and spec.model.tokenSecretRef;
    with one, that the token lacks access."""
    plain = body()
    denied = ResolutionView(draft_key(plain), None, None, "ModelAccessDenied", "401 gated repo")
    status, reason, message = condition(run(plain, denied))
    assert (status, reason) == ("False", "ModelAccessDenied")
    assert f"draft {DRAFT}" in message and "set spec.model.tokenSecretRef" in message
    gated = body()
    gated["model"]["tokenSecretRef"] = {"name": "hf", "key": "token"}
    key = ("token", "ns", "hf", "token", DRAFT, "main")
    _, _, message = condition(run(gated, ResolutionView(key, None, None, "ModelAccessDenied", "403")))
    assert "has no access" in message and "tokenSecretRef" in message
