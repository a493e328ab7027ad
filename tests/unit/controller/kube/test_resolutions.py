"""The shared resolutions (``controller/kube/resolution.py``): one resolution per key whoever asks, the real
huggingface_hub client against the local Hub stand-in, backoff while it is down, and the resolver pod: rendered
without the token, run as the kubelet would run it, its termination message read back."""

from __future__ import annotations

import json
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from ctxfit.api import InferenceServerSpec
from ctxfit.controller.converge.resolution import adapter_needs, draft_need, need
from ctxfit.controller.converge.types import ResolutionRequest
from ctxfit.controller.kube.resolution import Resolutions
from ctxfit.controller.kube.resolver_pod import RESOLVER_CONTAINER, resolver_pod
from ctxfit.controller.settings import Settings
from ctxfit.hub.resolver import run as run_resolver
from ctxfit.vocab.modelsource import ModelSource, pack_source, unpack

from tests.hubfixtures.repos import FixtureRepo, RepoFile, fixture_repo
from tests.hubfixtures.server import TOKEN, HubStandIn, hub_env
from tests.unit.controller.fakekube import FakeKube
from tests.unit.controller.kube.fakeapi import FakeApiServer, Request

SETTINGS = Settings(metrics_port=0, health_port=0, resolve_backoff_seconds=5, resolver_image="ctxfit:test")
BODY = {"metadata": {"namespace": "team-a", "name": "qwen", "uid": "uid-qwen"}}


@pytest.fixture()
def hub(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Any:
    stand_in = HubStandIn().start()
    for key, value in hub_env(str(tmp_path)).items():
        monkeypatch.setenv(key, value)
    monkeypatch.setenv("HF_ENDPOINT", stand_in.url)
    yield stand_in
    stand_in.stop()


class Clock:
    def __init__(self) -> None:
        self.now = datetime(2026, 1, 1, tzinfo=UTC)

    def __call__(self) -> datetime:
        return self.now


def spec(repo: str, **model: Any) -> dict[str, Any]:
    return {"model": {"name": repo, **model}, "engine": {"kind": "vllm", "version": "0.19.0"},
            "gpu": {"product": "NVIDIA-H100-80GB-HBM3", "count": 1}}


def wait_for(check: Any, seconds: float = 30) -> None:
    deadline = time.monotonic() + seconds
    while not check():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.05)


def test_two_servers_of_one_repo_resolve_once(hub: HubStandIn) -> None:
    woken: list[tuple[str, str]] = []
    res = Resolutions(None, SETTINGS, woken.append)
    body = spec("Qwen/Qwen2.5-7B")
    wanted = need(InferenceServerSpec.model_validate(body), "team-a")
    for server in (("team-a", "one"), ("team-b", "two")):
        assert res.view(server, body) is not None
        res.request(server, ResolutionRequest(wanted), BODY)
    wait_for(lambda: (v := res.view(("team-a", "one"), body)) is not None and v.source is not None)
    view = res.view(("team-b", "two"), body)
    assert view is not None and view.source is not None and view.source.commit == fixture_repo("Qwen/Qwen2.5-7B").sha
    res.request(("team-c", "three"), ResolutionRequest(wanted), BODY)  # a third server: served from memory
    assert res.hub_requests == 1
    infos = [p for verb, p in hub.requests if p.startswith("/api/models/Qwen/Qwen2.5-7B")]
    assert len(infos) == 1, hub.requests
    assert set(woken) >= {("team-a", "one"), ("team-b", "two")}
    assert hub.weight_bytes_served() < 2 * 2**20  # headers only
    res.close()


def test_a_hub_draft_is_resolved_under_its_own_key_and_shared_with_a_model(hub: HubStandIn) -> None:
    """The draft of a catalog target: the target needs nothing, the draft is read from the Hub stand-in
    once, under the key a server serving that repo as its model would use."""
    res = Resolutions(None, SETTINGS, lambda key: None)
    body = spec("Qwen/Qwen3-8B") | {"speculative": {"method": "draft", "draft": {
        "name": "Qwen/Qwen3-0.6B"}, "numSpeculativeTokens": 4}}
    assert res.view(("team-a", "spec"), body) is None, "a catalog target"
    wanted = draft_need(InferenceServerSpec.model_validate(body), "team-a")
    assert wanted is not None and wanted.key == need(InferenceServerSpec.model_validate(
        spec("Qwen/Qwen3-0.6B")), "team-a").key
    first = res.draft_view(("team-a", "spec"), body)
    assert first is not None and first.source is None and not first.in_flight
    res.request(("team-a", "spec"), ResolutionRequest(wanted), BODY)
    wait_for(lambda: (v := res.draft_view(("team-a", "spec"), body)) is not None and v.source is not None)
    view = res.draft_view(("team-a", "spec"), body)
    assert view is not None and view.source is not None
    assert view.source.commit == fixture_repo("Qwen/Qwen3-0.6B").sha
    as_model = res.view(("team-b", "small"), spec("Qwen/Qwen3-0.6B"))
    assert as_model is not None and as_model.source is view.source
    assert res.hub_requests == 1 and res.draft_view(("team-a", "x"), spec("Qwen/Qwen2.5-7B")) is None
    res.close()


