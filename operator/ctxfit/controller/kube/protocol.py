"""``KubeClient``: what the reconcile and the I/O helpers use of the API client (``client.Kube`` is the one
implementation; a test fakes this, or serves ``rest`` from ``tests/unit/controller/kube/fakeapi.py``)."""

from __future__ import annotations

from typing import Any, Protocol

from ..views.workloads import ServiceView
from .rest import Rest


class KubeClient(Protocol):
    """The operator's API calls (every one through ``rest``; see ``client.Kube`` for each method's contract)."""

    rest: Rest
    instance: str

    def get_server(self, namespace: str, name: str) -> dict[str, Any] | None:
        """The InferenceServer as a dict, None when gone."""

    def replace_status(self, body: dict[str, Any], status: dict[str, Any]) -> dict[str, Any]:
        """PUT status with the read ``resourceVersion``; raises ``Conflict`` on 409."""

    def get_deployment(self, namespace: str, name: str) -> dict[str, Any] | None:
        """The Deployment as a dict, None when absent."""

    def service_port(self, namespace: str, name: str) -> ServiceView | None:
        """Service ``name`` as a ``ServiceView``, None when absent."""

    def apply(self, obj: dict[str, Any], *, exists: bool, via: tuple[str, ...] = ()) -> None:
        """Create or replace the server's Deployment or Service (``ownership.Foreign`` when not the server's)."""

    def scale_to_zero(self, namespace: str, name: str, owner: str) -> None:
        """The server's Deployment's replicas to 0 (guarded; absent is fine)."""

    def pod_events(self, namespace: str, pod: str, limit: int = 20) -> list[str]:
        """A pod's Event messages, newest last ([] when unreadable)."""

    def log_tail(self, namespace: str, pod: str, container: str, *, previous: bool, lines: int) -> str:
        """A container's log tail ("" when unavailable)."""

    def log_head(self, namespace: str, pod: str, container: str, *, limit_bytes: int) -> str | None:
        """The first ``limit_bytes`` of a container's log (None when it could not be read)."""

    def post_event(self, server: dict[str, Any], type_: str, reason: str, message: str) -> None:
        """An Event on the InferenceServer (best effort)."""

    def post_object_event(self, involved: dict[str, Any], type_: str, reason: str, message: str) -> None:
        """An Event on ``involved`` (an ObjectReference; best effort)."""
