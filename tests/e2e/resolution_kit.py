"""What the model-resolution e2e tests share: an InferenceServer of a Hub repo, the check that it resolved and
is Ready with the resolved plan, and the Hub stand-in's count of a repo's info requests."""

from __future__ import annotations

from typing import Any

from tests.hubfixtures.repos import fixture_repo
from tests.hubfixtures.server import HubStandIn

from .operator_kit import ServerClient, condition


def server(name: str, repo: str, **model: Any) -> dict[str, Any]:
    return {"apiVersion": "ctxfit.io/v1alpha1", "kind": "InferenceServer", "metadata": {"name": name},
            "spec": {"model": {"name": repo, **model}, "engine": {"kind": "vllm", "version": "0.19.0"},
                     "gpu": {"product": "NVIDIA-H100-80GB-HBM3", "count": 1}, "context": {"target": 8192},
                     "pod": {"annotations": {"sim.ctxfit.io/download-ms": "200"}}}}


def engine_command(api: ServerClient, name: str) -> list[str]:
    """The engine container's command and arguments in the server's Deployment."""
    deployment = api.deployment(name)
    assert deployment is not None
    container = deployment["spec"]["template"]["spec"]["containers"][0]
    return [*(container.get("command") or []), *(container.get("args") or [])]


def assert_resolved(api: ServerClient, name: str, repo: str) -> dict[str, Any]:
    ready = api.wait_phase(name, "Ready", timeout=90)
    resolved = ready["status"]["model"]["resolved"]
    assert resolved["source"] in ("hub", "volume") and resolved["sha"] == fixture_repo(repo).sha
    assert resolved["weightsPerGPUBytes"] == ready["status"]["plan"]["perGPU"]["weightsBytes"]
    assert resolved["architecture"]["numLayers"] == fixture_repo(repo).config["num_hidden_layers"]
    cond = condition(ready, "ModelResolved")
    assert (cond["status"], cond["reason"]) == ("True", "Resolved")
    args = engine_command(api, name)
    assert "--max-model-len" in args and args[args.index("--max-model-len") + 1] == str(
        ready["status"]["contextLength"])
    return ready


def info_requests(hub: HubStandIn, repo: str) -> int:
    return sum(1 for _, path in hub.requests if path.startswith(f"/api/models/{repo}"))
