"""The single-node golden cases (``tests/golden/<case>/inferenceserver.yaml``) and ``render_input``, the planned
RenderInput of one of them, shared by the rendering, drift and converge tests."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml
from ctxfit.api import InferenceServer
from ctxfit.budget.planner import plan
from ctxfit.render import RenderInput

GOLDEN = Path(__file__).resolve().parents[2] / "golden"
CASES = sorted(p.name for p in GOLDEN.iterdir() if (p / "inferenceserver.yaml").exists())
UID = "00000000-0000-4000-8000-000000000005"


def render_input(case: str, *, attempt: int = 1, replicas: int | None = None, image: str | None = None,
                 **effective_update: Any) -> RenderInput:
    server = InferenceServer.model_validate(yaml.safe_load((GOLDEN / case / "inferenceserver.yaml").read_text()))
    result = plan(server.spec)
    assert result.fits, result.reasons
    effective = result.effective.model_copy(update=effective_update)
    return RenderInput(name=server.metadata.name, namespace="inference", uid=UID, spec=server.spec,
                       effective=effective, attempt=attempt, gpu_product=server.spec.gpu.product,
                       image=image, replicas=replicas)
