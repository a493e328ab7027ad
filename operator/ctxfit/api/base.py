"""Shared pydantic configuration: camelCase on the wire, unknown fields rejected."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict
from pydantic.alias_generators import to_camel


class WireModel(BaseModel):
    """Base of every API model: snake_case in Python, camelCase on the wire, ``extra="forbid"``."""

    model_config = ConfigDict(
        alias_generator=to_camel,
        populate_by_name=True,
        extra="forbid",
        validate_assignment=False,
        frozen=False,
    )

    def to_wire(self) -> dict[str, object]:
        """The object as Kubernetes stores it: camelCase keys, no unset optionals."""
        return self.model_dump(by_alias=True, exclude_none=True, mode="json")
