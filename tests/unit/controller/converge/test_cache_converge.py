"""The weights cache in reconciliation (pure ``converge`` with fakes): the claim, the Downloading phase,
WeightsCached, and what each download failure does (never a step-down)."""

from __future__ import annotations

from dataclasses import replace
from datetime import timedelta
from typing import Any

import pytest
from ctxfit.api import GiB
from ctxfit.api.status import ConditionType, InferenceServerStatus
from ctxfit.controller.converge import Outcome, Snapshot, converge
from ctxfit.controller.views.cache import ClaimView, DownloadView, StorageView, download_view, parse_progress
from ctxfit.controller.views.pods import PodView
from ctxfit.recovery import Failure, FailureKind
from ctxfit.render.cache import CLAIM_ANNOTATION, DOWNLOAD_CONTAINER

from tests.unit.controller.builders import (
    KV_FAILURE,
    NOW,
    RTX,
    SETTINGS,
    applied,
    diagnosed,
    never,
    pod,
    snapshot,
    spec,
)

DEFAULT_SC = StorageView("standard", {"standard": False, "fast": True})
NO_SC = StorageView(None, {})
KIMI_CLAIM = 615 * GiB  # ceil(595e9 x 1.1 / GiB) GiB + 5 GiB


def stamp(seconds: float = 0) -> str:
    return (NOW + timedelta(seconds=seconds)).strftime("%Y-%m-%dT%H:%M:%SZ")


def snap(body: dict[str, Any], status: InferenceServerStatus | None = None, *, storage: StorageView | None = DEFAULT_SC,
         claim: ClaimView | None = None, pods: tuple[PodView, ...] = (), log: str = "", **kw: Any) -> Snapshot:
    base = snapshot(body, status, pods=pods, **kw)
    return replace(base, storage=storage, claim=claim, download_log=lambda _pod: log)


def downloading(attempt: int, state: str, *, claim: str = "kimi-weights", message: str = "", restarts: int = 0,
                finished: float | None = None) -> PodView:
    if finished is None and state == "failed":
        finished = 0
    view = DownloadView(state, stamp(), stamp(finished) if finished is not None else None, restarts,
                        1 if state == "failed" else (0 if state == "succeeded" else None), "Error" if state == "failed"
                        else None, message, claim)
    base = pod(attempt)
    # the engine container starts only after the init containers finished (Kubernetes pod lifecycle)
    engine_started = stamp(finished) if state == "succeeded" and finished is not None else None
    return replace(base, download=view, facts=replace(base.facts, engine_started_at=engine_started))


def bound(name: str = "kimi-weights", size: int = KIMI_CLAIM) -> ClaimView:
    return ClaimView(name, size, "Bound", "standard", size)


def started(body: dict[str, Any], **kw: Any) -> Outcome:
    return converge(snap(body, **kw), SETTINGS, never)


def test_default_cache_is_an_owned_claim_sized_from_the_checkpoint() -> None:
    out = started(spec())
    model = out.status.model
    assert model is not None and model.cache.value == "volumeClaimTemplate"
    assert model.claim_name == "kimi-weights" and model.claim_wanted_bytes == KIMI_CLAIM
    assert model.claim_bytes is None, "the claim does not exist yet: status never says a size it does not have"
    assert out.claim is not None and not out.claim_exists
    assert out.claim["spec"]["resources"]["requests"]["storage"] == "615Gi"
    assert out.claim["metadata"]["ownerReferences"][0]["uid"] == "uid-1"
    template = out.deployment["spec"]["template"] if out.deployment else {}
    assert [c["name"] for c in template["spec"]["initContainers"]] == [DOWNLOAD_CONTAINER]
    assert template["metadata"]["annotations"][CLAIM_ANNOTATION] == "kimi-weights"
    again = converge(snap(spec(), out.status, claim=bound(), deployment=applied(out)), SETTINGS, never)
    assert again.claim is None and again.deployment is None, "an existing claim of the right size is left alone"


def test_retain_leaves_no_owner_reference_and_an_explicit_size_wins() -> None:
    body = spec()
    body["model"]["cache"] = {"volumeClaimTemplate": {"size": "700Gi", "retain": True, "storageClassName": "fast"}}
    out = started(body)
    assert out.claim is not None and "ownerReferences" not in out.claim["metadata"]
    assert out.claim["spec"]["storageClassName"] == "fast"
    assert out.claim["spec"]["resources"]["requests"]["storage"] == "700Gi"