def test_a_hub_adapters_config_is_read_once_from_the_hub(hub: HubStandIn) -> None:
    """A LoRA adapter without a rank: its adapter_config.json is read with the real huggingface_hub client
    from the stand-in (the file only, never the adapter's weights), under the key ("adapter", repo, revision)."""
    config = {"peft_type": "LORA", "r": 32, "lora_alpha": 64, "base_model_name_or_path": "Qwen/Qwen3-8B",
              "target_modules": ["q_proj", "k_proj", "v_proj", "o_proj"], "task_type": "CAUSAL_LM"}
    hub.extra["acme/qwen3-8b-sql-lora"] = FixtureRepo(
        "acme/qwen3-8b-sql-lora", {}, [], 1, False, "adapter", {}, "c" * 40,
        {"adapter_config.json": RepoFile("adapter_config.json", json.dumps(config).encode()),
         "adapter_model.safetensors": RepoFile("adapter_model.safetensors", header=b"{}", data_bytes=64 << 20)})
    res = Resolutions(None, SETTINGS, lambda key: None)
    body = spec("Qwen/Qwen3-8B") | {"lora": {"adapters": [
        {"name": "sql", "source": "acme/qwen3-8b-sql-lora"}, {"name": "given", "source": "acme/other", "rank": 8}]}}
    needs = adapter_needs(InferenceServerSpec.model_validate(body), "team-a")
    assert [(name, wanted.key) for name, wanted in needs] == [("sql", ("adapter", "acme/qwen3-8b-sql-lora", "main"))]
    res.request(("team-a", "lora"), ResolutionRequest(needs[0][1]), BODY)
    wait_for(lambda: all(v.source is not None or v.error for v in res.adapter_views(("team-a", "lora"), body)))
    (view,) = res.adapter_views(("team-a", "lora"), body)
    assert view.error is None and view.source is not None, view.detail
    assert view.source.config == config and view.source.commit == "c" * 40 and view.source.checkpoint is None
    assert hub.weight_bytes_served() < 2**20, "the adapter's weights are not read"
    res.close()


def test_hub_down_backs_off_then_resolves(hub: HubStandIn) -> None:
    clock = Clock()
    res = Resolutions(None, SETTINGS, lambda key: None, clock=clock)
    body = spec("Qwen/Qwen3-4B")
    wanted = need(InferenceServerSpec.model_validate(body), "team-a")
    hub.down = True
    res.request(("team-a", "q"), ResolutionRequest(wanted), BODY)
    wait_for(lambda: (v := res.view(("team-a", "q"), body)) is not None and v.error is not None)
    view = res.view(("team-a", "q"), body)
    assert view is not None and view.error == "HubUnreachable" and "503" in view.detail
    assert view.retry_at == clock.now + timedelta(seconds=5)
    res.request(("team-a", "q"), ResolutionRequest(wanted), BODY)  # not due: nothing is sent
    time.sleep(0.2)
    assert res.hub_requests == 1
    hub.down = False
    clock.now += timedelta(seconds=6)
    res.request(("team-a", "q"), ResolutionRequest(wanted), BODY)
    wait_for(lambda: (v := res.view(("team-a", "q"), body)) is not None and v.source is not None)
    assert res.hub_requests == 2
    res.close()


