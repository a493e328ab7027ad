"""Model resolution in the operator against the real local control plane and the local Hub stand-in.

What is real: the kube-apiserver, scheduler and controller-manager (the claim really binds to a hostPath volume),
the operator process, the real huggingface_hub client in it talking to the Hub stand-in (tests/hubfixtures) through
HF_ENDPOINT, the fixture repos (real config.json files). What kwok cannot do is run a container: the resolver pod
the operator creates (gated repositories, preloaded claims) is run by the test as the kubelet would run it - its
own environment from its pod spec, the Secret's value resolved from its secretKeyRef, the claim's directory
where its volumeMount puts it - with the same entrypoint (``python -m ctxfit.hub.resolver``), and the test writes
the container's termination message and phase back to the pod's status, as the kubelet does.
"""

from __future__ import annotations

import base64
import contextlib
import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kubernetes.client.rest import ApiException

from tests.hubfixtures.broken import broken_repos
from tests.hubfixtures.repos import FixtureRepo, RepoFile, fixture_repo
from tests.hubfixtures.server import TOKEN, HubStandIn

from .operator_kit import REPO, OperatorProcess, ServerClient, condition
from .resolution_kit import assert_resolved, engine_command, info_requests, server


@pytest.fixture
def hub() -> Iterator[HubStandIn]:
    stand_in = HubStandIn(extra=broken_repos()).start()  # tests/hubfixtures/broken.py besides the fixtures
    yield stand_in
    stand_in.stop()


@pytest.fixture
def resolving_op(cluster: Any, crd: Path, namespace: str, tmp_path: Path, hub: HubStandIn) -> Iterator[OperatorProcess]:
    """The operator for this namespace, its Hub the stand-in (HF_ENDPOINT), quick retries."""
    operator = OperatorProcess(Path(cluster.kubeconfig), namespace, tmp_path / "operator.log", HF_ENDPOINT=hub.url,
                               HF_HOME=str(tmp_path / "hf"), CTXFIT_CACHE=str(tmp_path / "ctxfit"),
                               CTXFIT_RESOLVER_IMAGE="ctxfit-operator:e2e", CTXFIT_RESOLVE_BACKOFF_SECONDS="1",
                               CTXFIT_RESOLVE_BACKOFF_MAX_SECONDS="2", CTXFIT_RESOLVE_POLL_SECONDS="0.5").start()
    yield operator
    operator.stop()
    log = operator.log_path.read_text()
    print(f"--- operator log ({operator.log_path}) ---\n{log[-6000:]}")
    assert TOKEN not in log


def test_models_in_no_catalog_reach_ready_and_two_servers_of_one_repo_resolve_once(
        api: ServerClient, resolving_op: OperatorProcess, hub: HubStandIn) -> None:
    repo = "Qwen/Qwen2.5-7B"
    api.create(server("qwen-a", repo))
    api.create(server("qwen-b", repo))
    first = assert_resolved(api, "qwen-a", repo)
    assert_resolved(api, "qwen-b", repo)
    assert any("resolved from hub" in r for r in first["status"]["plan"]["reasons"])
    assert info_requests(hub, repo) == 1, hub.requests
    assert hub.weight_bytes_served() < 2 * 2**20  # safetensors headers, never tensor data
    served = len(hub.requests)
    resolving_op.settle(6)  # ordinary reconciles (resync 5 s) ask the Hub nothing
    assert len(hub.requests) == served


def test_hub_down_at_create_is_waiting_then_ready_once_it_returns(
        api: ServerClient, resolving_op: OperatorProcess, hub: HubStandIn) -> None:
    hub.down = True
    api.create(server("qwen", "Qwen/Qwen3-4B"))
    waiting = api.wait(lambda: (s := api.get("qwen")) and condition(s, "ModelResolved")["reason"] == "HubUnreachable"
                       and s, "ModelResolved=HubUnreachable")
    assert waiting["status"]["phase"] == "Planning"
    assert not waiting["status"].get("attempts") and api.deployment("qwen", missing_ok=True) is None
    resolving_op.settle(3)  # retried with backoff, still waiting, still nothing started
    still = api.get("qwen")
    assert still["status"]["phase"] == "Planning" and not still["status"].get("attempts")
    assert info_requests(hub, "Qwen/Qwen3-4B") >= 2
    hub.down = False
    assert_resolved(api, "qwen", "Qwen/Qwen3-4B")


