"""Leader election on a ``coordination.k8s.io/v1`` Lease, so two operator replicas never act at once.

Used when ``CTXFIT_PEERING`` names the Lease; only the holder reconciles. Takeover: docs/design/architecture.md.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable
from datetime import UTC, datetime, timedelta

from kubernetes.client.exceptions import ApiException

from .answers import conflict
from .protocol import KubeClient
from .rest import LEASES

logger = logging.getLogger(__name__)


def micro_time(when: datetime) -> str:
    """``when`` as a Kubernetes ``MicroTime`` (RFC 3339, microseconds, UTC: ``2026-12-02T04:20:00.123456Z``)."""
    return when.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def parse_micro_time(text: object) -> datetime | None:
    """A ``MicroTime``/``Time`` string as an aware datetime; None when absent or unreadable (counts as expired)."""
    if not isinstance(text, str) or not text:
        return None
    try:
        parsed = datetime.fromisoformat(text)
    except ValueError:
        return None
    return parsed if parsed.tzinfo is not None else parsed.replace(tzinfo=UTC)


class LeaderElector:
    """Acquire/renew the Lease every ``lease_seconds / 3``; call ``on_elected`` on becoming leader."""

    def __init__(self, kube: KubeClient, name: str, namespace: str, identity: str, lease_seconds: float,
                 on_elected: Callable[[], None]) -> None:
        self.kube, self.name, self.namespace, self.identity = kube, name, namespace, identity
        self.lease_seconds = lease_seconds
        self.on_elected = on_elected
        self.is_leader = not name
        self._stopping = asyncio.Event()

    def _try_acquire(self) -> bool:
        rest = self.kube.rest
        now = datetime.now(UTC)
        duration = int(self.lease_seconds)
        lease = rest.read(LEASES, self.namespace, self.name)
        if lease is None:
            body = {"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
                    "metadata": {"name": self.name, "namespace": self.namespace},
                    "spec": {"holderIdentity": self.identity, "leaseDurationSeconds": duration,
                             "acquireTime": micro_time(now), "renewTime": micro_time(now), "leaseTransitions": 0}}
            try:
                rest.call("POST", LEASES, self.namespace, body=body)
                return True
            except ApiException as create_exc:
                if conflict(create_exc):
                    return False
                raise
        spec = lease.get("spec") or {}
        lease["spec"] = spec
        holder = spec.get("holderIdentity") or ""
        renewed = parse_micro_time(spec.get("renewTime") or spec.get("acquireTime"))
        expired = renewed is None or renewed + timedelta(seconds=spec.get("leaseDurationSeconds") or duration) < now
        if holder and holder != self.identity and not expired:
            return False
        if holder != self.identity:
            spec["acquireTime"] = micro_time(now)
            spec["leaseTransitions"] = (spec.get("leaseTransitions") or 0) + 1
        spec.update(holderIdentity=self.identity, renewTime=micro_time(now), leaseDurationSeconds=duration)
        try:  # PUT with the read resourceVersion: compare-and-swap
            rest.call("PUT", LEASES, self.namespace, self.name, body=lease)
            return True
        except ApiException as exc:
            if conflict(exc):
                return False
            raise

    def _release(self) -> None:
        rest = self.kube.rest
        try:
            lease = rest.read(LEASES, self.namespace, self.name)
            spec = (lease or {}).get("spec")
            if lease is not None and isinstance(spec, dict) and spec.get("holderIdentity") == self.identity:
                spec["holderIdentity"] = ""
                spec.pop("renewTime", None)
                rest.call("PUT", LEASES, self.namespace, self.name, body=lease)
        except ApiException:
            pass

    async def run(self) -> None:
        """Loop until ``stop()``; a no-op when standalone."""
        if not self.name:
            return
        while not self._stopping.is_set():
            try:
                acquired = await asyncio.to_thread(self._try_acquire)
            except Exception as exc:  # noqa: BLE001 - the API may be briefly unreachable
                logger.warning("leader election: %s", exc)
                acquired = False
            if acquired and not self.is_leader:
                logger.info("leader election: %s now holds lease %s/%s", self.identity, self.namespace, self.name)
                self.is_leader = True
                self.on_elected()
            elif not acquired and self.is_leader:
                logger.warning("leader election: lost lease %s/%s; pausing", self.namespace, self.name)
                self.is_leader = False
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._stopping.wait(), timeout=self.lease_seconds / 3)

    async def stop(self) -> None:
        """Stop renewing and hand the Lease over at once."""
        self._stopping.set()
        if self.name and self.is_leader:
            self.is_leader = False
            await asyncio.to_thread(self._release)
