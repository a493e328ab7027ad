"""README's inference-gateway example is manifests/llama31-8b-gateway.yaml (so `kubectl apply -f` is what the
README shows), its servers plan to the contexts the README states, and each server of it is valid."""

from __future__ import annotations

import re
from pathlib import Path

import yaml
from ctxfit.api import InferenceServer
from ctxfit.budget.multinode import plan_group

ROOT = Path(__file__).resolve().parents[3]
MANIFEST = ROOT / "manifests" / "llama31-8b-gateway.yaml"


def _readme_block() -> list[dict[str, object]]:
    text = (ROOT / "README.md").read_text()
    match = re.search(r"<!-- gateway-example -->\s*```yaml\n(.*?)```", text, re.DOTALL)
    assert match
    return [d for d in yaml.safe_load_all(match.group(1)) if d]


def test_readme_example_is_the_manifest() -> None:
    assert _readme_block() == [d for d in yaml.safe_load_all(MANIFEST.read_text()) if d]


def test_the_two_servers_hold_what_the_readme_says() -> None:
    servers = [InferenceServer.model_validate(d) for d in _readme_block() if d["kind"] == "InferenceServer"]
    contexts = {s.metadata.name: plan_group(s.spec)[0].context_length for s in servers}
    assert contexts == {"llama31-8b-h200": 131072, "llama31-8b-l4": 24576}
    readme = (ROOT / "README.md").read_text()
    assert "holds 131072 tokens" in readme and "holds 24576" in readme
    pools = {s.spec.routing.inference_pool.pool_name(s.metadata.name) for s in servers
             if s.spec.routing.inference_pool is not None}
    assert pools == {"llama31-8b"}
    assert {s.spec.routing.served_model_name for s in servers} == {"llama-3.1-8b"}
    assert len({s.spec.gpu.product for s in servers}) == 2