def test_permanent_errors_stay_until_the_spec_changes(hub: HubStandIn) -> None:
    res = Resolutions(None, SETTINGS, lambda key: None)
    body = spec("acme/no-such-model")
    wanted = need(InferenceServerSpec.model_validate(body), "team-a")
    res.request(("team-a", "q"), ResolutionRequest(wanted), BODY)
    wait_for(lambda: (v := res.view(("team-a", "q"), body)) is not None and v.error is not None)
    res.request(("team-a", "q"), ResolutionRequest(wanted), BODY)
    time.sleep(0.2)
    assert res.hub_requests == 1
    res.request(("team-a", "q"), ResolutionRequest(wanted, forget_error=True), BODY)
    wait_for(lambda: res.hub_requests == 2)
    res.close()


def _kubelet_env(pod: dict[str, Any], secrets: dict[tuple[str, str], str]) -> dict[str, str]:
    """The resolver container's environment as the kubelet builds it (secretKeyRef from the Secret)."""
    out = {}
    for item in pod["spec"]["containers"][0]["env"]:
        if "value" in item:
            out[item["name"]] = item["value"]
        else:
            ref = item["valueFrom"]["secretKeyRef"]
            out[item["name"]] = secrets[(ref["name"], ref["key"])]
    return out


def test_resolver_pod_carries_no_token_and_reports_through_its_termination_message(hub: HubStandIn,
                                                                                  tmp_path: Path) -> None:
    body = spec("meta-llama/Llama-3.2-3B", tokenSecretRef={"name": "hf", "key": "token"})
    wanted = need(InferenceServerSpec.model_validate(body), "team-a")
    assert wanted.kind == "token"
    pod = resolver_pod(wanted, "llama", "team-a", "uid-llama", SETTINGS)
    text = json.dumps(pod)
    assert TOKEN not in text and "secretKeyRef" in text
    assert pod["metadata"]["ownerReferences"][0]["uid"] == "uid-llama"
    container = pod["spec"]["containers"][0]
    assert container["image"] == "ctxfit:test" and container["command"] == ["python", "-m", "ctxfit.hub.resolver"]
    assert pod["spec"]["restartPolicy"] == "Never" and pod["spec"]["automountServiceAccountToken"] is False
    env = _kubelet_env(pod, {("hf", "token"): TOKEN}) | {"HF_HOME": str(tmp_path / "hf"),
                                                          "CTXFIT_CACHE": str(tmp_path / "c")}
    code, message = run_resolver(env)
    assert code == 0
    found = unpack(message)
    assert isinstance(found, ModelSource) and found.commit == fixture_repo("meta-llama/Llama-3.2-3B").sha
    assert found.checkpoint == fixture_repo("meta-llama/Llama-3.2-3B").checkpoint()
    denied, denial = run_resolver(env | {"HF_TOKEN": "hf_wrong"})
    assert denied == 1 and unpack(denial)[0] == "ModelAccessDenied"  # type: ignore[index]


def test_resolver_pod_for_a_preloaded_claim_reads_the_mounted_checkout(tmp_path: Path) -> None:
    body = spec("/models/qwen3-8b", cache={"persistentVolumeClaim": {"claimName": "weights", "subPath": "m",
                                                                      "readOnly": True}})
    wanted = need(InferenceServerSpec.model_validate(body), "team-a")
    pod = resolver_pod(wanted, "q", "team-a", "uid-q", SETTINGS)
    mount = pod["spec"]["containers"][0]["volumeMounts"][-1]
    assert mount == {"name": "model-cache", "mountPath": "/models", "readOnly": True, "subPath": "m"}
    assert pod["spec"]["volumes"][-1]["persistentVolumeClaim"] == {"claimName": "weights", "readOnly": True}
    checkout = tmp_path / "qwen3-8b"  # the volume as mounted: a checkout with sparse shards
    checkout.mkdir()
    for name, f in fixture_repo("Qwen/Qwen3-8B").files.items():
        path = checkout / name
        if f.header:
            with path.open("wb") as out:
                out.write(f.header)
                out.truncate(f.size)
        else:
            path.write_bytes(f.content)
    env = _kubelet_env(pod, {}) | {"CTXFIT_RESOLVE_DIR": str(checkout), "CTXFIT_CACHE": str(tmp_path / "c")}
    code, message = run_resolver(env)
    found = unpack(message)
    assert code == 0 and isinstance(found, ModelSource) and found.origin == "volume"
    assert found.checkpoint is not None
    assert found.checkpoint.tensor_bytes == fixture_repo("Qwen/Qwen3-8B").checkpoint().tensor_bytes


def pending(api: FakeApiServer, request: Request) -> None:
    """A created pod is Pending (no kubelet runs it)."""
    if request.method == "POST" and request.status == 201 and request.key[1] == "pods":
        api.objects[request.key]["status"] = {"phase": "Pending"}


