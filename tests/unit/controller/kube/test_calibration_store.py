"""The calibration ConfigMap (controller/kube/calibration.py) against a fake API server: created on the first
sample, samples once each (same id twice, a retry after a crash), compare-and-swap retried on conflict,
readable YAML, a malformed or unreadable ConfigMap never breaks planning."""

from __future__ import annotations

import json
from dataclasses import replace
from types import SimpleNamespace
from typing import Any

import pytest
import yaml
from ctxfit.budget.calibrate import CalibrationKey, Sample
from ctxfit.controller.kube.calibration import DATA_KEY, CalibrationStore
from kubernetes.client.exceptions import ApiException

KEY = CalibrationKey("vllm", "0.19", "NVIDIA-H100-80GB-HBM3", 1, 1)


class FakeCore:
    """The ConfigMap endpoints of the API server as ``Kube.rest`` (controller/kube/rest.py) calls them."""

    def __init__(self, conflicts: int = 0, forbidden: bool = False) -> None:
        self.obj: dict[str, Any] | None = None
        self.version = 0
        self.conflicts = conflicts
        self.forbidden = forbidden
        self.writes = 0
        self.reads = 0
        self.journal: list[str] | None = None

    def read(self, resource: Any, namespace: str, name: str) -> dict[str, Any] | None:
        assert resource.plural == "configmaps" and name
        self.reads += 1
        if self.forbidden:
            raise ApiException(status=403)
        return json.loads(json.dumps(self.obj)) if self.obj is not None else None

    def _store(self, body: dict[str, Any]) -> None:
        self.version += 1
        self.writes += 1
        if self.journal is not None:
            self.journal.append("configmap")
        self.obj = {"metadata": {"name": body["metadata"]["name"], "resourceVersion": str(self.version)},
                    "data": dict(body["data"])}

    def call(self, method: str, resource: Any, namespace: str, name: str | None = None, *, body: dict[str, Any],
             **_: Any) -> bytes:
        assert resource.plural == "configmaps"
        if method == "POST":
            assert name is None
            if self.obj is not None:
                raise ApiException(status=409)
            self._store(body)
            return b"{}"
        assert method == "PUT" and name
        if self.conflicts:
            self.conflicts -= 1
            self.version += 1  # someone else wrote
            assert self.obj is not None
            self.obj["metadata"]["resourceVersion"] = str(self.version)
            raise ApiException(status=409)
        assert self.obj is not None
        if body["metadata"].get("resourceVersion") != self.obj["metadata"]["resourceVersion"]:
            raise ApiException(status=409)
        self._store(body)
        return b"{}"


def store(core: FakeCore) -> CalibrationStore:
    return CalibrationStore(SimpleNamespace(rest=core), "ctxfit-system", "ctxfit-calibration")  # type: ignore[arg-type]


def sample(i: int, gib: float = -0.5) -> Sample:
    return Sample(f"uid-{i}/1", f"ns/s{i}", int(gib * (1 << 30)), 1, 2, "2026-11-30T10:00:00Z")


def test_created_then_appended_once_each() -> None:
    core = FakeCore()
    s = store(core)
    assert s.table().entries == {}
    assert s.record([(KEY, sample(1))]) == 1
    assert s.record([(KEY, sample(1))]) == 0, "the same sample again (a retry after a crash) is a no-op"
    assert s.record([(KEY, sample(1)), (KEY, sample(2))]) == 1
    assert core.writes == 2
    assert core.obj is not None
    text = core.obj["data"][DATA_KEY]
    assert text.startswith("# ctxfit calibration")
    doc = yaml.safe_load(text)
    (entry,) = doc["entries"]
    assert entry["count"] == 2 and [x["id"] for x in entry["samples"]] == ["uid-1/1", "uid-2/1"]
    assert entry["medianResidualGiB"] == -0.5
    fresh = store(core)
    assert fresh.table().entries[KEY].count == 2


