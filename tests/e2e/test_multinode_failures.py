"""Multi-node failures against the real LWS controller: a failure only a worker shows steps the
whole group down once; a group recreated again and again without a failure ends Failed within its budget.

The LWS controller recreates a group (``RecreateGroupOnPodRestart``) when any of its containers restarts or any
of its pods is deleted; kwok plays the engine (hack/README.md, "Simulated engine"; ``fail-if-label`` fails the
workers only).
"""

from __future__ import annotations

import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import yaml
from ctxfit.controller.converge.group_restarts import RECREATION_WINDOW_SECONDS
from kubernetes.client import CustomObjectsApi, V1DeleteOptions, V1Eviction, V1ObjectMeta

from .operator_kit import REPO, OperatorProcess, ServerClient, condition, group, manifest, with_sim

GLM5 = REPO / "tests" / "golden" / "multinode" / "sglang-2x8" / "inferenceserver.yaml"
"""GLM-5 on SGLang 0.5.6 across two 8x H100 nodes (TP 16): every node runs its own schedulers, so a rank on
the worker node sizes its own KV pool and fails on its own."""

WORKER_LOG = """\
[2026-01-01 10:00:41 TP8] Load weight end. type=GlmMoeDsaForCausalLM, dtype=torch.bfloat16, avail mem=14.92 GB
[2026-01-01 10:00:42 TP8] Scheduler hit an exception: Traceback (most recent call last):
  File "/sgl-workspace/sglang/python/sglang/srt/managers/scheduler.py", line 2644, in run_scheduler_process
    scheduler = Scheduler(server_args, port_args, gpu_id, tp_rank, moe_ep_rank, pp_rank, dp_rank)
RuntimeError: Not enough memory. Please try to increase --mem-fraction-static.
"""
"""The worker's log (simulated, in the wording of SGLang's ``model_runner.py`` KV-pool check, which
``engines/sglang/failures.py`` matches): its ranks have no memory left for their KV cache pool."""


def glm5_failing_worker() -> dict[str, Any]:
    """GLM-5 whose *workers* fail below mem-fraction-static 0.85 (the leader is Ready); no termination
    message, so the operator reads the worker's log."""
    obj = with_sim(yaml.safe_load(GLM5.read_text()), "crash")
    obj["spec"]["pod"]["annotations"].update({
        "sim.ctxfit.io/fail-if-annotation": "ctxfit.io/mem-fraction-static",
        "sim.ctxfit.io/fail-if-below": "0.85",
        "sim.ctxfit.io/fail-if-label": "ctxfit.io/role=worker",
    })
    return obj


def test_a_worker_failing_alone_steps_the_whole_group_down_once(op: OperatorProcess, api: ServerClient,
                                                                 groups: CustomObjectsApi, cluster: Any) -> None:
    """Only the worker fails, its KV-pool error only in its own log: read from the worker, one step-down (a larger
    --mem-fraction-static) for the whole group (leader and worker templates), then Ready."""
    worker = "glm5-2x8-0-1"  # LWS names: leader <lws>-<group>, workers <lws>-<group>-<index>
    cluster.set_pod_logs(api.namespace, worker, WORKER_LOG, previous=WORKER_LOG)
    api.create(glm5_failing_worker())
    server = api.wait_phase("glm5-2x8", "Ready", timeout=180)
    first, second = server["status"]["attempts"]
    assert (first["outcome"], second["outcome"]) == ("Failed", "Succeeded")
    assert first["failureKind"] == "StaticMemoryTooSmall" and first["pod"] == worker, first
    assert "Not enough memory" in first["evidence"]
    assert first["effective"]["memFractionStatic"] < 0.85 <= second["effective"]["memFractionStatic"]
    assert second["effective"]["contextLength"] == first["effective"]["contextLength"]
    failed = [e for e in api.events("glm5-2x8") if e["reason"] == "AttemptFailed"]
    assert len(failed) == 1, failed
    lws_obj = group(groups, api.namespace, "glm5-2x8")
    assert lws_obj is not None
    for role in ("leaderTemplate", "workerTemplate"):
        annotations = lws_obj["spec"]["leaderWorkerTemplate"][role]["metadata"]["annotations"]
        assert annotations["ctxfit.io/attempt"] == "2"
        assert annotations["ctxfit.io/mem-fraction-static"] == str(second["effective"]["memFractionStatic"])
    # The LWS controller may still be replacing the group the failed worker belonged to (same pod names across
    # incarnations); wait for attempt 2's leader and worker, both Ready, then the server must still be Ready on
    # the same two attempts (no second step-down).
    def settled() -> list[dict[str, Any]] | None:
        pods = api.pods("glm5-2x8")
        attempts = sorted(p["metadata"]["annotations"]["ctxfit.io/attempt"] for p in pods)
        ok = attempts == ["2", "2"] and all(condition(p, "Ready")["status"] == "True" for p in pods)
        return pods if ok else None

    api.wait(settled, "attempt 2's leader and worker both Ready", timeout=90)
    server = api.wait_phase("glm5-2x8", "Ready", timeout=60)
    assert [a["outcome"] for a in server["status"]["attempts"]] == ["Failed", "Succeeded"]