def test_no_default_storage_class_falls_back_to_empty_dir_and_says_so() -> None:
    out = started(spec(), storage=NO_SC)
    model = out.status.model
    assert model is not None and model.cache.value == "emptyDir" and out.claim is None
    assert model.ephemeral_bytes == KIMI_CLAIM
    cached = out.status.condition(ConditionType.WEIGHTS_CACHED)
    assert cached is not None and cached.status == "False" and "every attempt downloads them again" in cached.message
    engine = out.deployment["spec"]["template"]["spec"]["containers"][0] if out.deployment else {}
    assert engine["resources"]["requests"]["ephemeral-storage"] == "615Gi"


def test_storage_not_read_renders_without_a_cache() -> None:
    out = started(spec(), storage=None)
    assert out.status.model is not None and out.status.model.cache is None and out.claim is None
    assert out.status.model.resolved is not None and out.status.model.resolved.source == "catalog"
    assert out.deployment is not None and "initContainers" not in out.deployment["spec"]["template"]["spec"]


def test_a_failed_storage_class_list_keeps_the_cache_in_force() -> None:
    first = started(spec())
    again = converge(snap(spec(), first.status, storage=None, claim=bound(), deployment=applied(first)), SETTINGS,
                     never)
    assert again.deployment is None, "same pod template"
    old, new = first.status.model, again.status.model
    assert old is not None and new is not None
    assert (new.cache, new.claim_name, new.note) == (old.cache, old.claim_name, old.note)
    assert new.claim_bytes == KIMI_CLAIM and new.claim_wanted_bytes is None, "the bound claim's size, as it is"


def test_downloading_phase_shows_elapsed_time_and_bytes() -> None:
    first = started(spec())
    log = "ctxfit-download: 120000000000 of 595000000000 bytes\n"
    out = converge(snap(spec(), first.status, claim=bound(), pods=(downloading(1, "running"),), log=log,
                        now=NOW + timedelta(seconds=90)), SETTINGS, never)
    st = out.status
    assert st.phase is not None and st.phase.value == "Downloading"
    assert st.message is not None and "90 s" in st.message and "120.0 of 595.0 GB" in st.message
    assert st.model is not None and st.model.bytes == 595_000_000_000
    cached = st.condition(ConditionType.WEIGHTS_CACHED)
    assert cached is not None and cached.status == "False" and cached.reason.value == "Downloading"
    assert out.requeue_after is not None and out.requeue_after <= 10


def test_a_long_download_does_not_count_against_the_startup_timeout() -> None:
    first = started(spec())
    late = NOW + timedelta(seconds=1800 + 300)  # past startupTimeoutSeconds + grace from pod creation
    done = downloading(1, "succeeded", finished=1800)
    out = converge(snap(spec(), first.status, claim=bound(), pods=(done,), now=late), SETTINGS, never)
    st = out.status
    assert st.phase is not None and st.phase.value == "Starting"
    assert st.model is not None and st.model.download_seconds == 1800
    cached = st.condition(ConditionType.WEIGHTS_CACHED)
    assert cached is not None and cached.status == "True" and cached.reason.value == "Cached"
    assert [a.outcome.value for a in st.attempts] == ["Running"]


def test_step_down_keeps_the_same_claim() -> None:
    first = started(spec())
    done = replace(downloading(1, "succeeded", finished=60), termination=pod(1, terminated="Error").termination)
    out = converge(snap(spec(), first.status, claim=bound(), pods=(done,)), SETTINGS, diagnosed(KV_FAILURE))
    st = out.status
    assert [a.number for a in st.attempts] == [1, 2] and st.phase is not None and st.phase.value == "SteppingDown"
    later = converge(snap(spec(), st, claim=bound(), now=NOW + timedelta(seconds=60)), SETTINGS, never)
    assert later.claim is None, "no second claim"
    template = later.deployment["spec"]["template"] if later.deployment else {}
    assert template["metadata"]["annotations"]["ctxfit.io/attempt"] == "2"
    assert template["spec"]["volumes"][-1]["persistentVolumeClaim"]["claimName"] == "kimi-weights"


GATED = Failure(FailureKind.MODEL_ACCESS_DENIED, {}, "Cannot access gated repo for url https://huggingface.co/x")


