"""The JSON types of a manifest checked against the CRD's structural schema, as the API server checks them before
anything else (apiextensions-apiserver ``pkg/apiserver/validation``, kube-openapi ``validate``: "must be of type
integer"): pydantic's lax mode would read ``count: true`` or ``target: "131072"`` as numbers that the API server
refuses. Only types are checked here; bounds, patterns and rules stay the models'."""

from __future__ import annotations

from collections.abc import Mapping
from functools import cache
from typing import Any

JSON_TYPES = {"integer": "an integer", "number": "a number", "boolean": "a boolean", "string": "a string",
              "object": "an object", "array": "a list"}


@cache
def server_schema() -> Mapping[str, Any]:
    """The InferenceServer CRD's ``openAPIV3Schema`` (``crd.build_crd``; built once per process, ~0.1 s)."""
    from .crd import build_crd

    schema: Mapping[str, Any] = build_crd()["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    return schema


def _shown(value: Any) -> str:
    kind = "boolean" if isinstance(value, bool) else "integer" if isinstance(value, int) else \
        "number" if isinstance(value, float) else "string" if isinstance(value, str) else \
        "object" if isinstance(value, dict) else "list" if isinstance(value, list) else type(value).__name__
    text = repr(value)
    return f"{kind} {text if len(text) <= 40 else text[:40] + '...'}"


def _is(kind: str, value: Any) -> bool:
    if kind == "integer":  # a YAML 2.0 is the JSON number 2.0, which the API server takes as an integer
        return (isinstance(value, int) and not isinstance(value, bool)) or (
            isinstance(value, float) and value.is_integer())
    if kind == "number":
        return isinstance(value, int | float) and not isinstance(value, bool)
    return isinstance(value, {"boolean": bool, "string": str, "object": dict, "array": list}[kind])


def type_error(schema: Mapping[str, Any], value: Any, path: str = "") -> str | None:
    """The first value in ``value`` whose JSON type the structural ``schema`` does not allow, as one line
    (``spec.resources.gpus.count: must be an integer (got boolean True)``); None when every type matches.

    Follows ``properties``, ``additionalProperties`` and ``items``; ``x-kubernetes-int-or-string`` allows an
    integer or a string; a null is left to the models (the API server drops a null for a field that is not
    ``nullable``); keys the schema does not name are left to the models too (they refuse unknown fields)."""
    if value is None:
        return None
    where = path or "the document"
    if schema.get("x-kubernetes-int-or-string"):
        ok = _is("integer", value) or isinstance(value, str)
        return None if ok else f"{where}: must be an integer or a string (got {_shown(value)})"
    kind = schema.get("type")
    if kind in JSON_TYPES and not _is(kind, value):
        return f"{where}: must be {JSON_TYPES[kind]} (got {_shown(value)})"
    if isinstance(value, dict):
        properties = schema.get("properties") or {}
        extra = schema.get("additionalProperties")
        for key, item in value.items():
            sub = properties.get(key) if isinstance(key, str) else None
            if sub is None and isinstance(extra, Mapping):
                sub = extra
            if sub is not None:
                found = type_error(sub, item, f"{path}.{key}" if path else str(key))
                if found:
                    return found
    elif isinstance(value, list) and isinstance(schema.get("items"), Mapping):
        for index, item in enumerate(value):
            found = type_error(schema["items"], item, f"{where}[{index}]")
            if found:
                return found
    return None
