"""Faults with fakes: refusals with backoff, status validated on read, operator
policy, managed flags (the e2e side is tests/e2e/test_faults_*.py)."""

from __future__ import annotations

import copy
import json
from typing import Any

import pytest
from ctxfit.api import EffectiveConfig, EngineKind, InferenceServerSpec
from ctxfit.api.status_check import read_status
from ctxfit.api.validation import MANAGED_FLAGS, managed_flag_in
from ctxfit.controller.converge.policy import refusal
from ctxfit.controller.reconcile import reconcile
from ctxfit.controller.rejections import RejectionBook, rejection_of
from ctxfit.controller.settings import Settings
from ctxfit.engines import get_engine
from kubernetes.client.exceptions import ApiException
from pydantic import ValidationError

from tests.unit.controller.builders import RTX
from tests.unit.controller.fakekube import OWNED_BY, FakeKube, RefusingKube, conditions, runtime, server


def test_refused_deployment_becomes_a_condition_and_one_event_with_backoff() -> None:
    kube = RefusingKube(server(), "Deployment")
    rt = runtime(kube)
    result = reconcile(rt, "ns", "kimi-k25", (RTX,), ())
    assert kube.calls[:2] == ["refused:Deployment", "status"] and "event:ObjectRejected" in kube.calls
    cond = conditions(kube)["ObjectsAccepted"]
    assert cond["status"] == "False" and cond["reason"] == "ObjectRejected"
    assert "Deployment kimi-k25 (403)" in cond["message"] and "exceeded quota" in cond["message"]
    assert "\x1b" not in cond["message"]
    assert conditions(kube)["Ready"]["status"] == "False"
    assert result.requeue_after == 10.0
    # the next passes within the backoff do not retry the same Deployment, and post no new Event
    kube.calls.clear()
    again = reconcile(rt, "ns", "kimi-k25", (RTX,), ())
    assert not [c for c in kube.calls if c.startswith(("refused", "apply", "event"))], kube.calls
    assert again.requeue_after is not None and again.requeue_after <= 10.0
    assert rt.metrics.registry.get_sample_value("ctxfit_reconcile_errors_total", {"reason": "rejected_403"}) == 1


def test_refused_service_holds_ready_and_recovers_when_accepted() -> None:
    body = server()
    kube = RefusingKube(body, "Service")
    rt = runtime(kube)
    reconcile(rt, "ns", "kimi-k25", (RTX,), ())  # plan + Deployment
    from ctxfit.controller.views.pods import deployment_view
    assert kube.server is not None
    stored = kube.server
    deployment = deployment_view({"metadata": {"annotations": {}, "ownerReferences": [OWNED_BY]},
                                  "spec": {"replicas": 1}})
    result = reconcile(rt, "ns", "kimi-k25", (RTX,), (), body=stored, deployment=deployment, service_port=None)
    assert "refused:Service" in kube.calls
    assert conditions(kube)["ObjectsAccepted"]["status"] == "False"
    assert "endpoint" not in kube.server["status"]
    assert result.requeue_after == 10.0
    # retried once the backoff has passed, accepted -> ObjectsAccepted True, Ready no longer held
    kube.refuse = None
    for entry in rt.rejections._entries.values():
        entry.next_try = 0.0
    reconcile(rt, "ns", "kimi-k25", (RTX,), (), body=kube.server, deployment=deployment, service_port=None)
    assert "apply:Service" in kube.calls
    conds = conditions(kube)
    assert conds["ObjectsAccepted"]["status"] == "True"
    assert conds["Ready"]["reason"] != "ObjectRejected"


def test_backoff_doubles_and_a_new_rendering_is_tried_at_once() -> None:
    book = RejectionBook()
    exc = ApiException(status=422, reason="Invalid")
    exc.body = json.dumps({"message": "bad"})
    obj = {"kind": "Service", "spec": {"a": 1}}
    rejected = rejection_of(exc, "Service", "x", obj)
    assert rejected is not None and rejected.message == "bad"
    assert [book.failed(("n", "x"), rejected, 0.0) for _ in range(7)] == [10, 20, 40, 80, 160, 300, 300]
    assert book.wait(("n", "x"), "Service", obj, 100.0) == 200.0
    assert book.wait(("n", "x"), "Service", {"kind": "Service", "spec": {"a": 2}}, 100.0) == 0.0
    assert rejection_of(ApiException(status=500), "Service", "x", obj) is None
    assert rejection_of(ApiException(status=409), "Service", "x", obj) is None


