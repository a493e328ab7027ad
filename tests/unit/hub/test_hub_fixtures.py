"""The fixture repos are real: each config.json is a cited public file, and the generated tensors reproduce the
published figures models.yaml quotes (index total_size, Hub API parameter counts by dtype, real safetensors dumps).

A layout in tests/hubfixtures/layouts.py that drifts from the real checkpoint fails here.
"""

from __future__ import annotations

import json
import math
import re
from collections import Counter
from typing import Any

import pytest
import yaml
from ctxfit.engines.vllm.weights import RULES as VLLM
from ctxfit.engines.weights import Layout, estimate_weights
from ctxfit.vocab.checkpoint import Checkpoint, group_tensors

from tests.hubfixtures.repos import FIXTURES, HUB, config_of, fixture_entries, generated_tensors, real_tensors

ENTRIES = list(fixture_entries().values())
URL = re.compile(r"https://github\.com/[\w.-]+/[\w.-]+/blob/[0-9a-f]{40}/\S+")


def _with(check: str) -> list[dict[str, Any]]:
    return [e for e in ENTRIES if check in (e.get("checks") or {})]


def test_every_config_is_a_cited_public_file() -> None:
    assert len(ENTRIES) >= 20
    text = FIXTURES.read_text(encoding="utf-8")
    assert "recalled" not in text.lower()
    for e in ENTRIES:
        assert URL.fullmatch(e["source"]["url"]), e["repo"]
        assert e["source"]["how"]
        config = json.loads((HUB / "configs" / e["config"]).read_text(encoding="utf-8"))
        assert isinstance(config, dict) and config.get("architectures"), e["repo"]
        for name, src in (e.get("extraFiles") or {}).items():
            assert URL.fullmatch(src["url"]) and (HUB / "configs" / f"{e['repo'].replace('/', '--')}--{name}").is_file()
    catalog = yaml.safe_load(text).get("catalogConfigs") or []
    assert all(URL.fullmatch(e["source"]["url"]) for e in catalog)
    on_disk = {p.name for p in (HUB / "configs").iterdir()}
    cited = {e["config"] for e in ENTRIES + catalog} | {f"{e['repo'].replace('/', '--')}--{n}" for e in ENTRIES
                                                        for n in e.get("extraFiles") or {}}
    assert on_disk == cited  # no stray copies


def test_the_families_the_issue_names_are_present() -> None:
    families = " ".join(e["family"] for e in ENTRIES)
    for family in ("dense GQA", "MLA", "MoE", "sliding window", "hybrid", "multimodal", "FP8"):
        assert family in families, family


@pytest.mark.parametrize("entry", _with("totalSize"), ids=lambda e: e["repo"])
def test_generated_tensors_reproduce_the_index_total_size(entry: dict[str, Any]) -> None:
    expected = entry["checks"]["totalSize"]
    assert expected["source"]
    assert sum(t.nbytes for t in generated_tensors(entry)) == expected["bytes"]


@pytest.mark.parametrize("entry", _with("dtypeParams"), ids=lambda e: e["repo"])
def test_generated_tensors_reproduce_the_parameters_by_dtype(entry: dict[str, Any]) -> None:
    by_dtype: Counter[str] = Counter()
    for t in generated_tensors(entry):
        by_dtype[t.dtype] += math.prod(t.shape)
    assert dict(by_dtype) == entry["checks"]["dtypeParams"]["params"]


@pytest.mark.parametrize("entry", _with("params"), ids=lambda e: e["repo"])
def test_generated_tensors_reproduce_the_parameter_count(entry: dict[str, Any]) -> None:
    assert sum(math.prod(t.shape) for t in generated_tensors(entry)) == entry["checks"]["params"]["count"]


@pytest.mark.parametrize("entry", [e for e in ENTRIES if e.get("tensors")], ids=lambda e: e["repo"])
def test_generated_layout_matches_the_real_safetensors_dump(entry: dict[str, Any]) -> None:
    real = {t.name: t.shape for t in real_tensors(entry) or []}
    generated = {t.name: t.shape for t in generated_tensors(entry)}
    not_generated = set(entry["tensors"].get("notGenerated") or {})
    assert set(real) - set(generated) == not_generated
    assert set(generated) <= set(real)
    assert {n: s for n, s in real.items() if n in generated} == generated


def test_a_stored_head_of_a_tied_model_is_not_loaded() -> None:
    """Qwen3-0.6B stores lm_head.weight next to a tied embedding: vLLM skips it (``tie_word_embeddings``), so the
    per-GPU weights are the tensors without it."""
    entry = fixture_entries()["Qwen/Qwen3-0.6B"]
    tensors = real_tensors(entry) or []
    checkpoint = Checkpoint(group_tensors(tensors), ("model.safetensors",), sum(t.nbytes for t in tensors))
    est = estimate_weights(checkpoint, config_of(entry), Layout(tp=1, pp=1), VLLM)
    head = next(t.nbytes for t in tensors if t.name == "lm_head.weight")
    assert est.per_gpu_bytes - est.buffers_bytes == sum(t.nbytes for t in tensors) - head


def test_models_yaml_is_plain_yaml() -> None:
    assert yaml.safe_load(FIXTURES.read_text(encoding="utf-8"))["models"] == ENTRIES