def test_a_draft_in_no_catalog_is_resolved_from_the_hub_and_served(
        api: ServerClient, resolving_op: OperatorProcess, hub: HubStandIn) -> None:
    """A catalog target with a draft model in no catalog: the operator reads the draft's config.json and
    safetensors headers from the Hub (once), budgets its weights and KV, records status.model.draft, and renders it."""
    draft = "Qwen/Qwen3-0.6B"
    obj = server("llama-draft", "Qwen/Qwen3-8B")
    obj["spec"]["speculative"] = {"method": "draft", "draft": {"name": draft}, "numSpeculativeTokens": 4}
    api.create(obj)
    ready = api.wait_phase("llama-draft", "Ready", timeout=90)
    recorded = ready["status"]["model"]["draft"]
    assert (recorded["source"], recorded["repo"], recorded["sha"]) == ("hub", draft, fixture_repo(draft).sha)
    assert recorded["architecture"]["numLayers"] == fixture_repo(draft).config["num_hidden_layers"]
    extras = {e["term"]: e for e in ready["status"]["plan"]["perGPU"]["extras"]}
    assert extras["draft weights"]["bytes"] == recorded["weightsPerGPUBytes"] > 0
    assert "resolved" in condition(ready, "ModelResolved")["message"]
    args = " ".join(engine_command(api, "llama-draft"))
    assert '"method":"draft_model"' in args and '"model":"/models/ctxfit-draft"' in args, args
    assert info_requests(hub, draft) == 1, hub.requests
    assert hub.weight_bytes_served() < 2 * 2**20


def test_a_hub_adapter_without_a_rank_is_sized_from_its_adapter_config(
        api: ServerClient, resolving_op: OperatorProcess, hub: HubStandIn) -> None:
    """A LoRA adapter given by its Hub repo only: the operator reads its adapter_config.json (not its
    weights) from the Hub, renders --max-lora-rank from its r, and records it in status.model.adapters."""
    config = {"peft_type": "LORA", "r": 32, "lora_alpha": 64, "base_model_name_or_path": "Qwen/Qwen3-8B",
              "target_modules": ["q_proj", "k_proj", "v_proj", "o_proj"], "task_type": "CAUSAL_LM"}
    hub.extra["acme/qwen3-8b-sql-lora"] = FixtureRepo(
        "acme/qwen3-8b-sql-lora", {}, [], 1, False, "adapter", {}, "e" * 40,
        {"adapter_config.json": RepoFile("adapter_config.json", json.dumps(config).encode()),
         "adapter_model.safetensors": RepoFile("adapter_model.safetensors", header=b"{}", data_bytes=64 << 20)})
    obj = server("qwen-lora", "Qwen/Qwen3-8B")
    obj["spec"]["lora"] = {"adapters": [{"name": "sql", "source": "acme/qwen3-8b-sql-lora"}], "maxLoras": 2}
    api.create(obj)
    ready = api.wait_phase("qwen-lora", "Ready", timeout=90)
    (read,) = ready["status"]["model"]["adapters"]
    assert (read["name"], read["rank"], read["sha"]) == ("sql", 32, "e" * 40)
    assert ready["status"]["effective"]["maxLoraRank"] == 32
    args = engine_command(api, "qwen-lora")
    assert args[args.index("--max-lora-rank") + 1] == "32" and "sql=/models/ctxfit-adapters/sql" in args
    assert hub.weight_bytes_served() < 2 * 2**20


def run_as_kubelet(api: ServerClient, pod: dict[str, Any], tmp_path: Path, mounts: dict[str, Path]) -> None:
    """Run the resolver pod's container as the kubelet would (see the module docstring), then write its
    termination message and phase into the pod's status."""
    container = pod["spec"]["containers"][0]
    env = {"PATH": os.environ["PATH"], "PYTHONPATH": os.environ.get("PYTHONPATH", "")}
    for item in container.get("env") or []:
        if "value" in item:
            env[item["name"]] = item["value"]
        else:
            ref = item["valueFrom"]["secretKeyRef"]
            secret = api.core.read_namespaced_secret(ref["name"], api.namespace)
            env[item["name"]] = base64.b64decode(secret.data[ref["key"]]).decode()
    for key, value in list(env.items()):  # paths inside the container -> where its volumes are on this machine
        for inside, outside in mounts.items():
            if value == inside or value.startswith(inside + "/"):
                env[key] = str(outside) + value[len(inside):]
    env["CTXFIT_TERMINATION_LOG"] = str(tmp_path / "termination-log")
    assert container["command"] == ["python", "-m", "ctxfit.hub.resolver"]
    proc = subprocess.run([sys.executable, "-m", "ctxfit.hub.resolver"], env=env, cwd=REPO, capture_output=True,
                          text=True, timeout=120)
    message = (tmp_path / "termination-log").read_text()
    phase = "Succeeded" if proc.returncode == 0 else "Failed"
    api.core.patch_namespaced_pod_status(pod["metadata"]["name"], api.namespace, {"status": {
        "phase": phase, "containerStatuses": [{
            "name": container["name"], "image": container["image"], "imageID": "", "ready": False,
            "restartCount": 0, "started": False,
            "state": {"terminated": {"exitCode": proc.returncode, "reason": "Completed" if phase == "Succeeded"
                                     else "Error", "message": message}}}]}})