def _ready_status() -> dict[str, Any]:
    first = reconcile(runtime(FakeKube(server())), "ns", "kimi-k25", (RTX,), ())
    assert first.stored is not None
    return copy.deepcopy(first.stored["status"])


def _edit(path: str, value: Any) -> dict[str, Any]:
    status = _ready_status()
    cur: Any = status
    parts = path.split(".")
    for part in parts[:-1]:
        cur = cur[int(part)] if part.isdigit() else cur[part]
    cur[parts[-1]] = value
    return status


STATUS_EDITS = {
    "context-minus-5": ("attempts.0.effective.contextLength", -5, "contextLength"),
    "context-string": ("attempts.0.effective.contextLength", "lots", "contextLength"),
    "memory-unparsable": ("attempts.0.effective.memoryLimit", "lots", "memoryLimit"),
    "memory-huge": ("attempts.0.effective.memoryLimit", "1e30", "memoryLimit"),
    "gpu-util-2": ("attempts.0.effective.gpuMemoryUtilization", 2.0, "gpuMemoryUtilization"),
    "kv-dtype": ("attempts.0.effective.kvCacheDtype", "--evil", "kvCacheDtype"),
    "seqs-0": ("attempts.0.effective.maxNumSeqs", 0, "maxNumSeqs"),
    "started-garbage": ("attempts.0.startedAt", "yesterday", "startedAt"),
    "number": ("attempts.0.number", 3, "number"),
    "product": ("nodeProduct", "a b", "nodeProduct"),
    "spec-key": ("specKey", "../../x", "specKey"),
    "phase": ("phase", "Exploding", "phase"),
}


@pytest.mark.parametrize("case", list(STATUS_EDITS), ids=list(STATUS_EDITS))
def test_bad_stored_status_is_named_and_discarded(case: str) -> None:
    path, value, field = STATUS_EDITS[case]
    status, problem = read_status(_edit(path, value))
    assert problem is not None and field in problem
    assert status.attempts == [] and status.plan is None


def test_good_stored_status_is_kept() -> None:
    status, problem = read_status(_ready_status())
    assert problem is None and len(status.attempts) == 1


def test_reconcile_replans_from_a_bad_status_and_says_so() -> None:
    body = server()
    body["status"] = _edit("attempts.0.effective.contextLength", -5)
    kube = FakeKube(body)
    reconcile(runtime(kube), "ns", "kimi-k25", (RTX,), ())
    assert kube.calls.count("status") == 1, "the discarded status is replaced by the pass's one write"
    assert kube.calls.index("status") < kube.calls.index("event:InvalidStatus")
    assert "Traceback" not in "".join(kube.calls)


SPEC = server()["spec"]


def _spec(**engine: Any) -> InferenceServerSpec:
    spec = copy.deepcopy(SPEC)
    spec["engine"].update(engine)
    return InferenceServerSpec.model_validate(spec)


POLICY: dict[str, tuple[dict[str, Any], dict[str, Any], str | None]] = {
    "image-prefix": ({"image": "registry.example/any:latest"}, {"allowed_image_prefixes": ("vllm/",)}, "prefix"),
    "default-image-allowed": ({}, {"allowed_image_prefixes": ("vllm/",)}, None),
    "operator-image": ({}, {"allowed_image_prefixes": ("mirror/",), "vllm_image": "mirror/vllm:1"}, None),
    "secret": ({"env": [{"name": "X", "valueFrom": {"secretKeyRef": {"name": "s", "key": "k"}}}]},
               {"allow_secret_env": False}, "Secret"),
    "secret-allowed": ({"env": [{"name": "X", "valueFrom": {"secretKeyRef": {"name": "s", "key": "k"}}}]}, {}, None),
}


@pytest.mark.parametrize("case", list(POLICY), ids=list(POLICY))
def test_policy(case: str) -> None:
    engine, settings, expected = POLICY[case]
    result = refusal(_spec(**engine), Settings(metrics_port=0, **settings))
    assert (result is None) if expected is None else (result is not None and expected in result)


@pytest.mark.parametrize(("tolerations", "settings", "expected"), [
    ([{"operator": "Exists"}], {"allow_wildcard_tolerations": False}, "without a key"),
    ([{"operator": "Exists"}], {}, None),
    ([{"key": "a", "operator": "Exists"}], {"allowed_toleration_keys": ("b",)}, "not allowed"),
    ([{"key": "b", "operator": "Exists"}], {"allowed_toleration_keys": ("b",)}, None),
], ids=["wildcard-forbidden", "wildcard-default", "key-not-listed", "key-listed"])
def test_toleration_policy(tolerations: list[dict[str, Any]], settings: dict[str, Any], expected: str | None) -> None:
    spec = copy.deepcopy(SPEC)
    spec["pod"] = {"tolerations": tolerations}
    result = refusal(InferenceServerSpec.model_validate(spec), Settings(metrics_port=0, **settings))
    assert (result is None) if expected is None else (result is not None and expected in result)