def pods_kube() -> FakeKube:
    """A ``FakeKube`` whose API server keeps the resolver's pods (a uid each, DELETE preconditions)."""
    return FakeKube(None, api=FakeApiServer(after_write=pending))


def pods(kube: FakeKube) -> dict[tuple[str, str], dict[str, Any]]:
    """The stored pods by (namespace, name): a test's change to one is what the next read sees."""
    return {(k[2], k[3]): o for k, o in list(kube.api.objects.items()) if k[1] == "pods"}


def add(kube: FakeKube, namespace: str, pod: dict[str, Any]) -> dict[str, Any]:
    """Store a pod as the API server does (a fresh metadata.uid) and return it."""
    pod = json.loads(json.dumps(pod)) | {"status": {"phase": "Pending"}}
    for key in ("uid", "resourceVersion"):
        pod["metadata"].pop(key, None)
    return kube.api.put("", "pods", namespace, pod)


def deletes(kube: FakeKube) -> list[Request]:
    return [r for r in list(kube.api.log) if r.method == "DELETE" and r.key[1] == "pods"]


def deleted(kube: FakeKube) -> list[str]:
    """The pods deleted, in order."""
    return [r.key[3] for r in deletes(kube) if r.status == 200]


def preconditions(kube: FakeKube) -> list[str | None]:
    """The uid precondition of every pod DELETE sent."""
    return [((r.body or {}).get("preconditions") or {}).get("uid") for r in deletes(kube)]


def test_resolver_pod_is_created_once_read_back_and_deleted(hub: HubStandIn, tmp_path: Path) -> None:
    kube = pods_kube()
    res = Resolutions(kube, SETTINGS, lambda key: None)
    body = spec("meta-llama/Llama-3.2-3B", tokenSecretRef={"name": "hf", "key": "token"})
    wanted = need(InferenceServerSpec.model_validate(body), "team-a")
    server = {"metadata": {"namespace": "team-a", "name": "llama", "uid": "uid-llama"}}
    res.request(("team-a", "llama"), ResolutionRequest(wanted), server)
    res.request(("team-a", "llama"), ResolutionRequest(wanted), server)
    assert len(pods(kube)) == 1
    (_namespace, name), pod = next(iter(pods(kube).items()))
    view = res.view(("team-a", "llama"), body)
    assert view is not None and view.in_flight and view.pod is not None and "Pending" in view.pod
    env = _kubelet_env(pod, {("hf", "token"): TOKEN}) | {"HF_HOME": str(tmp_path / "hf"),
                                                          "CTXFIT_CACHE": str(tmp_path / "c")}
    code, message = run_resolver(env)  # what kwok does not: run the container
    pod["status"] = {"phase": "Succeeded", "containerStatuses": [{"name": RESOLVER_CONTAINER, "state": {
        "terminated": {"exitCode": code, "message": message}}}]}
    view = res.view(("team-a", "llama"), body)
    assert view is not None and view.source is not None and not view.in_flight
    assert deleted(kube) == [name] and not pods(kube)
    res.close()


def test_a_pod_of_that_name_not_owned_by_the_server_is_never_touched(hub: HubStandIn) -> None:
    """Ownership by uid (``guarded``): a pod of the resolver's name with a reference to another uid (an earlier
    server of this name), or with none, is foreign: the key fails ``ForeignObject`` (asked again with backoff),
    and the pod is neither deleted nor read for a result."""
    for owner in ("someone-else", None):
        kube = pods_kube()
        clock = Clock()
        res = Resolutions(kube, SETTINGS, lambda key: None, clock=clock)
        body = spec("meta-llama/Llama-3.2-3B", tokenSecretRef={"name": "hf", "key": "token"})
        wanted = need(InferenceServerSpec.model_validate(body), "team-a")
        squatter = resolver_pod(wanted, "llama", "team-a", owner or "x", SETTINGS)
        if owner is None:
            del squatter["metadata"]["ownerReferences"]  # the labels alone say ctxfit: never ownership
        add(kube, "team-a", squatter)
        res.request(("team-a", "llama"), ResolutionRequest(wanted),
                    {"metadata": {"namespace": "team-a", "name": "llama", "uid": "uid-llama"}})
        view = res.view(("team-a", "llama"), body)
        assert view is not None and view.error == "ForeignObject" and "not owned by this InferenceServer" in \
            view.detail
        assert view.retry_at == clock.now + timedelta(seconds=5)
        assert not deleted(kube) and len(pods(kube)) == 1
        res.close()