def _leader(api: ServerClient, name: str) -> dict[str, Any] | None:
    """The group's leader pod of the current incarnation (not being deleted), None between incarnations."""
    for pod in api.pods(name):
        if pod["metadata"]["labels"].get("leaderworkerset.sigs.k8s.io/worker-index") == "0":
            return pod
    return None


def _evict_worker_and_wait_for_a_new_group(api: ServerClient, name: str, before: str) -> str:
    """Evict the group's worker (the Eviction API, as a node-pressure or drain would); the LWS controller deletes
    the leader and recreates the group. Returns the new leader's uid once its worker exists again, or ``before``
    as soon as the server is Failed (an eviction may be the one that exhausts the budget: the operator then scales
    the group to zero and no new worker comes; it may also have counted a recreation seen while it was down
    before this call)."""
    worker = f"{name}-0-1"

    def failed() -> bool:
        return _phase(api, name) == "Failed"

    def worker_exists() -> bool:
        return any(p["metadata"]["name"] == worker for p in api.pods(name))

    # A leader and its worker, both live: between two incarnations of a cascade there is no leader, and an eviction
    # timed from nothing could land within the window of the disruption still going on (one disruption, rightly
    # not counted again: the final CI hit that with the operator down).
    current = api.wait(lambda: failed() or (worker_exists() and _leader(api, name)), f"worker {worker} and its leader",
                       timeout=60)
    if failed():
        return before
    born = datetime.fromisoformat(current["metadata"]["creationTimestamp"])  # evict once it is a window old
    time.sleep(max(0.0, (born - datetime.now(UTC)).total_seconds() + RECREATION_WINDOW_SECONDS + 1))
    api.core.create_namespaced_pod_eviction(worker, api.namespace, V1Eviction(
        metadata=V1ObjectMeta(name=worker, namespace=api.namespace), delete_options=V1DeleteOptions()))
    leader = api.wait(lambda: failed() or ((p := _leader(api, name)) and p["metadata"]["uid"] != before and p),
                      "the group recreated (a new leader)", timeout=90)
    api.wait(lambda: failed() or worker_exists(), "its new worker", timeout=60)
    if leader is True:
        return before
    uid: str = leader["metadata"]["uid"]
    return uid


def _seen_complete(api: ServerClient, name: str) -> bool:
    """The operator has recorded the current incarnation's leader with all its pods (``groupLeaders[].complete``):
    only a recreation of an incarnation it saw complete counts (a cascade is one disruption), so an operator
    stopped before that would, on its return, rightly take the next recreation for the same disruption."""
    current = _leader(api, name)
    attempts = api.get(name).get("status", {}).get("attempts") or [{}]
    return current is not None and any(
        seen.get("uid") == current["metadata"]["uid"] and seen.get("complete") is True
        for seen in attempts[-1].get("groupLeaders") or [])


def _restarts(api: ServerClient, name: str) -> int:
    attempts = api.get(name).get("status", {}).get("attempts") or [{}]
    count: int = attempts[-1].get("groupRestarts") or 0
    return count