def resolver_pod(api: ServerClient, server_name: str) -> dict[str, Any]:
    def find() -> dict[str, Any] | None:
        items = api.core.list_namespaced_pod(api.namespace, label_selector=f"ctxfit.io/resolver={server_name}").items
        pods = [api.core.api_client.sanitize_for_serialization(p) for p in items if not p.metadata.deletion_timestamp]
        return pods[0] if pods else None
    pod: dict[str, Any] = api.wait(find, f"the resolver pod of {server_name}")
    return pod


def test_gated_repo_without_a_token_is_access_denied_with_a_token_secret_it_resolves(
        api: ServerClient, resolving_op: OperatorProcess, hub: HubStandIn, tmp_path: Path) -> None:
    repo = "meta-llama/Llama-3.2-3B"  # gated, in no catalog
    api.create(server("llama-denied", repo))
    denied = api.wait_phase("llama-denied", "Failed")
    cond = condition(denied, "ModelResolved")
    assert (cond["status"], cond["reason"]) == ("False", "ModelAccessDenied")
    assert "tokenSecretRef" in cond["message"] and api.deployment("llama-denied", missing_ok=True) is None
    assert "ModelAccessDenied" in [e["reason"] for e in api.events("llama-denied")]

    api.core.create_namespaced_secret(api.namespace, {"metadata": {"name": "hf"}, "stringData": {"token": TOKEN}})
    api.create(server("llama", repo, tokenSecretRef={"name": "hf", "key": "token"}))
    pod = resolver_pod(api, "llama")
    owner = pod["metadata"]["ownerReferences"][0]
    assert (owner["kind"], owner["name"], owner["uid"]) == ("InferenceServer", "llama", api.get("llama")["metadata"][
        "uid"])
    env = pod["spec"]["containers"][0]["env"]
    assert {"name": "HF_TOKEN", "valueFrom": {"secretKeyRef": {"name": "hf", "key": "token"}}} in env
    assert TOKEN not in str(pod)
    planning = api.get("llama")
    assert planning["status"]["phase"] == "Planning" and condition(planning, "ModelResolved")["reason"] == "Resolving"
    run_as_kubelet(api, pod, tmp_path, {})
    assert_resolved(api, "llama", repo)
    api.wait(lambda: not api.core.list_namespaced_pod(api.namespace, label_selector="ctxfit.io/resolver=llama").items,
             "the resolver pod deleted")


