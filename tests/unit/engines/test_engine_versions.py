"""``ctxfit.engines.versions``: the releases each engine package models, read from its flag table, and the typed
coverage of a spec's version (or its image's tag); an unmodelled release is planned as the nearest modelled one."""

from __future__ import annotations

from typing import Any

import pytest
import yaml
from ctxfit.api import EngineKind, InferenceServerSpec
from ctxfit.budget.planner import plan
from ctxfit.engines.sglang.flags import TABLE as SGLANG_FLAGS
from ctxfit.engines.versions import VersionCoverage, check_version, image_tag, modelled_range
from ctxfit.engines.vllm.flags import TABLE as VLLM_FLAGS

from tests.unit.controller.builders import REPO


def _spec(manifest: str = "llama31-8b-h100.yaml", **engine: Any) -> InferenceServerSpec:
    body = yaml.safe_load((REPO / "manifests" / manifest).read_text())["spec"]
    body["engine"] = {k: v for k, v in {**body["engine"], **engine}.items() if v is not None}
    return InferenceServerSpec.model_validate(body)


def test_the_ranges_come_from_the_flag_tables_read() -> None:
    vllm, sglang = modelled_range(EngineKind.VLLM), modelled_range(EngineKind.SGLANG)
    assert vllm.last == tuple(int(p) for p in VLLM_FLAGS.versions_read.split("-")[1].split("."))
    assert sglang.last == tuple(int(p) for p in SGLANG_FLAGS.versions_read.split("-")[1].split("."))
    assert vllm.first == (0, 6, 0), "V0's accounting is fitted on start-ups from 0.6.4 (before the wheels read)"
    assert sglang.first == (0, 4, 0)
    assert vllm.text() == "0.6.0 - 0.33.x" and sglang.text() == "0.4.0 - 0.5.23"


@pytest.mark.parametrize(("manifest", "engine", "coverage"), [
    ("llama31-8b-h100.yaml", {"version": "0.19.0"}, VersionCoverage.MODELLED),
    ("llama31-8b-h100.yaml", {"version": "v0.33.2"}, VersionCoverage.MODELLED),
    ("llama31-8b-h100.yaml", {"version": "0.6.4"}, VersionCoverage.MODELLED),
    ("llama31-8b-h100.yaml", {"version": "0.5.4"}, VersionCoverage.OLDER),
    ("llama31-8b-h100.yaml", {"version": "0.34.0"}, VersionCoverage.NEWER),
    ("llama31-8b-h100.yaml", {"version": "1.0.0"}, VersionCoverage.NEWER),
    ("llama31-8b-h100.yaml", {"version": None}, VersionCoverage.MODELLED),
    ("llama31-8b-h100.yaml", {"version": None, "image": "vllm/vllm-openai:v0.20.1"}, VersionCoverage.MODELLED),
    ("llama31-8b-h100.yaml", {"version": None, "image": "vllm/vllm-openai:v0.19.0"}, VersionCoverage.NOT_SET),
    ("llama31-8b-h100.yaml", {"version": None, "image": "vllm/vllm-openai:latest"}, VersionCoverage.UNKNOWN),
    ("llama31-8b-h100.yaml", {"version": None, "image": "reg.example.com:5000/vllm"}, VersionCoverage.UNKNOWN),
    ("llama31-8b-h100.yaml", {"version": None, "image": "vllm/vllm-openai@sha256:" + "a" * 64},
     VersionCoverage.UNKNOWN),
    ("dsv4-flash-512k.yaml", {"version": "0.5.23"}, VersionCoverage.MODELLED),
    ("dsv4-flash-512k.yaml", {"version": "0.5.24"}, VersionCoverage.NEWER),
    ("dsv4-flash-512k.yaml", {"version": "0.3.9"}, VersionCoverage.OLDER),
], ids=lambda v: str(v))
def test_coverage(manifest: str, engine: dict[str, Any], coverage: VersionCoverage) -> None:
    check = check_version(_spec(manifest, **engine))
    assert check.coverage is coverage
    assert check.ok is (coverage is VersionCoverage.MODELLED)
    assert "\n" not in check.message() and check.message()


def test_image_tag() -> None:
    assert image_tag("vllm/vllm-openai:v0.19.0") == "v0.19.0"
    assert image_tag("reg.example.com:5000/team/vllm:0.19.0-cu128@sha256:" + "b" * 64) == "0.19.0-cu128"
    assert image_tag("reg.example.com:5000/team/vllm") is None and image_tag(None) is None


@pytest.mark.parametrize(("manifest", "outside", "nearest"), [
    ("llama31-8b-h100.yaml", "0.40.0", "0.33.0"),
    ("llama31-8b-h100.yaml", "0.4.0", "0.6.0"),
    ("dsv4-flash-512k.yaml", "0.5.30", "0.5.23"),
])
def test_an_unmodelled_release_is_planned_as_the_nearest_modelled_one(manifest: str, outside: str,
                                                                       nearest: str) -> None:
    """What the message says is what the plan does: every budget term, the context and the flags are the nearest
    modelled release's."""
    check = check_version(_spec(manifest, version=outside))
    assert ".".join(map(str, check.nearest)) == nearest and nearest in check.message()
    far, near = plan(_spec(manifest, version=outside)), plan(_spec(manifest, version=nearest))
    assert (far.per_gpu, far.context_length, far.max_context_length, far.engine_args) == \
        (near.per_gpu, near.context_length, near.max_context_length, near.engine_args)
