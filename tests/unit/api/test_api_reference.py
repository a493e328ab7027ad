"""Field descriptions: every CRD field (spec and status) is documented, and the field reference is in sync."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from ctxfit.api.base import WireModel
from ctxfit.api.crd import build_crd, model_schema
from ctxfit.api.fielddocs import attributes_section, class_summary, field_descriptions
from ctxfit.api.reference import render_reference
from ctxfit.cli import main

REPO = Path(__file__).resolve().parents[3]
REFERENCE = REPO / "docs/api-reference.md"


def _schema() -> dict[str, Any]:
    schema: dict[str, Any] = build_crd()["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    return schema


def _fields(node: dict[str, Any], path: str = "") -> Iterator[tuple[str, dict[str, Any]]]:
    """Every property (at any depth, through list items and map values) with its wire path."""
    for name, child in node.get("properties", {}).items():
        yield f"{path}.{name}", child
        yield from _fields(child, f"{path}.{name}")
    if isinstance(node.get("items"), dict):
        yield from _fields(node["items"], f"{path}[]")
    if isinstance(node.get("additionalProperties"), dict):
        yield from _fields(node["additionalProperties"], f"{path}{{}}")


@pytest.mark.parametrize("root", ["spec", "status"])
def test_every_field_has_a_description(root: str) -> None:
    fields = list(_fields(_schema()["properties"][root], f".{root}"))
    assert len(fields) > 20
    undocumented = [path for path, node in fields if not str(node.get("description", "")).strip()]
    assert not undocumented, f"add a docstring below each field in operator/ctxfit/api: {undocumented}"


def test_top_level_keys_are_documented() -> None:
    """All but metadata: Kubernetes forbids specifying anything for it in a CRD schema."""
    top = _schema()["properties"]
    assert top["metadata"] == {"type": "object"}
    assert all(node.get("description") for key, node in top.items() if key != "metadata")


def test_fields_with_a_plain_default_state_it() -> None:
    props = _schema()["properties"]["spec"]["properties"]
    assert props["serving"]["properties"]["port"]["description"].endswith("Default: `8000`.")
    assert props["memory"]["properties"]["kvCacheDtype"]["description"].endswith("Default: `auto`.")
    assert props["attempts"]["description"].endswith("Default: `5`.")


@pytest.mark.parametrize(
    ("path", "words"),
    [
        ("context.minimum", ["tokens", "Unset: 4096"]),
        ("context.headroom", ["Unset: 0.25"]),
        ("gpu.product", ["nvidia.com/gpu.product"]),
        ("resources.shm", ["/dev/shm", "Unset:"]),
        ("memory.gpuMemoryUtilization", ["vLLM only", "Forbidden with sglang"]),
    ],
    ids=["minimum", "headroom", "product", "shm", "utilization"],
)
def test_spec_descriptions_give_unit_default_and_rule(path: str, words: list[str]) -> None:
    node = _schema()["properties"]["spec"]
    for part in path.split("."):
        node = node["properties"][part]
    assert all(word in node["description"] for word in words), node["description"]


class _Documented(WireModel):
    """A model for the tests.

    Attributes:
        from_section: described in the class docstring,
            over two lines.
        both: the section loses to the docstring.
    """

    from_section: int = 3
    both: str = "x"
    """Attribute docstring wins."""
    plain: bool = False
    """A flag"""


def test_attribute_docstring_then_attributes_section_then_default() -> None:
    assert attributes_section(_Documented) == {
        "from_section": "described in the class docstring, over two lines.",
        "both": "the section loses to the docstring.",
    }
    assert class_summary(_Documented) == "A model for the tests."
    assert field_descriptions(_Documented) == {
        "fromSection": "described in the class docstring, over two lines. Default: `3`.",
        "both": "Attribute docstring wins. Default: `x`.",
        "plain": "A flag. Default: `false`.",
    }
    schema = model_schema(_Documented)
    assert schema["description"] == "A model for the tests."
    assert schema["properties"]["plain"]["description"] == "A flag. Default: `false`."


def test_checked_in_reference_matches_the_models() -> None:
    """Regenerate with `make crd` (or `ctxfit crd -o markdown > docs/api-reference.md`)."""
    assert REFERENCE.read_text() == render_reference(), "docs/api-reference.md is stale: run `make crd`"


def test_reference_lists_every_field() -> None:
    text = render_reference()
    for path, _ in _fields(_schema()["properties"]["spec"], ".spec"):
        section, _, name = path[1:].rpartition(".")
        assert f"## `{section}`" in text and f"| `{name}` |" in text, path


def test_cli_prints_the_reference(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["crd", "-o", "markdown"]) == 0
    assert capsys.readouterr().out == render_reference()


def test_readme_links_the_reference() -> None:
    assert "docs/api-reference.md" in (REPO / "README.md").read_text()