def test_a_pod_swapped_in_under_the_resolvers_name_is_not_believed_nor_deleted(hub: HubStandIn) -> None:
    """After the operator created its resolver pod, someone replaces it with a pod of the same name that carries a
    forged result: its termination message is never read as the resolution, and it is not deleted."""
    kube = pods_kube()
    res = Resolutions(kube, SETTINGS, lambda key: None)
    body = spec("meta-llama/Llama-3.2-3B", tokenSecretRef={"name": "hf", "key": "token"})
    wanted = need(InferenceServerSpec.model_validate(body), "team-a")
    server = {"metadata": {"namespace": "team-a", "name": "llama", "uid": "uid-llama"}}
    res.request(("team-a", "llama"), ResolutionRequest(wanted), server)
    (namespace, name), ours = next(iter(pods(kube).items()))
    forged_result = pack_source(ModelSource({"architectures": ["LlamaForCausalLM"]}, None, "hub", "x"))
    impostor = json.loads(json.dumps(ours))
    impostor["metadata"].pop("ownerReferences")
    kube.api.objects.pop(("", "pods", namespace, name))
    stored = add(kube, namespace, impostor)
    stored["status"] = {"phase": "Succeeded", "containerStatuses": [{"name": RESOLVER_CONTAINER, "state": {
        "terminated": {"exitCode": 0, "message": forged_result}}}]}
    view = res.view(("team-a", "llama"), body)
    assert view is not None and view.source is None and view.error == "ForeignObject"
    assert not deleted(kube) and (namespace, name) in pods(kube)
    res.close()


def test_the_resolver_pod_is_deleted_with_its_uid_as_precondition(hub: HubStandIn, tmp_path: Path) -> None:
    kube = pods_kube()
    res = Resolutions(kube, SETTINGS, lambda key: None)
    body = spec("meta-llama/Llama-3.2-3B", tokenSecretRef={"name": "hf", "key": "token"})
    wanted = need(InferenceServerSpec.model_validate(body), "team-a")
    res.request(("team-a", "llama"), ResolutionRequest(wanted),
                {"metadata": {"namespace": "team-a", "name": "llama", "uid": "uid-llama"}})
    (_, name), pod = next(iter(pods(kube).items()))
    env = _kubelet_env(pod, {("hf", "token"): TOKEN}) | {"HF_HOME": str(tmp_path / "hf"),
                                                          "CTXFIT_CACHE": str(tmp_path / "c")}
    code, message = run_resolver(env)
    pod["status"] = {"phase": "Succeeded", "containerStatuses": [{"name": RESOLVER_CONTAINER, "state": {
        "terminated": {"exitCode": code, "message": message}}}]}
    view = res.view(("team-a", "llama"), body)
    assert view is not None and view.source is not None
    assert deleted(kube) == [name] and preconditions(kube) == [pod["metadata"]["uid"]]
    res.close()


def test_a_timed_out_resolver_pod_replaced_by_a_foreign_one_is_not_deleted(hub: HubStandIn) -> None:
    kube = pods_kube()
    clock = Clock()
    res = Resolutions(kube, SETTINGS, lambda key: None, clock=clock)
    body = spec("meta-llama/Llama-3.2-3B", tokenSecretRef={"name": "hf", "key": "token"})
    wanted = need(InferenceServerSpec.model_validate(body), "team-a")
    res.request(("team-a", "llama"), ResolutionRequest(wanted),
                {"metadata": {"namespace": "team-a", "name": "llama", "uid": "uid-llama"}})
    (namespace, name), ours = next(iter(pods(kube).items()))
    clock.now += timedelta(seconds=SETTINGS.resolve_timeout_seconds + 61)
    res.view(("team-a", "llama"), body)  # ours is Pending: the run timed out, the pod is deleted (guarded)
    wait_for(lambda: deleted(kube) == [name])
    assert preconditions(kube) == [ours["metadata"]["uid"]]
    res.request(("team-a", "llama"), ResolutionRequest(wanted),  # not due yet (backoff): nothing is created
                {"metadata": {"namespace": "team-a", "name": "llama", "uid": "uid-llama"}})
    foreign = json.loads(json.dumps(ours))
    foreign["metadata"]["ownerReferences"][0]["uid"] = "an-earlier-llama"
    add(kube, namespace, foreign)
    clock.now += timedelta(seconds=6)
    res.request(("team-a", "llama"), ResolutionRequest(wanted),
                {"metadata": {"namespace": "team-a", "name": "llama", "uid": "uid-llama"}})
    view = res.view(("team-a", "llama"), body)
    assert view is not None and view.error == "ForeignObject"
    assert deleted(kube) == [name] and (namespace, name) in pods(kube)
    res.close()


