"""The multi-node golden cases (``tests/golden/multinode/<case>``) and ``render_input``, the planned RenderInput
of one of them, shared by the LeaderWorkerSet rendering and drift tests."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml
from ctxfit.api import InferenceServer
from ctxfit.budget.multinode import plan_group
from ctxfit.render import RenderInput

GOLDEN = Path(__file__).resolve().parents[2] / "golden" / "multinode"
CASES = sorted(p.name for p in GOLDEN.iterdir() if (p / "inferenceserver.yaml").exists())
UID = "00000000-0000-4000-8000-000000000013"


def render_input(case: str, **effective_update: Any) -> RenderInput:
    server = InferenceServer.model_validate(yaml.safe_load((GOLDEN / case / "inferenceserver.yaml").read_text()))
    result, _ = plan_group(server.spec)
    assert result.fits, result.reasons
    return RenderInput(name=server.metadata.name, namespace="inference", uid=UID, spec=server.spec,
                       effective=result.effective.model_copy(update=effective_update), attempt=1,
                       gpu_product=server.spec.gpu.product)
