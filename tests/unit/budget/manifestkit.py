"""The example manifests (manifests/*.yaml) as specs, shared by the planner tests."""

from __future__ import annotations

from pathlib import Path

import yaml
from ctxfit.api import InferenceServer, InferenceServerSpec

ROOT = Path(__file__).resolve().parents[3]


def manifest(name: str) -> InferenceServerSpec:
    doc = yaml.safe_load((ROOT / "manifests" / name).read_text())
    return InferenceServer.model_validate(doc).spec
