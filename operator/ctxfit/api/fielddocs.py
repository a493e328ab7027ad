"""Field descriptions for the CRD and the field reference, from the API models themselves.

A field's description is, in order: its attribute docstring or ``Field(description=...)`` (pydantic,
``use_attribute_docstrings`` in ``base.WireModel``), else its entry in the class docstring's Google-style
``Attributes:`` section. A field with a plain default gets ``Default: `value`.`` appended, because the CRD
carries no defaults (the stored object is what the user wrote; see ``crd.py``). The class description is
the class docstring without its ``Attributes:`` section.
"""

from __future__ import annotations

import inspect
import json
import re
from enum import Enum
from typing import Any

from pydantic import BaseModel
from pydantic_core import PydanticUndefined

_SECTION = re.compile(r"^\s*Attributes:\s*$", re.MULTILINE)
_ENTRY = re.compile(r"^(\s+)(\w+):\s*(.*)$")


def class_summary(cls: type[BaseModel]) -> str | None:
    """The class docstring up to its ``Attributes:`` section (None when there is no docstring)."""
    doc = inspect.getdoc(cls) if cls.__doc__ else None
    if not doc:
        return None
    return _SECTION.split(doc, maxsplit=1)[0].strip() or None


def attributes_section(cls: type[BaseModel]) -> dict[str, str]:
    """``{python_field_name: text}`` from the class docstring's ``Attributes:`` section (continuation lines joined)."""
    doc = inspect.getdoc(cls) if cls.__doc__ else None
    if not doc or not _SECTION.search(doc):
        return {}
    body = _SECTION.split(doc, maxsplit=1)[1]
    entries: dict[str, str] = {}
    current: str | None = None
    indent: int | None = None
    for line in body.splitlines():
        if not line.strip():
            continue
        match = _ENTRY.match(line)
        if match and (indent is None or len(match.group(1)) == indent):
            indent = len(match.group(1))
            current = match.group(2)
            entries[current] = match.group(3).strip()
        elif current is not None and indent is not None and len(line) - len(line.lstrip()) > indent:
            entries[current] += " " + line.strip()
        else:
            break
    return entries


def _default_text(value: Any) -> str | None:
    if value is PydanticUndefined or value is None:
        return None
    if isinstance(value, Enum):
        value = value.value
    if isinstance(value, BaseModel) or (isinstance(value, (list, dict)) and not value):
        return None
    return value if isinstance(value, str) else json.dumps(value)


def field_descriptions(cls: type[BaseModel]) -> dict[str, str]:
    """``{wire_name: description}`` for every field of ``cls`` that has one (see the module docstring)."""
    fallback = attributes_section(cls)
    out: dict[str, str] = {}
    for name, info in cls.model_fields.items():
        text = info.description or fallback.get(name)
        if not text:
            continue
        text = text.strip()
        default = _default_text(info.default) if info.default_factory is None else None
        if default is not None and "Default:" not in text:
            text = f"{text.rstrip('.')}. Default: `{default}`."
        out[info.alias or name] = text
    return out


def document_schema(json_schema: dict[str, Any], cls: type[BaseModel]) -> None:
    """Set the descriptions of ``cls``'s JSON schema (in place): class summary and one per property."""
    summary = class_summary(cls)
    if summary:
        json_schema["description"] = summary
    properties = json_schema.get("properties", {})
    for wire_name, text in field_descriptions(cls).items():
        if wire_name in properties:
            properties[wire_name]["description"] = text
