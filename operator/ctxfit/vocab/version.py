"""Engine version parsing for version-dependent behaviour ("0.11.0", "v0.5.23", "0.8.5.dev169+g...")."""

from __future__ import annotations

import re

_VERSION = re.compile(r"^v?(\d+)\.(\d+)(?:\.(\d+))?")


def parse_version(text: str | None, *, default: tuple[int, int, int]) -> tuple[int, int, int]:
    """(major, minor, patch) from a version string; ``default`` when absent or unparseable."""
    if not text:
        return default
    match = _VERSION.match(text.strip())
    if not match:
        return default
    return int(match.group(1)), int(match.group(2)), int(match.group(3) or 0)