def test_policy_settings_read_comma_lists(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CTXFIT_ALLOWED_IMAGE_PREFIXES", "vllm/, lmsysorg/")
    monkeypatch.setenv("CTXFIT_ALLOW_WILDCARD_TOLERATIONS", "false")
    cfg = Settings()
    assert cfg.allowed_image_prefixes == ("vllm/", "lmsysorg/") and not cfg.allow_wildcard_tolerations


@pytest.mark.parametrize("engine", list(EngineKind))
def test_every_flag_an_engine_renders_is_managed(engine: EngineKind) -> None:
    """The admission table covers the engines' own flags (a new managed flag must be added there too)."""
    spec = copy.deepcopy(SPEC)
    spec["engine"] = {"kind": engine.value}
    spec["parallelism"] = {"tensor": 2, "pipeline": 2, "data": 2, "expert": True}
    spec["batching"] = {"maxNumBatchedTokens": 8192}
    spec.pop("memory", None)
    parsed = InferenceServerSpec.model_validate(spec)
    fraction = {"gpu_memory_utilization": 0.9} if engine is EngineKind.VLLM else {"mem_fraction_static": 0.8}
    effective = EffectiveConfig(context_length=4096, max_num_seqs=8, cuda_graph_max_batch_size=8,
                                memory_limit_bytes=1 << 34, shm_bytes=1 << 30, startup_timeout_seconds=600,
                                **fraction)
    rendered = [a for a in get_engine(engine).engine_args(parsed, effective) if a.startswith("-")]
    unmanaged = [a for a in rendered if managed_flag_in([a], engine.value) is None and a != "--enable-metrics"]
    assert not unmanaged


@pytest.mark.parametrize(("args", "engine", "flag"), [
    (["--max-model-len", "5"], "vllm", "--max-model-len"),
    (["--max-model-len=5"], "vllm", "--max-model-len"),
    (["--max_model_len=5"], "vllm", "--max-model-len"),
    (["--port", "1"], "sglang", "--port"),
    (["--tensor-parallel-size=2"], "sglang", "--tp-size"),
    (["--context-length", "1"], "vllm", None),  # not a vLLM flag: vLLM itself refuses it
    (["--max-model-len-x"], "vllm", None),
    (["--enable-prefix-caching"], "vllm", None),
    (["--model-path", "x"], "sglang", "--model-path"),
    (["--max-model", "5"], "vllm", "--max-model-len"),
    (["--gpu_memory=0.99"], "vllm", "--gpu-memory-utilization"),
    (["--context-len", "1"], "sglang", "--context-length"),
    (["--max", "1"], "vllm", None),  # too short to be taken for a managed flag (ambiguous for argparse)
    (["--enable-eplb"], "vllm", None),
    (["--data-parallel-rank", "1"], "vllm", None),
], ids=lambda v: str(v))
def test_managed_flags_both_spellings(args: list[str], engine: str, flag: str | None) -> None:
    found = managed_flag_in(args, engine)
    assert (found.names[0] if found else None) == flag
    spec = copy.deepcopy(SPEC)
    spec["engine"] = {"kind": engine, "args": args}
    if engine == "sglang":
        spec.pop("memory", None)
    if flag is None:
        InferenceServerSpec.model_validate(spec)
    else:
        with pytest.raises(ValidationError, match=flag):
            InferenceServerSpec.model_validate(spec)


def test_managed_flags_are_unique_per_engine() -> None:
    for engine in EngineKind:
        names = [n for f in MANAGED_FLAGS if engine.value in f.engines for n in f.names]
        assert len(names) == len(set(names)), engine


def test_an_unexpected_error_logs_its_traceback_once(caplog: pytest.LogCaptureFixture) -> None:
    class Exploding(FakeKube):
        def replace_status(self, body: dict[str, Any], status: dict[str, Any]) -> dict[str, Any]:
            raise RuntimeError("boom")

    rt = runtime(Exploding(server()))
    for _ in range(3):
        reconcile(rt, "ns", "kimi-k25", (RTX,), ())
    tracebacks = [r for r in caplog.records if r.exc_info]
    assert len(tracebacks) == 1 and sum("failed again" in r.getMessage() for r in caplog.records) == 2
