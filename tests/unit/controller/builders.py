"""Builders the controller's tests share: snapshots, engine and group pods, specs from manifests/, settings,
diagnoses, and a group's restart steps (no test module imports another)."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import yaml
from ctxfit.api.status import InferenceServerStatus, Reason
from ctxfit.api.status_check import read_status
from ctxfit.controller.converge import Outcome, Snapshot, converge
from ctxfit.controller.settings import Settings
from ctxfit.controller.views.pod_facts import PodFacts
from ctxfit.controller.views.pods import DeploymentView, GPUNode, PodView, Termination
from ctxfit.recovery import Failure, FailureKind

REPO = Path(__file__).resolve().parents[3]
NOW = datetime(2026, 1, 1, 12, 0, 0, tzinfo=UTC)
RTX = GPUNode("rtx-0", "NVIDIA-RTX-PRO-6000-Blackwell-Server-Edition", 97887, 8, (12, 0), 1536 << 30, True)
H100 = GPUNode("h100-0", "NVIDIA-H100-80GB-HBM3", 81559, 8, (9, 0), 1536 << 30, True)
SETTINGS = Settings(backoff_seconds=10, metrics_port=0, health_port=0)
KV_FAILURE = Failure(FailureKind.KV_CACHE_TOO_SMALL, {"estimatedMaxContextLength": 178752},
                     "the estimated maximum model length is 178752")


def spec(name: str = "kimi-128k.yaml", **context: Any) -> dict[str, Any]:
    body: dict[str, Any] = yaml.safe_load((REPO / "manifests" / name).read_text())["spec"]
    body["context"].update(context)
    return body


def snapshot(spec_body: dict[str, Any], status: InferenceServerStatus | None = None, *, pods: tuple[PodView, ...] = (),
             nodes: tuple[GPUNode, ...] = (RTX, H100), deployment: DeploymentView | None = None,
             now: datetime = NOW, generation: int = 1, service_port: int | None = None) -> Snapshot:
    return Snapshot(name="kimi", namespace="ns", uid="uid-1", generation=generation, spec=spec_body,
                    status=status or InferenceServerStatus(), nodes=nodes, pods=pods, deployment=deployment,
                    service_port=service_port, now=now)


def pod(attempt: int, *, ready: bool = False, terminated: str | None = None, name: str | None = None,
        created: datetime = NOW, deleting: bool = False) -> PodView:
    term = Termination(terminated, 1, "boom", None) if terminated else None
    stamp = created.strftime("%Y-%m-%dT%H:%M:%SZ")
    owned = PodFacts(owner_replicaset="kimi-5d8f7c9b4", template_label="5d8f7c9b4", engine_started_at=stamp)
    return PodView(name=name or f"kimi-{attempt}", namespace="ns", server="kimi", attempt=attempt, ready=ready,
                   deleting=deleting, termination=term, restart_count=1 if term else 0, waiting_reason=None,
                   created=stamp, node="rtx-0", phase="Running", facts=owned)


def never(pod: PodView, restarts: int) -> Failure:
    raise AssertionError(f"diagnose must not be called for {pod.name}")


def diagnosed(failure: Failure) -> Any:
    calls: list[str] = []

    def diagnose(pod: PodView, restarts: int) -> Failure:
        calls.append(pod.name)
        return failure
    diagnose.calls = calls  # type: ignore[attr-defined]
    return diagnose


def applied(out: Outcome) -> DeploymentView:
    assert out.deployment is not None
    return DeploymentView(out.deployment["metadata"]["annotations"]["ctxfit.io/pod-template-hash"],
                          out.deployment["spec"]["replicas"])
H100_0 = GPUNode("h100-0", "NVIDIA-H100-80GB-HBM3", 81559, 8, (9, 0), 1536 << 30, True)
H100_1 = replace(H100_0, name="h100-1")
H200 = GPUNode("h200-0", "NVIDIA-H200", 143771, 8, (9, 0), 1536 << 30, True)
GROUP_KV_FAILURE = Failure(FailureKind.KV_CACHE_TOO_SMALL, {"estimatedMaxContextLength": 90000},
                     "the estimated maximum model length is 90000")


def group_spec(**changes: Any) -> dict[str, Any]:
    body = spec("kimi-k25-2x8-h100.yaml")
    body.update(changes)
    return body


def member(attempt: int, name: str, *, ready: bool = False, terminated: str | None = None, uid: str | None = None,
           revision: str = "rev-1", deleting: bool = False) -> PodView:
    """A pod of LWS group 0 as the LWS controller makes it: labelled with the LWS name, group and worker index
    and template revision, owned by the leaders' StatefulSet ``kimi`` (leader ``kimi-0``) or the group's
    workers' ``kimi-0`` (worker ``kimi-0-1``). ``uid``: its ``metadata.uid`` (default: one per name)."""
    base = pod(attempt, ready=ready, terminated=terminated, name=name, deleting=deleting)
    owner = "kimi" if name.count("-") == 1 else name.rsplit("-", 1)[0]
    worker_index = 0 if name.count("-") == 1 else int(name.rsplit("-", 1)[1])
    facts = replace(base.facts, owner_replicaset=None, template_label=None, owner_statefulset=owner, group_name="kimi",
                    group_index=0, worker_index=worker_index, revision=revision)
    return replace(base, node=f"h100-{worker_index}", facts=facts,  # one node per pod of the group
                   uid=uid or f"uid-{name}")
