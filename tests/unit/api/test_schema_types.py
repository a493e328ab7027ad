"""Manifest JSON types are checked against the CRD's structural schema as the API server checks them: pydantic's lax
mode alone would plan ``count: true`` or ``target: "131072"``, which ``kubectl apply`` refuses."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest
import yaml
from ctxfit.api.schema_types import server_schema, type_error

REPO = Path(__file__).resolve().parents[3]


def manifest(name: str = "llama31-8b-h100.yaml") -> dict[str, Any]:
    loaded: dict[str, Any] = yaml.safe_load((REPO / "manifests" / name).read_text())
    return loaded


@pytest.mark.parametrize("path", sorted((REPO / "manifests").glob("*.yaml")), ids=lambda p: p.name)
def test_every_shipped_manifest_has_the_schema_types(path: Path) -> None:
    for doc in yaml.safe_load_all(path.read_text()):
        if isinstance(doc, dict) and doc.get("kind") == "InferenceServer":
            assert type_error(server_schema(), doc) is None


@pytest.mark.parametrize(("where", "value", "line"), [
    (("spec", "gpu", "count"), True, "spec.gpu.count: must be an integer (got boolean True)"),
    (("spec", "gpu", "count"), "1", "spec.gpu.count: must be an integer (got string '1')"),
    (("spec", "gpu", "count"), 1.5, "spec.gpu.count: must be an integer (got number 1.5)"),
    (("spec", "context", "target"), "131072", "spec.context.target: must be an integer (got string '131072')"),
    (("spec", "gpu"), [1], "spec.gpu: must be an object (got list [1])"),
    (("spec", "engine", "args"), "--enforce-eager", "spec.engine.args: must be a list (got string '--enforce-eager')"),
])
def test_a_wrong_type_is_one_line_naming_the_field(where: tuple[str, ...], value: Any, line: str) -> None:
    doc = manifest()
    node = doc
    for key in where[:-1]:
        node = node.setdefault(key, {})
    node[where[-1]] = value
    assert type_error(server_schema(), doc) == line


def test_what_the_api_server_also_takes() -> None:
    doc = manifest()
    doc["spec"]["gpu"]["count"] = 1.0  # the JSON number 1.0 is an integer to the API server
    assert type_error(server_schema(), doc) is None
    assert type_error({"x-kubernetes-int-or-string": True}, "70Gi") is None
    assert type_error({"x-kubernetes-int-or-string": True}, 75161927680) is None
    assert type_error({"x-kubernetes-int-or-string": True}, True) == \
        "the document: must be an integer or a string (got boolean True)"
    assert type_error({"type": "integer", "nullable": True}, None) is None


def test_list_items_and_maps_are_followed() -> None:
    schema = {"type": "object", "properties": {"xs": {"type": "array", "items": {"type": "integer"}}},
              "additionalProperties": {"type": "string"}}
    assert type_error(schema, {"xs": [1, "2"]}) == "xs[1]: must be an integer (got string '2')"
    assert type_error(schema, {"other": 3}) == "other: must be a string (got integer 3)"
    assert type_error(schema, copy.deepcopy({"xs": [1, 2], "other": "ok"})) is None