def test_a_preloaded_claim_is_resolved_from_the_volume(
        api: ServerClient, resolving_op: OperatorProcess, hub: HubStandIn, tmp_path: Path) -> None:
    api.core.create_namespaced_persistent_volume_claim(api.namespace, {
        "metadata": {"name": "weights"},
        "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "20Gi"}}}})
    claim = api.wait(lambda: (c := api.core.read_namespaced_persistent_volume_claim("weights", api.namespace))
                     and c.status.phase == "Bound" and c, "the claim bound")
    volume = api.core.read_persistent_volume(claim.spec.volume_name)
    root = Path(volume.spec.host_path.path)  # the volume's directory on this machine (hostPath provisioner)
    checkout = root / "preloaded" / "qwen3-8b"
    checkout.mkdir(parents=True, exist_ok=True)
    for name, f in fixture_repo("Qwen/Qwen3-8B").files.items():  # a checkout as `hf download --local-dir` leaves it
        path = checkout / name
        if f.header:
            with path.open("wb") as out:
                out.write(f.header)
                out.truncate(f.size)  # sparse: the tensor data is never written, never read
        else:
            path.write_bytes(f.content)
    before = len(hub.requests)
    api.create(server("preloaded", "/models/qwen3-8b", cache={"persistentVolumeClaim": {
        "claimName": "weights", "subPath": "preloaded", "readOnly": True}}))
    pod = resolver_pod(api, "preloaded")
    mount = pod["spec"]["containers"][0]["volumeMounts"][-1]
    assert (mount["mountPath"], mount["subPath"], mount["readOnly"]) == ("/models", "preloaded", True)
    run_as_kubelet(api, pod, tmp_path, {"/models": root / mount["subPath"]})
    ready = api.wait_phase("preloaded", "Ready", timeout=90)
    resolved = ready["status"]["model"]["resolved"]
    assert resolved["source"] == "volume" and resolved["repo"] == "/models/qwen3-8b"
    assert resolved["checkpointBytes"] == fixture_repo("Qwen/Qwen3-8B").checkpoint().checkpoint_bytes
    assert resolved["weightsPerGPUBytes"] == ready["status"]["plan"]["perGPU"]["weightsBytes"]
    assert len(hub.requests) == before  # nothing from the Hub
    assert condition(ready, "WeightsCached")["reason"] == "Preloaded"
    time.sleep(0.1)
    with contextlib.suppress(ApiException):
        api.core.delete_namespaced_persistent_volume_claim("weights", api.namespace)


def test_bad_input_from_the_model_ends_in_conditions_and_the_operator_keeps_serving(
        api: ServerClient, resolving_op: OperatorProcess, hub: HubStandIn) -> None:
    """Broken repos (tests/hubfixtures/broken.py), a repo that does not exist, and a pod squatting the resolver
    pod's name: each server ends Failed with its condition and one Warning Event, nothing is started, the squatting
    pod is not touched, and a good server created after them all is Ready from the same operator process."""
    from ctxfit.api import InferenceServerSpec
    from ctxfit.controller.converge.resolution import need
    from ctxfit.controller.kube.resolver_pod import resolver_pod_name

    bad = {"truncated": ("acme/config-truncated", "ModelResolved", "InvalidCheckpoint"),
           "bad-dtype": ("acme/header-bad-dtype", "ModelResolved", "InvalidCheckpoint"),
           "missing": ("acme/no-such-model", "ModelResolved", "ModelNotFound"),
           "inter-string": ("acme/config-intermediate-string", "BudgetFits", "InvalidSpec")}
    for name, (repo, _, _) in bad.items():
        api.create(server(name, repo))
    squatted = server("squatted", "meta-llama/Llama-3.2-3B", tokenSecretRef={"name": "hf", "key": "token"})
    key = need(InferenceServerSpec.model_validate(squatted["spec"]), api.namespace).key
    squatter = resolver_pod_name("squatted", key)
    api.core.create_namespaced_pod(api.namespace, {  # no ownerReference: not the server's, whatever its labels say
        "metadata": {"name": squatter, "labels": {"app.kubernetes.io/managed-by": "ctxfit"}},
        "spec": {"containers": [{"name": "c", "image": "busybox"}], "nodeSelector": {"no-such-node": "x"}}})
    api.create(squatted)
    expected = {**bad, "squatted": ("meta-llama/Llama-3.2-3B", "ModelResolved", "ForeignObject")}
    for name, (repo, kind, reason) in expected.items():
        failed = api.wait_phase(name, "Failed")
        cond = condition(failed, kind)
        assert (cond["status"], cond["reason"]) == ("False", reason), (name, cond)
        assert repo in cond["message"] or reason == "ForeignObject", cond["message"]
        assert not failed["status"].get("attempts") and api.deployment(name, missing_ok=True) is None
        api.wait(lambda name=name: [e for e in api.events(name) if e["type"] == "Warning"],
                 f"the Warning Event of {name}")  # posted after the status write
    resolving_op.settle(3)  # passes and backoff retries after the failure add no Event
    for name, (_, _, reason) in expected.items():
        warnings = [e for e in api.events(name) if e["type"] == "Warning"]
        assert [e["reason"] for e in warnings] == [reason], (name, warnings)
    pod = api.core.read_namespaced_pod(squatter, api.namespace)
    assert pod.metadata.deletion_timestamp is None and not pod.metadata.owner_references
    assert resolving_op.alive()
    api.create(server("good", "Qwen/Qwen3-4B"))
    assert_resolved(api, "good", "Qwen/Qwen3-4B")
    assert resolving_op.alive()
