"""What resolution of ``spec.model`` found: the config, the checkpoint's tensors, where they came from (pure).

Produced by ``ctxfit.hub`` (Hugging Face Hub / mirror / HF cache / a local directory) or read back from the
operator's shared resolution; consumed by ``ctxfit.budget.planner.plan``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from .checkpoint import Checkpoint, checkpoint_format


@dataclass(frozen=True)
class ModelSource:
    """A resolved model.

    Attributes:
        config: config.json as a dict.
        checkpoint: tensor groups from the safetensors headers (or file sizes with ``fallback``), None when only
            the config was read.
        origin: ``hub`` | ``volume`` | ``local`` | ``cache`` | ``spec`` | ``catalog``.
        repo: repository id (or the directory for ``local``/``volume``).
        revision: the revision asked for (branch, tag or commit).
        commit: the resolved commit sha, when known.
    """

    config: dict[str, Any]
    checkpoint: Checkpoint | None = None
    origin: str = "hub"
    repo: str = ""
    revision: str | None = None
    commit: str | None = None

    @property
    def weight_format(self) -> str:
        """``checkpoint_format`` of config and checkpoint."""
        return checkpoint_format(self.config, self.checkpoint)

    def describe(self) -> str:
        """One line for the plan's reasons: where the config and tensors came from."""
        at = f"@{self.commit[:12]}" if self.commit else (f"@{self.revision}" if self.revision else "")
        return f"{self.origin} {self.repo}{at}"