def test_gated_model_fails_permanently_without_a_step_down() -> None:
    body = spec()
    body["model"]["tokenSecretRef"] = {"name": "hf", "key": "token"}
    first = started(body)
    out = converge(snap(body, first.status, claim=bound(), pods=(downloading(1, "failed", message="403"),)),
                   SETTINGS, diagnosed(GATED))
    st = out.status
    assert st.phase is not None and st.phase.value == "Failed"
    assert [a.failure_kind for a in st.attempts] == ["ModelAccessDenied"] and len(st.attempts) == 1
    assert "Secret hf key token" in (st.message or "") and "request access" in (st.message or "")
    assert not out.step_down_reasons


def test_network_error_keeps_downloading_and_changes_nothing() -> None:
    first = started(spec())
    flaky = Failure(FailureKind.DOWNLOAD_INTERRUPTED, {}, "503 Server Error: Service Unavailable for url")
    out = converge(snap(spec(), first.status, claim=bound(), pods=(downloading(1, "failed", restarts=2),)),
                   SETTINGS, diagnosed(flaky))
    st = out.status
    assert st.phase is not None and st.phase.value == "Downloading" and "kubelet retries" in (st.message or "")
    assert [a.outcome.value for a in st.attempts] == ["Running"] and out.claim is None
    assert [e.reason.value for e in out.events] == ["DownloadRetrying"]


ENOSPC = Failure(FailureKind.CACHE_VOLUME_FULL, {},
                 "OSError: [Errno 28] No space left on device: '/models/hub/models--x/blobs/a.incomplete'")


@pytest.mark.parametrize("storage,name,exists,deleted", [
    (DEFAULT_SC, "kimi-weights-2", False, "kimi-weights"),
    (StorageView("standard", {"standard": True}), "kimi-weights", True, None),
], ids=["new-claim", "expand"])
def test_full_owned_claim_grows(storage: StorageView, name: str, exists: bool, deleted: str | None) -> None:
    first = started(spec(), storage=storage)
    out = converge(snap(spec(), first.status, storage=storage, claim=bound(), pods=(downloading(1, "failed"),)),
                   SETTINGS, diagnosed(ENOSPC))
    st = out.status
    assert st.model is not None and st.model.claim_name == name and st.model.claim_wanted_bytes == 923 * GiB
    assert st.model.claim_bytes == (KIMI_CLAIM if exists else None), "what the claim has, not what it is asked"
    assert out.claim_delete == deleted
    later = converge(snap(spec(), st, storage=storage, claim=bound(), pods=(downloading(1, "failed"),)),
                     SETTINGS, never)
    assert later.claim is not None and later.claim_exists is exists
    assert later.claim["metadata"]["name"] == name
    assert later.claim["spec"]["resources"]["requests"]["storage"] == "923Gi"
    assert [a.outcome.value for a in st.attempts] == ["Running"], "same attempt, same engine flags"
    assert st.phase is not None and st.phase.value == "Downloading"


def test_full_user_claim_is_permanent_with_the_numbers() -> None:
    body = spec()
    body["model"]["cache"] = {"persistentVolumeClaim": {"claimName": "shared"}}
    first = started(body)
    assert first.claim is None
    user = ClaimView("shared", 100 * GiB, "Bound", "nfs", 100 * GiB)
    out = converge(snap(body, first.status, claim=user, pods=(downloading(1, "failed", claim="shared"),)),
                   SETTINGS, diagnosed(ENOSPC))
    st = out.status
    assert st.phase is not None and st.phase.value == "Failed" and "100Gi claim shared is full" in (st.message or "")


def test_preloaded_read_only_claim_has_no_download() -> None:
    body = spec()
    body["model"]["cache"] = {"persistentVolumeClaim": {"claimName": "weights", "subPath": "kimi", "readOnly": True}}
    out = started(body)
    template = out.deployment["spec"]["template"] if out.deployment else {}
    assert "initContainers" not in template["spec"]
    mount = template["spec"]["containers"][0]["volumeMounts"][-1]
    assert mount == {"name": "model-cache", "mountPath": "/models", "subPath": "kimi", "readOnly": True}
    cached = out.status.condition(ConditionType.WEIGHTS_CACHED)
    assert cached is not None and cached.status == "True" and cached.reason.value == "Preloaded"