def _phase(api: ServerClient, name: str) -> str:
    phase: str = api.get(name).get("status", {}).get("phase") or ""
    return phase


def test_a_group_recreated_repeatedly_ends_failed_within_the_budget(api: ServerClient, cluster: Any,
                                                                     groups: CustomObjectsApi, namespace: str,
                                                                     tmp_path: Path) -> None:
    """The engine loads and loads (never Ready, no failure) while its worker is evicted again and again, each
    eviction a window (RECREATION_WINDOW_SECONDS) after the last: each recreates the whole group (the LWS
    controller sometimes two or three times in a row: a worker still being deleted deletes the new leader too -
    one disruption, counted once). With CTXFIT_GROUP_RESTART_BUDGET=2 the third recreation the operator sees
    ends the server Failed (GroupRestartsExhausted), scaled to 0 - and the count survives an operator restart in
    between."""
    budget, name = 2, "kimi-k25-2x8"
    env = {"CTXFIT_GROUP_RESTART_BUDGET": str(budget)}
    evictions = 0
    first = OperatorProcess(Path(cluster.kubeconfig), namespace, tmp_path / "operator-1.log", **env).start()
    try:
        api.create(with_sim(manifest("kimi-k25-2x8-h100.yaml"), "never-ready"))
        leader = api.wait(lambda: _leader(api, name), "the leader pod", timeout=60)["metadata"]["uid"]
        api.wait(lambda: api.get(name)["status"]["attempts"][0].get("groupLeaders"), "the leader recorded",
                 timeout=60)
        leader, evictions = _evict_worker_and_wait_for_a_new_group(api, name, leader), evictions + 1
        api.wait(lambda: _restarts(api, name) >= 1, "a recreation counted", timeout=60)
        api.wait(lambda: _seen_complete(api, name), "the new group seen complete by the operator", timeout=60)
        before_restart = _restarts(api, name)
        assert before_restart <= budget and _phase(api, name) == "Starting"
    finally:
        first.stop()
    leader, evictions = _evict_worker_and_wait_for_a_new_group(api, name, leader), evictions + 1  # no operator runs
    second = OperatorProcess(Path(cluster.kubeconfig), namespace, tmp_path / "operator-2.log", **env).start()
    try:
        api.wait(lambda: _restarts(api, name) > before_restart, "the recreation while down counted on top",
                 timeout=60)
        while _phase(api, name) != "Failed" and evictions <= budget:
            seen = _restarts(api, name)
            leader, evictions = _evict_worker_and_wait_for_a_new_group(api, name, leader), evictions + 1
            api.wait(lambda: _restarts(api, name) > seen or _phase(api, name) == "Failed",  # noqa: B023
                     "the recreation counted", timeout=60)
        server = api.wait_phase(name, "Failed", timeout=60)
        scaled = api.wait(lambda: (g := group(groups, api.namespace, name)) and g["spec"]["replicas"] == 0 and g,
                          "the LeaderWorkerSet scaled to zero", timeout=60)
    finally:
        second.stop()
        print(f"--- operator logs ---\n{(tmp_path / 'operator-1.log').read_text()[-3000:]}\n"
              f"{(tmp_path / 'operator-2.log').read_text()[-4000:]}")
    assert evictions <= budget + 1, "Failed within the budget"
    attempts = server["status"]["attempts"]
    assert len(attempts) == 1 and attempts[0]["outcome"] == "Failed"
    assert attempts[0]["groupRestarts"] == budget + 1, "each recreation seen counts once; Failed at budget + 1"
    ready = condition(server, "Ready")
    assert (ready["status"], ready["reason"]) == ("False", "GroupRestartsExhausted")
    assert f"recreated more than {budget} times (CTXFIT_GROUP_RESTART_BUDGET)" in ready["message"]
    reasons = [e["reason"] for e in api.events(name)]
    assert reasons.count("GroupRecreated") == budget and reasons.count("GroupRestartsExhausted") == 1, reasons
    assert "AttemptFailed" not in reasons, "no engine failure was seen: no step-down"
    assert scaled["spec"]["leaderWorkerTemplate"]["size"] == 2