def test_resolver_reads_a_preloaded_hugging_face_cache_offline(tmp_path: Path) -> None:
    """A read-only claim holding the Hugging Face cache (what the download container leaves under HF_HOME) and a
    repo id as the name: the resolver reads the cached snapshot, no network."""
    repo = fixture_repo("Qwen/Qwen3-8B")
    body = spec("Qwen/Qwen3-8B", revision="main",
                cache={"persistentVolumeClaim": {"claimName": "weights", "readOnly": True}})
    body["model"]["name"] = "acme/qwen3-8b-copy"  # in no catalog (a catalog model plans from the catalog)
    wanted = need(InferenceServerSpec.model_validate(body), "team-a")
    assert wanted.kind == "volume"
    pod = resolver_pod(wanted, "q", "team-a", "uid-q", SETTINGS)
    env = _kubelet_env(pod, {})
    assert env["HF_HUB_OFFLINE"] == "1" and env["HF_HOME"] == "/models"
    hf_home = tmp_path / "models"  # /models of the pod
    snapshot = hf_home / "hub" / "models--acme--qwen3-8b-copy" / "snapshots" / repo.sha
    snapshot.mkdir(parents=True)
    (snapshot.parents[1] / "refs").mkdir()
    (snapshot.parents[1] / "refs" / "main").write_text(repo.sha)
    for name, f in repo.files.items():
        path = snapshot / name
        if f.header:
            with path.open("wb") as out:
                out.write(f.header)
                out.truncate(f.size)
        else:
            path.write_bytes(f.content)
    code, message = run_resolver(env | {"HF_HOME": str(hf_home), "CTXFIT_CACHE": str(tmp_path / "c")})
    found = unpack(message)
    assert code == 0, found
    assert isinstance(found, ModelSource) and found.origin == "volume" and found.commit == repo.sha
    assert found.checkpoint == repo.checkpoint()


def test_resolver_pods_can_be_pinned_to_a_pool() -> None:
    settings = Settings(metrics_port=0, health_port=0, resolver_node_selector="pool=cpu,zone=a",
                        resolver_tolerations="dedicated=cpu:NoSchedule,spot")
    wanted = need(InferenceServerSpec.model_validate(spec("acme/x", tokenSecretRef={"name": "hf"})), "ns")
    pod = resolver_pod(wanted, "x", "ns", "uid", settings)
    assert pod["spec"]["nodeSelector"] == {"pool": "cpu", "zone": "a"}
    assert pod["spec"]["tolerations"] == [{"key": "dedicated", "operator": "Equal", "value": "cpu",
                                           "effect": "NoSchedule"}, {"key": "spot", "operator": "Exists"}]
    assert pod["spec"]["containers"][0]["imagePullPolicy"] == "IfNotPresent"


def test_no_resolver_image_is_a_clear_failure_not_a_stuck_pod() -> None:
    kube = pods_kube()
    res = Resolutions(kube, Settings(metrics_port=0, health_port=0), lambda key: None)
    body = spec("acme/x", tokenSecretRef={"name": "hf"})
    wanted = need(InferenceServerSpec.model_validate(body), "ns")
    res.request(("ns", "x"), ResolutionRequest(wanted), {"metadata": {"namespace": "ns", "name": "x", "uid": "u"}})
    view = res.view(("ns", "x"), body)
    assert view is not None and view.error == "ResolverNotConfigured" and "CTXFIT_RESOLVER_IMAGE" in view.detail
    assert not pods(kube)
    res.close()


