"""The pure reconcile pass: ``converge(Snapshot) -> Outcome`` (no kopf, no API client, no I/O)."""

from .flow import converge
from .types import Outcome, Snapshot

__all__ = ["Outcome", "Snapshot", "converge"]
