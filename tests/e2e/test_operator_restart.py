"""Scenario 8: the operator is killed in the middle of a step-down and restarted; it finishes the
step-down from status without applying the same step twice."""

from __future__ import annotations

import signal
from pathlib import Path
from typing import Any

from .operator_kit import OperatorProcess, ServerClient, kimi_262k, manifest


def test_restart_mid_step_down(api: ServerClient, cluster: Any, namespace: str, tmp_path: Path) -> None:
    """Kill -9 after attempt 2 is recorded (during its backoff), restart: one failure, one step, Ready; the
    second operator, stopped by SIGTERM, exits 0."""
    env = {"CTXFIT_BACKOFF_SECONDS": "4"}
    first = OperatorProcess(Path(cluster.kubeconfig), namespace, tmp_path / "operator-1.log", **env).start()
    try:
        api.create(kimi_262k())
        api.wait(lambda: len(api.get("kimi-k25")["status"]["attempts"]) == 2, "attempt 2 recorded")
        api.wait(lambda: any(e["reason"] == "AttemptFailed" for e in api.events("kimi-k25")), "its Event")
    finally:
        first.stop(signal.SIGKILL)
    recorded = api.get("kimi-k25")["status"]
    assert recorded["phase"] == "SteppingDown"
    assert recorded["attempts"][1]["effective"]["contextLength"] == 131072
    deployment = api.deployment("kimi-k25")
    assert deployment is not None and deployment["metadata"]["annotations"]["ctxfit.io/attempt"] == "1"

    second = OperatorProcess(Path(cluster.kubeconfig), namespace, tmp_path / "operator-2.log", **env).start()
    try:
        server = api.wait_phase("kimi-k25", "Ready")
        second.settle(2)
        server = api.get("kimi-k25")
    finally:
        second.stop()
    assert second.proc is not None and second.proc.returncode == 0, "SIGTERM is a clean stop: exit code 0"
    attempts = server["status"]["attempts"]
    assert [(a["number"], a["outcome"]) for a in attempts] == [(1, "Failed"), (2, "Succeeded")]
    assert server["status"]["contextLength"] == 131072
    deployment = api.deployment("kimi-k25")
    assert deployment is not None and deployment["metadata"]["annotations"]["ctxfit.io/attempt"] == "2"
    failed = [e for e in api.events("kimi-k25") if e["reason"] == "AttemptFailed"]
    assert len(failed) == 1, failed
    print(f"--- first operator ---\n{first.log_path.read_text()[-3000:]}\n--- second ---\n"
          f"{second.log_path.read_text()[-3000:]}")


def test_two_replicas_one_leader(api: ServerClient, cluster: Any, namespace: str, tmp_path: Path) -> None:
    """CTXFIT_PEERING: two operators, one Lease; only the holder acts, the other takes over when it dies."""
    env = {"CTXFIT_PEERING": "ctxfit-e2e", "CTXFIT_PEERING_NAMESPACE": namespace, "CTXFIT_LEASE_SECONDS": "3"}
    one = OperatorProcess(Path(cluster.kubeconfig), namespace, tmp_path / "one.log", **env).start()
    two = OperatorProcess(Path(cluster.kubeconfig), namespace, tmp_path / "two.log", **env).start()
    try:
        api.create(manifest("kimi-128k.yaml"))
        api.wait_phase("kimi-k25", "Ready")
        lease = api.lease(namespace, "ctxfit-e2e")
        holder = lease.spec.holder_identity
        leader, standby = (one, two) if str(one.proc.pid if one.proc else "") in holder else (two, one)
        assert str(leader.proc.pid if leader.proc else "") in holder
        planned = [e for e in api.events("kimi-k25") if e["reason"] == "Planned"]
        assert len(planned) == 1, planned
        leader.stop(signal.SIGKILL)
        second = manifest("kimi-128k.yaml")
        second["metadata"]["name"] = "kimi-two"
        api.create(second)
        api.wait_phase("kimi-two", "Ready", timeout=30)
        assert str(standby.proc.pid if standby.proc else "") in api.lease(namespace, "ctxfit-e2e").spec.holder_identity
    finally:
        one.stop()
        two.stop()