def test_a_gated_draft_is_read_with_the_models_token(hub: HubStandIn, tmp_path: Path) -> None:
    """A draft on a gated repo (Llama-3.2-3B for a Llama-3.1-8B target) of a server with ``model.tokenSecretRef``:
    the resolver pod with that Secret, under the key a gated model of that repo has; never the operator's own
    tokenless read (which the Hub refuses)."""
    token = {"name": "hf", "key": "token"}
    body = spec("meta-llama/Llama-3.1-8B-Instruct", tokenSecretRef=token) | {"speculative": {
        "method": "draft", "draft": {"name": "meta-llama/Llama-3.2-3B"}, "numSpeculativeTokens": 4}}
    wanted = draft_need(InferenceServerSpec.model_validate(body), "team-a")
    assert wanted is not None and wanted.kind == "token" and wanted.secret == ("hf", "token")
    assert wanted.key == need(InferenceServerSpec.model_validate(spec("meta-llama/Llama-3.2-3B", tokenSecretRef=token)),
                              "team-a").key
    pod = resolver_pod(wanted, "llama", "team-a", "uid-llama", SETTINGS)
    assert TOKEN not in json.dumps(pod) and "CTXFIT_RESOLVE_ADAPTER" not in json.dumps(pod)
    env = _kubelet_env(pod, {("hf", "token"): TOKEN}) | {"HF_HOME": str(tmp_path / "hf"),
                                                          "CTXFIT_CACHE": str(tmp_path / "c")}
    code, message = run_resolver(env)
    found = unpack(message)
    assert code == 0 and isinstance(found, ModelSource), message
    assert found.commit == fixture_repo("meta-llama/Llama-3.2-3B").sha and found.checkpoint is not None
    plain = body | {"model": {"name": "meta-llama/Llama-3.1-8B-Instruct"}}  # no token: the operator reads it itself
    tokenless = draft_need(InferenceServerSpec.model_validate(plain), "team-a")
    assert tokenless is not None and tokenless.kind == "hub"
    res = Resolutions(None, SETTINGS, lambda key: None)
    res.request(("team-a", "llama"), ResolutionRequest(tokenless), BODY)
    wait_for(lambda: (v := res.draft_view(("team-a", "llama"), plain)) is not None and v.error is not None)
    view = res.draft_view(("team-a", "llama"), plain)
    assert view is not None and view.error == "ModelAccessDenied", "a gated draft without the token is refused"
    res.close()


def test_a_gated_adapters_config_is_read_with_the_models_token(hub: HubStandIn, tmp_path: Path) -> None:
    """A LoRA adapter on a gated repo: the resolver pod reads its adapter_config.json (``CTXFIT_RESOLVE_ADAPTER``) with
    the server's token Secret, keyed by namespace and Secret; without the token the stand-in denies it."""
    config = {"peft_type": "LORA", "r": 16, "lora_alpha": 32, "base_model_name_or_path": "Qwen/Qwen3-8B",
              "target_modules": ["q_proj", "v_proj"], "task_type": "CAUSAL_LM"}
    hub.extra["acme/gated-lora"] = FixtureRepo(
        "acme/gated-lora", {}, [], 1, True, "adapter", {}, "e" * 40,
        {"adapter_config.json": RepoFile("adapter_config.json", json.dumps(config).encode()),
         "adapter_model.safetensors": RepoFile("adapter_model.safetensors", header=b"{}", data_bytes=32 << 20)})
    body = spec("Qwen/Qwen3-8B", tokenSecretRef={"name": "hf", "key": "token"}) | {"lora": {"adapters": [
        {"name": "sql", "source": "acme/gated-lora"}]}}
    ((name, wanted),) = adapter_needs(InferenceServerSpec.model_validate(body), "team-a")
    assert name == "sql" and wanted.kind == "token"
    assert wanted.key == ("adapter-token", "team-a", "hf", "token", "acme/gated-lora", "main")
    pod = resolver_pod(wanted, "qwen", "team-a", "uid-qwen", SETTINGS)
    env = _kubelet_env(pod, {("hf", "token"): TOKEN}) | {"HF_HOME": str(tmp_path / "hf"),
                                                          "CTXFIT_CACHE": str(tmp_path / "c")}
    assert env["CTXFIT_RESOLVE_ADAPTER"] == "1" and TOKEN not in json.dumps(pod)
    code, message = run_resolver(env)
    found = unpack(message)
    assert code == 0 and isinstance(found, ModelSource), message
    assert found.config == config and found.commit == "e" * 40 and found.checkpoint is None
    denied, denial = run_resolver({k: v for k, v in env.items() if k != "HF_TOKEN"})
    assert denied == 1 and unpack(denial)[0] == "ModelAccessDenied"  # type: ignore[index]
    assert hub.weight_bytes_served() < 2**20, "the adapter's weights are not read"
