"""Leader election on a Lease over ``Rest`` (``controller/kube/leader.py``), against the in-memory API server: who
acquires, renews, takes over an expired Lease, hands it over on release, and loses a compare-and-swap race."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from ctxfit.controller.kube.client import Kube
from ctxfit.controller.kube.leader import LeaderElector, micro_time, parse_micro_time

from tests.unit.controller.kube.fakeapi import FakeApiServer

NS, LEASE = "ctxfit-system", "ctxfit-leader"
KEY = ("coordination.k8s.io", "leases", NS, LEASE)


def elector(api: FakeApiServer, identity: str, lease_seconds: float = 15.0) -> LeaderElector:
    return LeaderElector(Kube(api.api_client(), instance=identity), LEASE, NS, identity, lease_seconds, lambda: None)


def spec(api: FakeApiServer) -> dict[str, Any]:
    stored = api.get(*KEY)
    assert stored is not None
    out: dict[str, Any] = stored["spec"]
    return out


def test_the_first_replica_creates_the_lease_and_the_second_waits() -> None:
    api = FakeApiServer()
    a, b = elector(api, "a"), elector(api, "b")
    assert a._try_acquire()
    created = spec(api)
    assert created["holderIdentity"] == "a" and created["leaseDurationSeconds"] == 15
    assert created["leaseTransitions"] == 0 and parse_micro_time(created["renewTime"]) is not None
    assert not b._try_acquire(), "a fresh lease held by another replica"
    assert spec(api)["holderIdentity"] == "a"
    assert a._try_acquire(), "the holder renews"
    assert spec(api)["leaseTransitions"] == 0
    assert [r.method for r in api.writes()] == ["POST", "PUT"], "b wrote nothing"


def test_an_expired_lease_is_taken_over_and_counted() -> None:
    api = FakeApiServer()
    a, b = elector(api, "a"), elector(api, "b")
    assert a._try_acquire()
    stale = micro_time(datetime.now(UTC) - timedelta(seconds=60))
    api.objects[KEY]["spec"].update(renewTime=stale, acquireTime=stale)
    assert b._try_acquire()
    taken = spec(api)
    assert taken["holderIdentity"] == "b" and taken["leaseTransitions"] == 1 and taken["acquireTime"] != stale
    assert not a._try_acquire(), "the old holder sees the new one"


def test_a_release_hands_the_lease_over_at_once() -> None:
    api = FakeApiServer()
    a, b = elector(api, "a"), elector(api, "b")
    assert a._try_acquire()
    b._release()  # not the holder: nothing changes
    assert spec(api)["holderIdentity"] == "a"
    a._release()
    released = spec(api)
    assert released["holderIdentity"] == "" and "renewTime" not in released
    assert b._try_acquire() and spec(api)["holderIdentity"] == "b"


def test_a_lost_compare_and_swap_is_not_leadership() -> None:
    """Another replica wrote the Lease between the read and the PUT (409 on the resourceVersion): not acquired."""
    api = FakeApiServer()
    a, b = elector(api, "a"), elector(api, "b")
    assert a._try_acquire()
    api.objects[KEY]["spec"]["renewTime"] = micro_time(datetime.now(UTC) - timedelta(seconds=60))

    def renew_meanwhile(server: FakeApiServer, method: str, key: tuple[str, str, str, str]) -> None:
        if method == "PUT" and key == KEY:
            server.objects[KEY]["metadata"]["resourceVersion"] += "0"

    api.before_write = renew_meanwhile
    assert not b._try_acquire()
    assert spec(api)["holderIdentity"] == "a"


def test_micro_time_round_trips_and_reads_what_the_api_server_writes() -> None:
    now = datetime(2026, 12, 2, 4, 20, 0, 123456, tzinfo=UTC)
    assert micro_time(now) == "2026-12-02T04:20:00.123456Z"
    assert parse_micro_time(micro_time(now)) == now
    assert parse_micro_time("2026-12-02T04:20:00Z") == now.replace(microsecond=0)
    assert parse_micro_time(None) is None and parse_micro_time("yesterday") is None
