"""Kubernetes quantities at the API edge, bytes (int) inside.

A quantity string ("75Gi", "97887Mi", "37G", "500Gi") is parsed with
``kubernetes.utils.parse_quantity`` (the client's own parser, Decimal-exact) and rounded up to a
whole byte. Formatting back picks the largest binary suffix that represents the value exactly.
"""

from __future__ import annotations

import math
from decimal import Decimal, InvalidOperation
from typing import Annotated

from kubernetes.utils.quantity import parse_quantity
from pydantic import BeforeValidator

KiB = 1 << 10
MiB = 1 << 20
GiB = 1 << 30
TiB = 1 << 40


def quantity_to_bytes(value: str | int | float) -> int:
    """Parse a Kubernetes quantity into whole bytes (rounded up).

    Raises:
        ValueError: when the text is not a quantity (message names the value).
    """
    try:
        parsed = parse_quantity(value)  # type: ignore[no-untyped-call]
    except (ValueError, InvalidOperation, TypeError) as exc:
        raise ValueError(f"{value!r} is not a Kubernetes quantity (e.g. 80Gi, 512Mi, 37G)") from exc
    if not Decimal(parsed).is_finite():
        raise ValueError(f"{value!r} is not a finite quantity")
    return math.ceil(Decimal(parsed))


def bytes_to_quantity(n_bytes: int) -> str:
    """Format bytes as the shortest exact binary quantity: 805306368000 -> "750Gi"."""
    if n_bytes < 0:
        raise ValueError(f"negative size {n_bytes}")
    for suffix, unit in (("Ti", TiB), ("Gi", GiB), ("Mi", MiB), ("Ki", KiB)):
        if n_bytes >= unit and n_bytes % unit == 0:
            return f"{n_bytes // unit}{suffix}"
    return str(n_bytes)


def _canonical_quantity(value: object) -> object:
    """Accept ints (bytes) and strings; keep the user's spelling after checking it parses."""
    if isinstance(value, bool):
        raise ValueError("a quantity must be a string such as 80Gi or a number of bytes")
    if isinstance(value, int | float):
        if not value > 0 or value == float("inf"):
            raise ValueError(f"must be a positive, finite quantity, got {value!r}")
        return str(value)
    if isinstance(value, str):
        stripped = value.strip()
        n_bytes = quantity_to_bytes(stripped)
        if n_bytes <= 0:
            raise ValueError(f"must be a positive quantity, got {value!r}")
        return stripped
    raise ValueError("a quantity must be a string such as 80Gi or a number of bytes")


Quantity = Annotated[str, BeforeValidator(_canonical_quantity)]
"""A positive Kubernetes quantity, stored as the user wrote it. Use ``quantity_to_bytes`` to read it."""


def check_quantity_bounds(value: str | None, *, upper_bytes: int, lower_bytes: int = 1) -> str | None:
    """Reject absurd sizes (negative, zero, or above ``upper_bytes``).

    Raises:
        ValueError: with the bound in the message.
    """
    if value is None:
        return None
    n_bytes = quantity_to_bytes(value)
    if n_bytes < lower_bytes:
        raise ValueError(f"{value!r} is below the minimum of {bytes_to_quantity(lower_bytes)}")
    if n_bytes > upper_bytes:
        raise ValueError(f"{value!r} is above the maximum of {bytes_to_quantity(upper_bytes)}")
    return value


CPU_MIN_CORES = Decimal("0.001")
"""1 millicore: the API server's precision for cpu (apimachinery ``resource.Quantity`` milli-units)."""
CPU_MAX_CORES = Decimal(4096)
"""4096 cores: above any node's capacity; the renderer passes ``resources.cpu`` to the Deployment as is."""


def check_cpu_bounds(value: str | None) -> str | None:
    """Reject a cpu quantity outside [1m, 4096] cores (e.g. ``1e30``, which the API server would store).

    Raises:
        ValueError: unparsable, or outside the bounds (the bound is in the message).
    """
    if value is None:
        return None
    try:
        cores = Decimal(parse_quantity(value))  # type: ignore[no-untyped-call]
    except (ValueError, InvalidOperation, TypeError) as exc:
        raise ValueError(f"{value!r} is not a Kubernetes quantity (e.g. 8, 500m)") from exc
    if not cores.is_finite() or cores < CPU_MIN_CORES:
        raise ValueError(f"{value!r} is below the minimum of 1m")
    if cores > CPU_MAX_CORES:
        raise ValueError(f"{value!r} is above the maximum of {CPU_MAX_CORES} cores")
    return value
