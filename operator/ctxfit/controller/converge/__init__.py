"""The pure reconcile pass: ``converge(Snapshot) -> Outcome`` (no kopf, no API client, no I/O)."""

from .flow import Outcome, Snapshot, converge

__all__ = ["Outcome", "Snapshot", "converge"]
