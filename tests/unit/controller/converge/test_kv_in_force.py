"""``status.kvCacheTokens`` (printer column KV TOKENS) is the KV pool the engine of the attempt in force reported:
set once that attempt's start-up log is read, cleared when the server fails (nothing runs) or steps down to
another attempt, and never an earlier spec's figure (attempt numbers start again at 1 after a spec change)."""

from __future__ import annotations

import sys
from typing import Any

from ctxfit.api.crd import build_crd
from ctxfit.api.status import InferenceServerStatus, Phase
from ctxfit.controller.converge import converge
from ctxfit.controller.views.pods import PodView

from tests.unit.controller.builders import REPO, SETTINGS, applied, never, pod, snapshot, spec

sys.path.insert(0, str(REPO / "hack"))
from sim_startup import sglang_startup_log, vllm_startup_log


def _reader(log: str) -> Any:
    def read(_pod: PodView) -> str:
        return log
    return read


def _ready(body: dict[str, Any], log: str, status: InferenceServerStatus | None = None,
           generation: int = 1) -> InferenceServerStatus:
    first = converge(snapshot(body, status, generation=generation), SETTINGS, never)
    out = converge(snapshot(body, first.status, pods=(pod(1, ready=True),), deployment=applied(first),
                            generation=generation), SETTINGS, never, _reader(log))
    return out.status


def _vllm_log(body: dict[str, Any], spare: int = 0) -> str:
    plan = converge(snapshot(body), SETTINGS, never).status.plan
    assert plan is not None
    return vllm_startup_log(kv_cache_bytes=plan.per_gpu.kv_cache_bytes + spare * plan.kv_bytes_per_token,
                            kv_bytes_per_token=plan.kv_bytes_per_token,
                            max_model_len=int(body["context"]["target"]))


def test_the_column_reads_the_field_of_the_attempt_in_force() -> None:
    version = build_crd()["spec"]["versions"][0]
    columns = {c["name"]: c["jsonPath"] for c in version["additionalPrinterColumns"]}
    assert columns["KV Tokens"] == ".status.kvCacheTokens"
    assert "kvCacheTokens" in version["schema"]["openAPIV3Schema"]["properties"]["status"]["properties"]


def test_ready_shows_the_pool_and_failed_clears_it() -> None:
    body = spec()
    ready = _ready(body, _vllm_log(body))
    assert ready.phase is Phase.READY and ready.observed is not None and ready.observed.kv_cache_tokens
    assert ready.kv_cache_tokens == ready.observed.kv_cache_tokens
    broken = {**body, "gpu": {**body["gpu"], "count": 0}}  # an invalid spec: Failed, scaled to 0
    failed = converge(snapshot(broken, ready, generation=2), SETTINGS, never).status
    assert failed.phase is Phase.FAILED and failed.kv_cache_tokens is None
    assert failed.observed == ready.observed, "status.observed keeps the last report (calibration, drift)"


def test_a_step_down_clears_it_until_the_new_attempt_reports() -> None:
    body = spec("dsv4-flash-512k.yaml")
    clamped = _ready(body, sglang_startup_log(max_total_num_tokens=300_000, context_len=524288,
                                              kv_bytes_per_token=3800))
    second = clamped.attempts[1]
    assert clamped.phase is Phase.STEPPING_DOWN and clamped.observed is not None
    assert clamped.observed.kv_cache_tokens == 300_000 and clamped.kv_cache_tokens is None
    fits = _reader(sglang_startup_log(max_total_num_tokens=300_000, context_len=second.effective.context_length,
                                      kv_bytes_per_token=3800))
    step = converge(snapshot(body, clamped, pods=(pod(2, ready=True),)), SETTINGS, never, fits)
    ready = converge(snapshot(body, step.status, pods=(pod(2, ready=True),)), SETTINGS, never, fits).status
    assert ready.phase is Phase.READY and ready.kv_cache_tokens == 300_000


def test_a_new_spec_is_observed_again_not_shown_the_old_figure() -> None:
    body = spec()
    old = _ready(body, _vllm_log(body))
    assert old.kv_cache_tokens is not None
    edited = spec(target=65536)
    log = _vllm_log(edited, spare=4096)
    new = _ready(edited, log, old, generation=2)
    assert new.phase is Phase.READY and [a.number for a in new.attempts] == [1]
    assert new.observed is not None and new.observed.served_context_length == 65536, "the new attempt 1 is read"
    assert new.kv_cache_tokens == new.observed.kv_cache_tokens != old.kv_cache_tokens
