"""``ctxfit plan -f`` plans every fixture repo with nothing but ``model.name`` in the spec: models in no catalog are
resolved from the local Hub stand-in (the real huggingface_hub client through HF_ENDPOINT), catalog models from
the catalog (the offline seed). Run as a user runs it: the CLI in a child process."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from ctxfit.catalog import lookup_model

from tests.hubfixtures.repos import fixture_entries
from tests.hubfixtures.server import TOKEN, hub_env

ROOT = Path(__file__).resolve().parents[3]


def _spec(repo: str) -> dict[str, object]:
    return {"apiVersion": "ctxfit.io/v1alpha1", "kind": "InferenceServer", "metadata": {"name": "fixture"},
            "spec": {"model": {"name": repo}, "engine": {"kind": "vllm", "version": "0.19.0"},
                     "gpu": {"product": "NVIDIA-H200", "count": 8}, "parallelism": {"tensor": 8},
                     "context": {"target": 4096, "minimum": 1024}}}


@pytest.mark.parametrize("repo", list(fixture_entries()))
def test_plan_resolves_and_plans_every_fixture_repo(repo: str, tmp_path: Path) -> None:
    path = tmp_path / "server.yaml"
    path.write_text(yaml.safe_dump(_spec(repo)))
    env = hub_env(str(tmp_path)) | {"HF_TOKEN": TOKEN}  # the gated fixtures need the stand-in's token
    out = subprocess.run([sys.executable, "-m", "ctxfit.cli", "plan", "-f", str(path), "-o", "json"],
                         capture_output=True, text=True, cwd=ROOT, timeout=300, env=env)
    assert out.returncode in (0, 3), out.stderr  # 3: planned, does not fit (DeepSeek-V3 on 8 x H200 at TP 8 does)
    doc = json.loads(out.stdout)
    assert doc["perGPU"]["weightsBytes"] > 0
    if lookup_model(repo) is None:
        assert any("resolved from hub" in r for r in doc["reasons"]), doc["reasons"]
