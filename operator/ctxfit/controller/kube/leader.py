"""Leader election on a ``coordination.k8s.io/v1`` Lease, so two operator replicas never act at once.

Used when ``CTXFIT_PEERING`` names the Lease; without it the operator is standalone (always leader).
Only the holder reconciles; the others keep their watches and indexes warm and take over when the
holder stops renewing for ``lease_seconds`` (or releases the Lease on a clean shutdown). Every
status write is also a compare-and-swap, so even a stale leader cannot overwrite newer state.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable
from datetime import UTC, datetime, timedelta

from kubernetes import client
from kubernetes.client.exceptions import ApiException

from .client import Kube

logger = logging.getLogger(__name__)


class LeaderElector:
    """Acquire/renew the Lease every ``lease_seconds / 3``; call ``on_elected`` on becoming leader."""

    def __init__(self, kube: Kube, name: str, namespace: str, identity: str, lease_seconds: float,
                 on_elected: Callable[[], None]) -> None:
        self.kube, self.name, self.namespace, self.identity = kube, name, namespace, identity
        self.lease_seconds = lease_seconds
        self.on_elected = on_elected
        self.is_leader = not name
        self._stopping = asyncio.Event()

    def _try_acquire(self) -> bool:
        api = self.kube.coordination
        now = datetime.now(UTC)
        duration = int(self.lease_seconds)
        try:
            lease = api.read_namespaced_lease(self.name, self.namespace)
        except ApiException as exc:
            if exc.status != 404:
                raise
            body = client.V1Lease(
                metadata=client.V1ObjectMeta(name=self.name, namespace=self.namespace),
                spec=client.V1LeaseSpec(holder_identity=self.identity, lease_duration_seconds=duration,
                                        acquire_time=now, renew_time=now, lease_transitions=0))
            try:
                api.create_namespaced_lease(self.namespace, body)
                return True
            except ApiException as create_exc:
                if create_exc.status == 409:
                    return False
                raise
        spec = lease.spec or client.V1LeaseSpec()
        lease.spec = spec
        holder = spec.holder_identity or ""
        renewed = spec.renew_time or spec.acquire_time
        expired = renewed is None or renewed + timedelta(seconds=spec.lease_duration_seconds or duration) < now
        if holder and holder != self.identity and not expired:
            return False
        if holder != self.identity:
            spec.acquire_time = now
            spec.lease_transitions = (spec.lease_transitions or 0) + 1
        spec.holder_identity, spec.renew_time, spec.lease_duration_seconds = self.identity, now, duration
        try:
            api.replace_namespaced_lease(self.name, self.namespace, lease)
            return True
        except ApiException as exc:
            if exc.status == 409:
                return False
            raise

    def _release(self) -> None:
        api = self.kube.coordination
        try:
            lease = api.read_namespaced_lease(self.name, self.namespace)
            if lease.spec is not None and lease.spec.holder_identity == self.identity:
                lease.spec.holder_identity = ""
                lease.spec.renew_time = None
                api.replace_namespaced_lease(self.name, self.namespace, lease)
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
