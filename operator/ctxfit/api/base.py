"""Shared pydantic configuration: camelCase on the wire, unknown fields rejected."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict
from pydantic.alias_generators import to_camel


class WireModel(BaseModel):
    """Base of every API model: snake_case in Python, camelCase on the wire, ``extra="forbid"``.

    A string literal right below a field is its description (``use_attribute_docstrings``); the CRD and
    ``docs/api-reference.md`` are generated from it (``ctxfit.api.fielddocs``).
    """

    model_config = ConfigDict(
        alias_generator=to_camel,
        populate_by_name=True,
        extra="forbid",
        validate_assignment=False,
        frozen=False,
        use_attribute_docstrings=True,
    )

    def to_wire(self) -> dict[str, object]:
        """The object as Kubernetes stores it: camelCase keys, no unset optionals."""
        return self.model_dump(by_alias=True, exclude_none=True, mode="json")
