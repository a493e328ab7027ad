"""The calibration ConfigMap (controller/kube/calibration.py) against a fake API server: created on the first
sample, samples once each (same id twice, a retry after a crash), compare-and-swap retried on conflict,
readable YAML, a malformed or unreadable ConfigMap never breaks planning."""

from __future__ import annotations

import json
from dataclasses import replace
from typing import Any
from urllib.parse import urlsplit

import pytest
import yaml
from ctxfit.budget.calibrate import CalibrationKey, Sample
from ctxfit.controller.kube.calibration import DATA_KEY, CalibrationStore
from kubernetes.client.exceptions import ApiException

from tests.unit.controller.fakekube import FakeKube, runtime, server
from tests.unit.controller.kube.fakeapi import Response, parse_path, rest_over, status_response

KEY = CalibrationKey("vllm", "0.19", "NVIDIA-H100-80GB-HBM3", 1, 1)


class FakeCore:
    """The ConfigMap endpoints of the API server, as the pool a real ``Rest`` sends through (``request``): one
    ConfigMap ``obj`` whatever its name; ``conflicts`` PUTs answered 409 after someone else's write, reads
    refused (403) when ``forbidden``; counts reads and writes, journals writes; ``events``: the Events posted."""

    def __init__(self, conflicts: int = 0, forbidden: bool = False) -> None:
        self.obj: dict[str, Any] | None = None
        self.version = 0
        self.conflicts = conflicts
        self.forbidden = forbidden
        self.writes = 0
        self.reads = 0
        self.journal: list[str] | None = None
        self.events: list[tuple[dict[str, Any], str, str, str]] = []

    def request(self, method: str, url: str, body: Any = None, **_: Any) -> Response:
        (_group, plural, namespace, name), _sub = parse_path(urlsplit(url).path)
        assert plural == "configmaps"
        try:
            if method == "GET":
                found = self.read(namespace, name)
                return Response(200, found) if found is not None else status_response(
                    404, f'configmaps "{name}" not found', name, "NotFound")
            self.call(method, namespace, name or None, body=json.loads(body))
            return Response(201 if method == "POST" else 200, {})
        except ApiException as exc:
            return status_response(int(exc.status), str(exc.reason or ""), name)

    def read(self, namespace: str, name: str) -> dict[str, Any] | None:
        assert name
        self.reads += 1
        if self.forbidden:
            raise ApiException(status=403)
        return json.loads(json.dumps(self.obj)) if self.obj is not None else None

    def _store(self, body: dict[str, Any]) -> None:
        self.version += 1
        self.writes += 1
        if self.journal is not None:
            self.journal.append("configmap")
        self.obj = {"metadata": {"name": body["metadata"]["name"], "resourceVersion": str(self.version),
                                 "labels": dict(body["metadata"].get("labels") or {})},
                    "data": dict(body["data"])}

    def call(self, method: str, namespace: str, name: str | None = None, *, body: dict[str, Any]) -> None:
        if method == "POST":
            assert name is None
            if self.obj is not None:
                raise ApiException(status=409)
            self._store(body)
            return
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


class CoreKube(FakeKube):
    """The shared ``FakeKube`` with ``rest`` over ``core`` and its object Events recorded in ``core.events``."""

    def __init__(self, core: FakeCore) -> None:
        super().__init__(None)
        self.core = core
        self.rest = rest_over(core)

    def post_object_event(self, involved: dict[str, Any], type_: str, reason: str, message: str) -> None:
        self.core.events.append((involved, type_, reason, message))


def kube_of(core: FakeCore) -> CoreKube:
    return CoreKube(core)