def test_conflicts_are_retried_without_losing_or_doubling() -> None:
    core = FakeCore()
    store(core).record([(KEY, sample(1))])
    core.conflicts = 3
    assert store(core).record([(KEY, sample(2))]) == 1
    doc = yaml.safe_load(core.obj["data"][DATA_KEY]) if core.obj else {}
    assert [x["id"] for x in doc["entries"][0]["samples"]] == ["uid-1/1", "uid-2/1"]


def test_endless_conflicts_raise() -> None:
    core = FakeCore()
    store(core).record([(KEY, sample(1))])
    core.conflicts = 100
    with pytest.raises(ApiException):
        store(core).record([(KEY, sample(2))])


def test_malformed_or_unreadable_configmap_plans_without_calibration() -> None:
    core = FakeCore()
    core.obj = {"metadata": {"resourceVersion": "1"}, "data": {DATA_KEY: "entries: [{{{"}}
    assert store(core).table().entries == {}
    core.obj = {"metadata": {"resourceVersion": "1"}, "data": {DATA_KEY: "- a list"}}
    assert store(core).table().entries == {}
    assert store(FakeCore(forbidden=True)).table().entries == {}


def test_reconcile_records_the_sample_before_the_status_that_holds_it() -> None:
    """A crash between the two writes re-reads the log and re-adds the same id: no loss, no double."""
    import sys
    from pathlib import Path

    from ctxfit.controller.reconcile import reconcile

    from tests.unit.controller.builders import pod
    from tests.unit.controller.test_reconcile import RTX, FakeKube, runtime, server

    sys.path.insert(0, str(Path(__file__).resolve().parents[4] / "hack"))
    from sim_startup import vllm_startup_log

    class Kube(FakeKube):
        def log_head(self, namespace: str, name: str, container: str, *, limit_bytes: int) -> str:
            self.calls.append(f"log:{limit_bytes}")
            return vllm_startup_log(kv_cache_bytes=12 << 30, kv_bytes_per_token=70272, max_model_len=131072)

    kube = Kube(server())
    rt = runtime(kube)
    core = FakeCore()
    core.journal = kube.calls
    rt.calibration = CalibrationStore(SimpleNamespace(rest=core), "ctxfit-system", "cal")  # type: ignore[arg-type]
    first = reconcile(rt, "ns", "kimi-k25", (RTX,), ())
    assert first.stored is not None
    kube.server = first.stored
    kube.calls.clear()
    base = pod(1, ready=True, name="kimi-k25-abc")
    ready = replace(base, facts=replace(base.facts, owner_replicaset="kimi-k25-5d8f7c9b4"))  # owned by its ReplicaSet
    second = reconcile(rt, "ns", "kimi-k25", (RTX,), (ready,))
    assert kube.calls[:3] == ["log:1048576", "configmap", "status"] and core.writes == 1
    assert second.stored is not None and second.stored["status"]["observed"]["attempt"] == 1
    # the status write was lost (a crash): the next pass reads again and adds nothing twice
    reconcile(rt, "ns", "kimi-k25", (RTX,), (ready,))
    assert core.writes == 1
    doc = yaml.safe_load(core.obj["data"][DATA_KEY]) if core.obj else {}
    assert [s["id"] for s in doc["entries"][0]["samples"]] == ["uid-1/1"]
    kube.server = second.stored
    kube.calls.clear()
    reconcile(rt, "ns", "kimi-k25", (RTX,), (ready,))
    assert not [c for c in kube.calls if c.startswith("log:")], "read once per attempt"


def test_a_burst_of_plans_shares_one_read() -> None:
    """Concurrent planners wait for one GET instead of each reading the ConfigMap (bench/README.md: 141 GETs for
    200 new servers before)."""
    import threading
    import time

    class SlowCore(FakeCore):
        def read(self, resource: Any, namespace: str, name: str) -> dict[str, Any] | None:
            time.sleep(0.05)
            return super().read(resource, namespace, name)

    core = SlowCore()
    s = store(core)
    threads = [threading.Thread(target=s.table) for _ in range(16)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert core.reads == 1
