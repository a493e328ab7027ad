"""The CRD generated from the pydantic models: checked in without drift, structural, with CEL rules."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any, get_args

import pytest
import yaml
from ctxfit.api import InferenceServerSpec
from ctxfit.api.crd import CEL_RULES, QUANTITY_PATTERN, build_crd
from ctxfit.api.spec import MemorySpec
from ctxfit.api.speculative import SpeculativeMethod, SpeculativeSpec
from ctxfit.api.validation import ENV_VAR_NAME, IMAGE_REFERENCE, LABEL_VALUE
from ctxfit.cli import main
from ctxfit.cli.crd import render_crd
from pydantic import ValidationError

REPO = Path(__file__).resolve().parents[3]
CRD_FILE = REPO / "crds" / "inferenceservers.ctxfit.io.yaml"


def _schema() -> dict[str, Any]:
    schema: dict[str, Any] = build_crd()["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    return schema


def _walk(node: Any, path: str = "") -> Iterator[tuple[str, dict[str, Any]]]:
    if isinstance(node, dict):
        yield path, node
        for key, value in node.get("properties", {}).items():
            yield from _walk(value, f"{path}.{key}")
        if isinstance(node.get("items"), dict):
            yield from _walk(node["items"], f"{path}[]")
        if isinstance(node.get("additionalProperties"), dict):
            yield from _walk(node["additionalProperties"], f"{path}{{}}")


def test_checked_in_crd_matches_the_models() -> None:
    """Regenerate with `make crd` (or `ctxfit crd > crds/inferenceservers.ctxfit.io.yaml`)."""
    assert CRD_FILE.read_text() == render_crd("yaml"), "crds/ is stale: run `make crd`"


def test_cli_prints_the_crd(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["crd", "-o", "yaml"]) == 0
    assert yaml.safe_load(capsys.readouterr().out) == build_crd()


@pytest.mark.parametrize("forbidden", ["$ref", "$defs", "title", "default", "const", "allOf", "oneOf"])
def test_structural_schema_has_no_unsupported_keys(forbidden: str) -> None:
    bad = [path for path, node in _walk(_schema()) if forbidden in node]
    assert not bad, f"{forbidden} at {bad}"


def test_every_node_has_a_type_or_is_int_or_string() -> None:
    untyped = [p for p, n in _walk(_schema()) if "type" not in n and not n.get("x-kubernetes-int-or-string")]
    assert not untyped


def test_additional_properties_never_beside_properties() -> None:
    assert not [p for p, n in _walk(_schema()) if "properties" in n and "additionalProperties" in n]


def test_spec_is_not_nullable_status_is() -> None:
    """Nulls in the spec are pruned (CEL rules stay simple); the operator writes nulls in status.effective."""
    spec_nullable = [p for p, n in _walk(_schema()["properties"]["spec"]) if n.get("nullable")]
    assert not spec_nullable
    effective = _schema()["properties"]["status"]["properties"]["effective"]["properties"]
    assert effective["memFractionStatic"]["nullable"] is True


def test_every_spec_field_is_in_the_schema() -> None:
    spec = _schema()["properties"]["spec"]["properties"]
    for name, info in InferenceServerSpec.model_fields.items():
        assert (info.alias or name) in spec


@pytest.mark.parametrize(("path", "expected"), [
    (".spec.gpu.count", {"minimum": 1, "maximum": 64}),
    (".spec.engine.kind", {"enum": ["vllm", "sglang"]}),
    (".spec.memory.kvCacheDtype", {"enum": list(get_args(MemorySpec.model_fields["kv_cache_dtype"].annotation))}),
    (".spec.context.headroom", {"minimum": 0.0, "maximum": 1.0, "exclusiveMaximum": True}),
    (".spec.memory.gpuMemoryUtilization", {"minimum": 0.0, "exclusiveMinimum": True, "maximum": 1.0}),
    (".spec.model.weightsPerGPU", {"x-kubernetes-int-or-string": True, "pattern": QUANTITY_PATTERN}),
    (".spec.pod.labels", {"additionalProperties": {"type": "string", "maxLength": 63, "pattern": LABEL_VALUE}}),
    (".spec.engine.env[].valueFrom", {"type": "object"}),
    (".spec.engine.env[].name", {"pattern": ENV_VAR_NAME}),
    (".spec.pod.tolerations[].operator", {"enum": ["Exists", "Equal"]}),
    (".spec.engine.image", {"pattern": IMAGE_REFERENCE}),
], ids=lambda v: v if isinstance(v, str) else "")
def test_bounds_enums_and_markers(path: str, expected: dict[str, Any]) -> None:
    node = dict(_walk(_schema()))[path]
    for key, value in expected.items():
        assert node[key] == value, (path, key, node)


def test_cel_rules_are_attached() -> None:
    schema = _schema()
    spec = schema["properties"]["spec"]
    assert [r["message"] for r in spec["x-kubernetes-validations"]] == \
        [r["message"] for r in CEL_RULES["InferenceServerSpec"]]
    assert spec["properties"]["context"]["x-kubernetes-validations"] == CEL_RULES["ContextSpec"]
    assert spec["properties"]["model"]["properties"]["architecture"]["x-kubernetes-validations"] == \
        CEL_RULES["Architecture"]
    assert "gpu.count" in spec["x-kubernetes-validations"][0]["rule"]


def test_names_status_and_columns() -> None:
    crd = build_crd()
    version = crd["spec"]["versions"][0]
    assert crd["spec"]["names"]["shortNames"] == ["infsrv"]
    assert version["subresources"] == {"status": {}}
    columns = {c["name"]: c["jsonPath"] for c in version["additionalPrinterColumns"]}
    assert columns["Context"] == ".status.contextLength"
    assert columns["Target"] == ".spec.context.target"
    assert columns["Pool"] == ".status.routing.pool"
    assert list(columns) == ["Model", "Engine", "GPUs", "Context", "KV Tokens", "Target", "Replicas", "Pool",
                             "Phase", "Ready", "Age"]
    conditions = version["schema"]["openAPIV3Schema"]["properties"]["status"]["properties"]["conditions"]
    assert conditions["x-kubernetes-list-type"] == "map"


def test_speculative_rules_are_cel_at_admission() -> None:
    """``SpeculativeSpec._draft_matches_method`` is also CEL on ``spec.speculative``: an edit that breaks it is
    refused by the API server instead of taking a running server to Failed (tests/e2e/test_operator.py INVALID)."""
    crd = build_crd()
    spec = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]
    rules = spec["properties"]["speculative"]["x-kubernetes-validations"]
    assert rules == CEL_RULES["SpeculativeSpec"]
    # the CEL rule's method list is exactly the methods the pydantic validator refuses without a draft
    needs_draft = {m for m in SpeculativeMethod
                   if not _accepted({"method": m.value} | ({"mtpLayers": 1} if m is SpeculativeMethod.MTP else {}))}
    assert needs_draft == {m for m in SpeculativeMethod if f"'{m.value}'" in rules[0]["rule"]}
    # each rule refuses what the validator refuses, naming the same field (a spec breaking only that rule)
    breaking = [{"method": "draft"}, {"method": "ngram", "draft": {"name": "org/d"}},
                {"method": "ngram", "mtpLayers": 1}, {"method": "mtp", "promptLookupMax": 4}]
    for rule, spec in zip(rules, breaking, strict=True):
        field = rule["message"].split(":", 1)[0]
        with pytest.raises(ValidationError, match=re.escape(field)):
            SpeculativeSpec.model_validate(spec)
        assert f"self.{field.split('.')[-1]}" in rule["rule"], rule


def _accepted(spec: dict[str, object]) -> bool:
    try:
        SpeculativeSpec.model_validate(spec)
    except ValidationError:
        return False
    return True


def test_every_spec_list_and_string_is_bounded() -> None:
    """A list without ``maxItems`` (or a string without ``maxLength``) gives CEL rules an unbounded cost estimate and
    lets one object carry megabytes of entries: every spec node is bounded (enums and quantities are by their
    values). Status is written by the operator alone."""
    spec = _schema()["properties"]["spec"]
    unbounded = [path for path, node in _walk(spec, ".spec")
                 if (node.get("type") == "array" and "maxItems" not in node)
                 or (node.get("type") == "string" and not {"maxLength", "enum", "format"} & node.keys())]
    assert unbounded == []