def store(core: FakeCore) -> CalibrationStore:
    return CalibrationStore(kube_of(core), "ctxfit-system", "ctxfit-calibration")


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

    from tests.unit.controller.builders import RTX, pod

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
    rt.calibration = CalibrationStore(kube_of(core), "ctxfit-system", "cal")
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
        def read(self, namespace: str, name: str) -> dict[str, Any] | None:
            time.sleep(0.05)
            return super().read(namespace, name)

    core = SlowCore()
    s = store(core)
    threads = [threading.Thread(target=s.table) for _ in range(16)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert core.reads == 1


# -- the ConfigMap is input, never trusted ----------------------------------------------------------------------------

def _wire(residual: Any, **extra: Any) -> str:
    sample_ = {"id": "u/1", "server": "team-a/x", "residualBytes": residual, **extra}
    return yaml.safe_dump({"entries": [
        {"engine": "vllm", "version": "0.19", "gpu": "NVIDIA-H100-80GB-HBM3", "tp": 1, "pp": 1,
         "samples": [sample_, {"id": "u/2", "server": "team-a/y", "residualBytes": -(1 << 30)}]}]})


@pytest.mark.parametrize("bad", [".inf", "-.inf", ".nan", "1e999", "'12'", "true", "9999999999999999999999",
                                 "[1, 2]", "{a: 1}", "0.5"])
def test_a_bad_number_drops_that_sample_with_one_warning_event_and_planning_goes_on(bad: str) -> None:
    """``residualBytes: .inf`` once stopped every reconcile of every server (an OverflowError nobody caught)."""
    core = FakeCore()
    text = _wire(0).replace("residualBytes: 0", f"residualBytes: {bad}")
    core.obj = {"metadata": {"name": "ctxfit-calibration", "resourceVersion": "7", "uid": "cm-uid",
                             "labels": {"app.kubernetes.io/managed-by": "ctxfit",
                                        "app.kubernetes.io/component": "calibration"}}, "data": {DATA_KEY: text}}
    s = store(core)
    table = s.table()
    (entry,) = table.entries.values()
    assert [x.sample_id for x in entry.samples] == ["u/2"], "the valid sample is kept, the bad one dropped"
    assert table.scoped("team-a").lookup(KEY, "vLLM") is not None
    (event,) = core.events
    involved, type_, reason, message = event
    assert (involved["kind"], involved["name"], involved["uid"], type_, reason) == \
        ("ConfigMap", "ctxfit-calibration", "cm-uid", "Warning", "CalibrationEntryDropped")
    assert ("residualBytes" in message and "u/1" not in message) or "residualBytes" in message
    s._cached = None
    s.table()
    assert len(core.events) == 1, "one Event per resourceVersion, however often it is read"
    # a sample recorded now writes back only what was valid
    assert s.record([(KEY, sample(9))]) == 1
    doc = yaml.safe_load(core.obj["data"][DATA_KEY])
    assert [x["id"] for x in doc["entries"][0]["samples"]] == ["u/2", "uid-9/1"]


def test_a_table_too_large_is_not_parsed_and_the_last_table_read_stays(monkeypatch: pytest.MonkeyPatch) -> None:
    """A ConfigMap near 1 MiB cost 8.5 s per parse and kept Ready servers in Starting."""
    from ctxfit.controller.kube import calibration as module

    core = FakeCore()
    s = store(core)
    s.record([(KEY, sample(1))])
    assert KEY in s.table().entries
    parses: list[int] = []
    real = module.yaml.load
    monkeypatch.setattr(module.yaml, "load", lambda text, Loader: parses.append(len(text)) or real(text, Loader))
    assert core.obj is not None
    core.obj["data"][DATA_KEY] += "#" + "x" * module.MAX_TABLE_BYTES
    core.obj["metadata"]["resourceVersion"] = "99"
    for _ in range(3):
        s._cached = None
        assert KEY in s.table().entries, "the last table read is used"
    assert parses == [] and [e[2] for e in core.events] == ["CalibrationTableTooLarge"]
    # the operator's next sample starts a table over rather than read it
    assert s.record([(KEY, sample(2))]) == 1
    assert len(core.obj["data"][DATA_KEY].encode()) <= module.MAX_TABLE_BYTES


def test_a_table_is_parsed_once_per_resource_version(monkeypatch: pytest.MonkeyPatch) -> None:
    from ctxfit.controller.kube import calibration as module

    core = FakeCore()
    s = store(core)
    s.record([(KEY, sample(1))])
    parses: list[int] = []
    real = module.yaml.load
    monkeypatch.setattr(module.yaml, "load", lambda text, Loader: parses.append(len(text)) or real(text, Loader))
    for _ in range(5):
        s._cached = None
        s.table()
    assert len(parses) == 1 and core.reads >= 5


def test_the_operator_never_writes_more_than_a_table_holds() -> None:
    """The text stays under ``MAX_TABLE_BYTES`` even with the longest names Kubernetes allows: the keys sampled least
    recently go first (``fit``); a table of more keys than ``MAX_ENTRIES`` loses the least recent on ``add``."""
    from ctxfit.budget.calibrate import MAX_ENTRIES, CalibrationTable
    from ctxfit.controller.kube.calibration import MAX_TABLE_BYTES, fit

    def big(i: int, j: int) -> Sample:
        return Sample(f"{'u' * 36}-{i}/{j}", "n" * 63 + "/" + "s" * 253, -(1 << 30), 1 << 40, 1 << 40,
                      f"2026-12-01T{i // 60:02d}:{i % 60:02d}:{j:02d}Z", 80 << 30, 81 << 30)

    table = CalibrationTable()
    for i in range(MAX_ENTRIES + 10):
        for j in range(20):
            table.add(CalibrationKey("vllm", "0.19", f"GPU-{i:03d}", 1, 1), big(i, j))
    assert len(table.entries) == MAX_ENTRIES
    assert CalibrationKey("vllm", "0.19", "GPU-009", 1, 1) not in table.entries, "the least recent went first"
    text = fit(table)
    assert len(text.encode()) <= MAX_TABLE_BYTES and len(table.entries) >= MAX_ENTRIES // 4
    newest = CalibrationKey("vllm", "0.19", f"GPU-{MAX_ENTRIES + 9:03d}", 1, 1)
    assert newest in table.entries
    core = FakeCore()
    core.obj = {"metadata": {"name": "ctxfit-calibration", "resourceVersion": "5", "labels": {
        "app.kubernetes.io/managed-by": "ctxfit", "app.kubernetes.io/component": "calibration"}},
        "data": {DATA_KEY: text}}
    s = store(core)
    assert s.record([(CalibrationKey("vllm", "0.19", "GPU-new", 1, 1), big(999, 0))]) == 1
    assert len(core.obj["data"][DATA_KEY].encode()) <= MAX_TABLE_BYTES
    s._cached = None
    after = s.table()
    assert CalibrationKey("vllm", "0.19", "GPU-new", 1, 1) in after.entries and newest in after.entries
    assert not after.problems


def test_a_configmap_ctxfit_did_not_write_is_only_read() -> None:
    core = FakeCore()
    core.obj = {"metadata": {"name": "ctxfit-calibration", "resourceVersion": "3"}, "data": {DATA_KEY: _wire(-1 << 30)}}
    s = store(core)
    assert s.record([(KEY, sample(1))]) == 0 and core.writes == 0
    assert [e[2] for e in core.events] == ["CalibrationConfigMapNotOwned"]
    assert KEY in s.table().entries, "still read for planning"


def test_reconcile_plans_through_a_hostile_configmap() -> None:
    """The operator keeps planning every server whatever the ConfigMap holds."""
    from ctxfit.controller.reconcile import reconcile

    from tests.unit.controller.builders import RTX

    kube = FakeKube(server())
    rt = runtime(kube)
    core = FakeCore()
    core.obj = {"metadata": {"name": "cal", "resourceVersion": "1", "labels": {}},
                "data": {DATA_KEY: "entries:\n" + "".join(
                    f"- {{engine: vllm, version: '0.19', gpu: x, tp: 1, pp: 1, samples: [{{id: a{i}, "
                    f"residualBytes: .inf}}, {{id: b{i}, residualBytes: .nan}}]}}\n" for i in range(300))}}
    rt.calibration = CalibrationStore(kube_of(core), "ctxfit-system", "cal")
    first = reconcile(rt, "ns", "kimi-k25", (RTX,), ())
    assert first.stored is not None and first.stored["status"]["plan"]["fits"]
    assert [e[2] for e in core.events] == ["CalibrationEntryDropped"]