def test_stale_failure_of_the_old_claim_is_ignored() -> None:
    first = started(spec())
    grown = converge(snap(spec(), first.status, claim=bound(), pods=(downloading(1, "failed"),)), SETTINGS,
                     diagnosed(ENOSPC))
    later = converge(snap(spec(), grown.status, claim=bound(), now=NOW + timedelta(seconds=5),
                          pods=(downloading(1, "failed", claim="kimi-weights-2", finished=-1),)), SETTINGS, never)
    assert later.status.phase is not None and later.status.phase.value == "Downloading"


def test_download_view_and_progress_parsing() -> None:
    pod_body = {
        "metadata": {"annotations": {CLAIM_ANNOTATION: "c"}},
        "spec": {"initContainers": [{"name": DOWNLOAD_CONTAINER}]},
        "status": {"initContainerStatuses": [{
            "name": DOWNLOAD_CONTAINER, "restartCount": 2,
            "state": {"waiting": {"reason": "CrashLoopBackOff"}},
            "lastState": {"terminated": {"exitCode": 1, "reason": "Error", "message": "429 Client Error",
                                         "startedAt": "2026-01-01T00:00:00Z", "finishedAt": "2026-01-01T00:01:00Z"}},
        }]},
    }
    view = download_view(pod_body)
    assert view is not None and view.state == "failed" and view.restart_count == 2 and view.claim == "c"
    assert view.message == "429 Client Error" and view.exit_code == 1
    pod_body["status"]["initContainerStatuses"][0]["state"] = {"running": {"startedAt": "2026-01-01T00:02:00Z"}}
    running = download_view(pod_body)
    assert running is not None and running.state == "running"
    assert download_view({"spec": {"containers": [{"name": "engine"}]}}) is None
    assert parse_progress("x\nctxfit-download: 5 of 10 bytes\nctxfit-download: 7 of 10 bytes\n") == (7, 10)
    assert parse_progress("ctxfit-download: complete 10 of 10 bytes in 3 s") == (10, 10)
    assert parse_progress("Fetching 64 files") is None


def test_unknown_download_error_repeating_goes_to_the_policy() -> None:
    first = started(spec())
    odd = Failure(FailureKind.UNKNOWN, {}, "ModuleNotFoundError: No module named 'huggingface_hub'")
    out = converge(snap(spec(), first.status, claim=bound(), pods=(downloading(1, "failed", restarts=3),)),
                   SETTINGS, diagnosed(odd))
    st = out.status
    assert [a.outcome.value for a in st.attempts] == ["Failed", "Running"]
    assert st.attempts[1].effective == st.attempts[0].effective, "Unknown retries the same configuration"
    assert RTX.product == st.node_product


def test_a_download_that_has_not_started_says_what_it_waits_for() -> None:
    first = started(spec())
    waiting = replace(pod(1), download=DownloadView("waiting", None, None, 0, None, None, "", "kimi-weights"),
                      phase="Pending")
    pending = ClaimView("kimi-weights", KIMI_CLAIM, "Pending", "standard", None)
    out = converge(snap(spec(), first.status, claim=pending, pods=(waiting,)), SETTINGS, never)
    cached = out.status.condition(ConditionType.WEIGHTS_CACHED)
    assert cached is not None and "claim kimi-weights is Pending" in cached.message
    assert out.status.phase is not None and out.status.phase.value == "Starting"


def test_a_download_that_has_not_started_waits_for_its_pod_not_a_timer() -> None:
    """The pod's own change (scheduled, init container started) ends this wait and is a pass: no 10-s polling."""
    first = started(spec())
    waiting = replace(pod(1), download=DownloadView("waiting", None, None, 0, None, None, "", "kimi-weights"),
                      phase="Pending")
    have = {"claim": bound(), "deployment": applied(first), "service_port": 8000}
    out = converge(snap(spec(), first.status, pods=(waiting,), **have), SETTINGS, never)
    cached = out.status.condition(ConditionType.WEIGHTS_CACHED)
    assert cached is not None and cached.message.startswith("download not started yet: pod ")
    assert out.deployment is None and out.service is None
    assert out.requeue_after == SETTINGS.resync_seconds
    running = converge(snap(spec(), out.status, pods=(downloading(1, "running"),), **have), SETTINGS, never)
    assert running.requeue_after is not None and running.requeue_after <= 10
