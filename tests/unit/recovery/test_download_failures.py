"""Download failure kinds: real huggingface_hub / HTTP client / kubelet wording (several versions), the
policy's verdicts, and the model-download init container as rendered."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml
from ctxfit.api import GiB, InferenceServer
from ctxfit.api.model_cache import CacheMode
from ctxfit.recovery import Failure, FailureKind, Observation, classify, decide, initial_effective
from ctxfit.recovery.download import ClaimFacts, PolicyContext, as_download_failure, decide_download, grown_claim_bytes
from ctxfit.render import RenderInput, render_deployment
from ctxfit.render.cache import checkpoint_bytes, claim_size_bytes, describe_cache, resolve_cache

K = FailureKind
REPO = Path(__file__).resolve().parents[3]

CASES = {
    # huggingface_hub utils/_errors.py (v0.14-v0.20) and utils/_http.py (v0.21-v1.28) hf_raise_for_status
    "gated-old-hub": (
        "huggingface_hub.utils._errors.GatedRepoError: 403 Client Error. (Request ID: Root=1-abc)\n\n"
        "Cannot access gated repo for url https://huggingface.co/meta-llama/Llama-3.1-8B/resolve/main/config.json.\n"
        "Access to model meta-llama/Llama-3.1-8B is restricted and you are not in the authorized list. Visit "
        "https://huggingface.co/meta-llama/Llama-3.1-8B to ask for access.", K.MODEL_ACCESS_DENIED),
    "gated-new-hub": (
        "huggingface_hub.errors.GatedRepoError: 401 Client Error. (Request ID: Root=1-def)\n\n"
        "Cannot access gated repo for url https://huggingface.co/api/models/google/gemma-3-27b-it/revision/main.\n"
        "Access to model google/gemma-3-27b-it is restricted. You must have access to it and be authenticated "
        "to access it. Please log in.", K.MODEL_ACCESS_DENIED),
    "transformers-gated": (
        "OSError: You are trying to access a gated repo.\nMake sure to have access to it at "
        "https://huggingface.co/mistralai/Mistral-Large-Instruct-2411.\n401 Client Error.", K.MODEL_ACCESS_DENIED),
    "forbidden-token-v0.25": (
        "huggingface_hub.errors.HfHubHTTPError: \n\n403 Forbidden: Please enable access to public gated "
        "repositories in your fine-grained token settings to view this repository..\nCannot access content at: "
        "https://huggingface.co/api/models/x/y.\nMake sure your token has the correct permissions.",
        K.MODEL_ACCESS_DENIED),
    "requests-401": ("requests.exceptions.HTTPError: 401 Client Error: Unauthorized for url: "
                     "https://huggingface.co/api/models/org/private", K.MODEL_ACCESS_DENIED),
    "httpx-403": ("httpx.HTTPStatusError: Client error '403 Forbidden' for url "
                  "'https://huggingface.co/api/models/org/m/revision/main'", K.MODEL_ACCESS_DENIED),
    "repo-not-found-v1": (
        "huggingface_hub.errors.RepositoryNotFoundError: 404 Client Error. (Request ID: Root=1-x)\n\n"
        "Repository Not Found for url: https://huggingface.co/api/models/moonshotai/Kimi-K9/revision/main.\n"
        "Please make sure you specified the correct `repo_id` and `repo_type`.", K.MODEL_NOT_FOUND),
    "repo-not-found-401-v0.14": (
        "huggingface_hub.utils._errors.RepositoryNotFoundError: 401 Client Error. (Request ID: PvMw)\n\n"
        "Repository Not Found for url: https://huggingface.co/api/models/%3Cnon_existent_repository%3E.\n"
        "Please make sure you specified the correct `repo_id` and `repo_type`.\nIf you are trying to access a "
        "private or gated repo, make sure you are authenticated.\nInvalid username or password.", K.MODEL_NOT_FOUND),
    "revision-not-found": (
        "huggingface_hub.utils._errors.RevisionNotFoundError: 404 Client Error. (Request ID: Mwhe)\n\n"
        "Revision Not Found for url: https://huggingface.co/api/models/bert-base-cased/revision/v9.\n"
        "Invalid rev id: v9", K.MODEL_NOT_FOUND),
    "offline-empty-cache": (
        "huggingface_hub.errors.LocalEntryNotFoundError: Cannot find the requested files in the disk cache and "
        "outgoing traffic has been disabled. To enable hf.co look-ups and downloads online, set 'local_files_only'"
        " to False.", K.MODEL_NOT_FOUND),
    "enospc-blob": ("OSError: [Errno 28] No space left on device: "
                    "'/models/hub/models--moonshotai--Kimi-K2.5/blobs/9f1c.incomplete'", K.CACHE_VOLUME_FULL),
    "hf-disk-space-warning": (
        "UserWarning: Not enough free disk space to download the file. The expected file size is: 4993.45 MB. "
        "The target location /models/hub/models--moonshotai--Kimi-K2.5/blobs only has 1024.00 MB free disk space.",
        K.CACHE_VOLUME_FULL),
    "requests-503": ("requests.exceptions.HTTPError: 503 Server Error: Service Unavailable for url: "
                     "https://huggingface.co/api/models/x/y/revision/main", K.DOWNLOAD_INTERRUPTED),
    "httpx-502": ("httpx.HTTPStatusError: Server error '502 Bad Gateway' for url 'https://cas-bridge.xethub.hf.co/'",
                  K.DOWNLOAD_INTERRUPTED),
    "429-v1": ("huggingface_hub.errors.HfHubHTTPError: \n\n429 Too Many Requests: you have reached your 'resolvers' "
               "rate limit.\nRetry after 31 seconds (0/3000 requests remaining in current 300s window).",
               K.DOWNLOAD_INTERRUPTED),
    "429-requests": ("requests.exceptions.HTTPError: 429 Client Error: Too Many Requests for url: "
                     "https://huggingface.co/api/models/x", K.DOWNLOAD_INTERRUPTED),
    "dns": ("requests.exceptions.ConnectionError: (MaxRetryError(\"HTTPSConnectionPool(host='huggingface.co', "
            "port=443): Max retries exceeded with url: /api/models/x (Caused by NameResolutionError(...: Failed to "
            "resolve 'huggingface.co' ([Errno -3] Temporary failure in name resolution)\"))", K.DOWNLOAD_INTERRUPTED),
    "read-timeout": ("requests.exceptions.ReadTimeout: (ReadTimeoutError(\"HTTPSConnectionPool(host='cdn-lfs-us-1"
                     ".hf.co', port=443): Read timed out. (read timeout=10)\")", K.DOWNLOAD_INTERRUPTED),
    "httpx-timeout": ("httpx.ReadTimeout: The read operation timed out", K.DOWNLOAD_INTERRUPTED),
    "online-locate": ("huggingface_hub.errors.LocalEntryNotFoundError: An error happened while trying to locate the "
                      "file on the Hub and we cannot find the requested files in the local cache. Please check your "
                      "connection and try again", K.DOWNLOAD_INTERRUPTED),
}


@pytest.mark.parametrize("text,kind", list(CASES.values()), ids=list(CASES))
def test_download_wording(text: str, kind: FailureKind) -> None:
    for engine in (None, *__import__("ctxfit.api", fromlist=["EngineKind"]).EngineKind):
        failure = classify(Observation(reason="Error", exit_code=1, message=text), engine)
        assert failure.kind is kind, (engine, failure)
        assert as_download_failure(failure, text).kind is kind


EVICTIONS = [
    "Evicted: The node was low on resource: ephemeral-storage. Threshold quantity: 10Gi, available: 2Gi. Container "
    "model-download was using 600Gi, request is 0, has larger consumption of ephemeral-storage.",
    "Evicted: Pod ephemeral local storage usage exceeds the total limit of containers 615Gi.",
    "Evicted: Usage of EmptyDir volume \"model-cache\" exceeds the limit \"615Gi\".",
    "Evicted: Container model-download exceeded its local ephemeral storage limit \"100Gi\".",
]


@pytest.mark.parametrize("event", EVICTIONS, ids=["node-low", "pod-limit", "emptydir", "container"])
def test_eviction_for_ephemeral_storage(event: str) -> None:
    failure = classify(Observation(reason=None, exit_code=None, message="", events=(event,)))
    assert failure.kind is K.EPHEMERAL_STORAGE_EVICTED


def test_hub_numbers_and_claim_growth() -> None:
    text = CASES["hf-disk-space-warning"][0]
    failure = classify(Observation(message=text))
    assert failure.numbers == {"expectedMegabytes": 4993.45, "freeMegabytes": 1024.0}
    assert grown_claim_bytes(100 * GiB, failure.numbers) == 150 * GiB
    assert grown_claim_bytes(10 * GiB, failure.numbers) == 15 * GiB
    assert grown_claim_bytes(1 * GiB, {"expectedMegabytes": 5000.0, "freeMegabytes": 0.0}) == 6 * GiB  # 1 GiB + 5e9 B
    assert grown_claim_bytes(60 << 40, {}) is None


def test_shm_enospc_stays_an_engine_kind_but_not_in_the_download_container() -> None:
    shm = "OSError: [Errno 28] No space left on device: '/dev/shm/torch_123'"
    assert classify(Observation(message=shm)).kind is K.SHARED_MEMORY_TOO_SMALL
    assert as_download_failure(classify(Observation(message=shm)), shm).kind is K.CACHE_VOLUME_FULL
    bus = "Bus error (core dumped)"
    assert as_download_failure(classify(Observation(message=bus, exit_code=135)), bus).kind is K.UNKNOWN


def kimi(**model: Any) -> Any:
    body = yaml.safe_load((REPO / "manifests" / "kimi-128k.yaml").read_text())
    body["spec"]["model"].update(model)
    return InferenceServer.model_validate(body).spec


def test_policy_verdicts_name_the_secret_and_the_model_page() -> None:
    spec = kimi(tokenSecretRef={"name": "hf-token", "key": "token"})
    current = initial_effective(spec)
    denied = decide(spec, current, Failure(K.MODEL_ACCESS_DENIED, {}, "Cannot access gated repo"))
    assert denied.permanent and "Secret hf-token key token" in denied.explanation
    assert "https://huggingface.co/moonshotai/Kimi-K2.5" in denied.explanation
    missing = decide(kimi(revision="v9"), current, Failure(K.MODEL_NOT_FOUND, {}, "Revision Not Found"))
    assert missing.permanent and "revision v9" in missing.explanation
    flaky = decide(spec, current, Failure(K.DOWNLOAD_INTERRUPTED, {}, "503 Server Error"))
    assert not flaky.permanent and flaky.next == current and flaky.retry_after_seconds > 0
    ctx = PolicyContext(spec, current, Failure(K.CACHE_VOLUME_FULL, {}, "No space left on device"), (), None, None)
    user = decide_download(ctx, ClaimFacts(CacheMode.PERSISTENT_VOLUME_CLAIM, False, "shared", 100 * GiB, None))
    assert user.permanent and "100Gi claim shared is full" in user.explanation
    owned = decide_download(ctx, ClaimFacts(CacheMode.VOLUME_CLAIM_TEMPLATE, True, "kimi-weights", 100 * GiB, None))
    assert not owned.permanent and owned.next == current and "grows to 150Gi" in owned.explanation


def test_claim_size_rule_and_checkpoint_sources() -> None:
    spec = kimi()
    assert checkpoint_bytes(spec, None) == 595_000_000_000  # catalog checkpointBytes
    assert claim_size_bytes(595_000_000_000) == 615 * GiB
    assert claim_size_bytes(10 * GiB) == 16 * GiB
    unknown = kimi(name="acme/unlisted-model")
    assert checkpoint_bytes(unknown, 70 * GiB) == 560 * GiB  # per-GPU weights x TP 8


def render(spec: Any, **kw: Any) -> dict[str, Any]:
    cache, _, _ = resolve_cache(spec, server="kimi", has_default_storage_class=True, checkpoint=10 * GiB, **kw)
    deployment = render_deployment(RenderInput("kimi", "ns", "uid", spec, initial_effective(spec), 1, cache=cache))
    return dict(deployment["spec"]["template"]["spec"])


def test_init_container_downloads_only_what_the_engine_loads_and_the_engine_runs_offline() -> None:
    spec = kimi(revision="refs/pr/7", tokenSecretRef={"name": "hf", "key": "tok"})
    pod = render(spec)
    init, engine = pod["initContainers"][0], pod["containers"][0]
    assert init["image"] == engine["image"], "same image as the engine"
    env = {e["name"]: e for e in init["env"]}
    assert env["HF_TOKEN"]["valueFrom"] == {"secretKeyRef": {"name": "hf", "key": "tok"}}
    assert env["CTXFIT_REVISION"]["value"] == "refs/pr/7"
    assert "*.safetensors" in env["CTXFIT_ALLOW"]["value"] and "original/*" in env["CTXFIT_IGNORE"]["value"]
    assert "*.bin" not in env["CTXFIT_ALLOW"]["value"].split(",")
    assert "snapshot_download" in init["command"][-1]
    engine_env = {e["name"]: e.get("value") for e in engine["env"]}
    assert engine_env["HF_HUB_OFFLINE"] == "1" and engine_env["HF_HOME"] == "/models"
    assert "HF_TOKEN" not in engine_env
    assert engine["args"][-2:] == ["--revision", "refs/pr/7"]
    assert {"name": "model-cache", "mountPath": "/models"} in engine["volumeMounts"]


def test_host_path_and_describe() -> None:
    spec = kimi(cache={"hostPath": {"path": "/var/lib/models"}})
    pod = render(spec)
    assert pod["volumes"][-1] == {"name": "model-cache", "hostPath": {"path": "/var/lib/models",
                                                                      "type": "DirectoryOrCreate"}}
    cache, _, _ = resolve_cache(kimi(), server="kimi", has_default_storage_class=True, checkpoint=595_000_000_000)
    assert describe_cache(cache).startswith("volumeClaimTemplate: claim kimi-weights of 615Gi")


def test_cache_modes_are_exclusive() -> None:
    with pytest.raises(ValueError, match="exactly one"):
        kimi(cache={"emptyDir": {}, "hostPath": {"path": "/x"}})
    with pytest.raises(ValueError, match="exactly one"):
        kimi(cache={})


@pytest.mark.parametrize("text,kind,permanent", [
    (CASES["gated-new-hub"][0], "ModelAccessDenied", True),
    (CASES["repo-not-found-v1"][0], "ModelNotFound", True),
    (CASES["requests-503"][0], "DownloadInterrupted", False),
], ids=["gated", "not-found", "503"])
def test_diagnose_cli_knows_download_failures(tmp_path: Path, capsys: pytest.CaptureFixture[str], text: str,
                                              kind: str, permanent: bool) -> None:
    from ctxfit.cli import main

    message = tmp_path / "message.txt"
    message.write_text(text, encoding="utf-8")
    code = main(["diagnose", "-f", str(REPO / "manifests" / "kimi-128k.yaml"), "--message-file", str(message),
                 "-o", "json"])
    doc = __import__("json").loads(capsys.readouterr().out)
    assert doc["failure"]["kind"] == kind and doc["permanent"] is permanent
    if not permanent:
        assert code == 0 and doc["next"]["contextLength"] == 131072, "same configuration, no step-down"