BUDGET_2 = Settings(backoff_seconds=10, metrics_port=0, health_port=0, group_restart_budget=2)
NODES = (H100_0, H100_1)
NOW_STAMP = NOW.strftime("%Y-%m-%dT%H:%M:%SZ")


def group(attempt: int, leader_uid: str, *, ready: bool = False, revision: str = "rev-1") -> tuple[PodView, ...]:
    """Leader (uid ``leader_uid``) and worker of group 0; a new leader uid is a new incarnation of the group."""
    return (member(attempt, "kimi-0", ready=ready, uid=leader_uid, revision=revision),
            member(attempt, "kimi-0-1", ready=ready, uid=f"{leader_uid}-worker", revision=revision))


def stored(status: InferenceServerStatus) -> InferenceServerStatus:
    """``status`` written and read back as the operator does (what survives an operator restart)."""
    back, problem = read_status(status.to_wire())
    assert problem is None, problem
    return back


def step(body: dict[str, Any], before: Outcome, pods: tuple[PodView, ...], seconds: int, settings: Settings = BUDGET_2,
         deployment: DeploymentView | None = None, generation: int = 1) -> Outcome:
    """One pass ``seconds`` after NOW; pods without an explicit creation time were created at that moment."""
    at = (NOW + timedelta(seconds=seconds)).strftime("%Y-%m-%dT%H:%M:%SZ")
    pods = tuple(replace(p, created=at) if p.created == NOW_STAMP else p for p in pods)
    return converge(snapshot(body, stored(before.status), pods=pods, nodes=NODES,
                             deployment=deployment or applied(before), now=NOW + timedelta(seconds=seconds),
                             generation=generation), settings, never)


def events(out: Outcome, reason: Reason) -> list[str]:
    return [e.message for e in out.events if e.reason is reason]
NCCL = Failure(FailureKind.UNKNOWN, {}, "torch.distributed.DistBackendError: NCCL error: remote process exited")


def ended(pod: PodView, at: str) -> PodView:
    assert pod.termination is not None
    return replace(pod, termination=replace(pod.termination, finished_at=at))


def by_name(failures: dict[str, Failure]) -> tuple[list[str], object]:
    calls: list[str] = []

    def diagnose(pod: PodView, restarts: int) -> Failure:
        calls.append(pod.name)
        return failures[pod.name]
    return calls, diagnose


def step_down() -> tuple[Outcome, Any]:
    body = spec(target=262144)
    body["model"]["weightsPerGPU"] = "64Gi"
    start = converge(snapshot(body), SETTINGS, never)
    assert start.status.context_length == 262144
    diagnose = diagnosed(KV_FAILURE)
    failed = converge(snapshot(body, start.status, pods=(pod(1, terminated="Error"),), deployment=applied(start),
                               now=NOW + timedelta(seconds=30)), SETTINGS, diagnose)
    return failed, body
