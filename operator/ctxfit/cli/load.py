"""Reading InferenceServer manifests for the CLI: one clear error line naming the field."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml
from pydantic import ValidationError

from ctxfit.api import InferenceServer


class ManifestError(ValueError):
    """A manifest that cannot be read or validated; the message is one line naming the field."""


def _field_path(loc: tuple[int | str, ...]) -> str:
    parts = [str(p) for p in loc if not str(p).startswith("function-") and "[" not in str(p)]
    return ".".join(parts)


def validation_message(exc: ValidationError) -> str:
    """First pydantic error as ``field.path: rule`` (our own validators already start with the path)."""
    err = exc.errors()[0]
    msg = str(err.get("msg", "invalid"))
    msg = msg.removeprefix("Value error, ")
    path = _field_path(tuple(err.get("loc", ())))
    head = msg.split(" ", 1)[0]
    if head.endswith(":"):  # our validators start with the field they check, relative to their model
        field = head[:-1]
        segments = path.split(".") if path else []
        first = field.split(".")[0]
        if first in segments:
            segments = segments[: len(segments) - 1 - segments[::-1].index(first)]
        prefix = ".".join(segments)
        return f"{prefix}.{msg}" if prefix and not field.startswith(prefix) else msg
    extra = f" (got {err['input']!r})" if err.get("type") in ("literal_error", "enum") else ""
    return f"{path}: {msg}{extra}"


def load_manifest(path: str | Path) -> InferenceServer:
    """Load and validate one InferenceServer manifest (the first YAML document of kind InferenceServer).

    Raises:
        ManifestError: unreadable file, bad YAML, wrong kind, or a validation error (one line).
    """
    try:
        text = Path(path).read_text(encoding="utf-8")
    except OSError as exc:
        raise ManifestError(f"cannot read {path}: {exc.strerror}") from exc
    except UnicodeDecodeError as exc:
        raise ManifestError(f"{path}: not UTF-8 text") from exc
    try:
        docs = [d for d in yaml.safe_load_all(text) if d is not None]
    except yaml.YAMLError as exc:
        raise ManifestError(f"{path}: not valid YAML ({str(exc).splitlines()[0]})") from exc
    except (UnicodeDecodeError, RecursionError, ValueError) as exc:  # ValueError: e.g. a 5000-digit integer
        raise ManifestError(f"{path}: not a readable YAML text ({type(exc).__name__})") from exc
    servers = [d for d in docs if isinstance(d, dict) and d.get("kind") == "InferenceServer"]
    if not servers:  # a single kind-less mapping is taken as the InferenceServer
        servers = [d for d in docs if isinstance(d, dict) and "kind" not in d][:1] if len(docs) == 1 else []
    if not servers:
        raise ManifestError(f"{path}: no InferenceServer document found")
    if len(servers) > 1:
        raise ManifestError(f"{path}: {len(servers)} InferenceServer documents; plan one at a time")
    doc = servers[0]
    if "spec" not in doc:
        raise ManifestError("spec: required")
    try:
        return InferenceServer.model_validate(doc)
    except ValidationError as exc:
        raise ManifestError(validation_message(exc)) from exc


def read_yaml(path: str, flag: str) -> Any:
    """The YAML document in ``path`` for the option ``flag``. Raises ``ManifestError`` (a ``ValueError``) with one
    line naming the option: unreadable, not UTF-8, not valid YAML, nested too deeply, beyond the YAML constructor's
    limits."""
    try:
        text = Path(path).read_text(encoding="utf-8")
    except OSError as exc:
        raise ManifestError(f"{flag}: cannot read {path}: {exc.strerror}") from exc
    except UnicodeDecodeError:
        raise ManifestError(f"{flag}: {path} is not UTF-8 text") from None
    try:
        return yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise ManifestError(f"{flag}: {path} is not valid YAML ({str(exc).splitlines()[0]})") from exc
    except RecursionError:
        raise ManifestError(f"{flag}: {path} is nested too deeply") from None
    except ValueError as exc:  # the YAML constructor's own limits, e.g. an integer of > 4300 digits
        raise ManifestError(f"{flag}: {path} is not readable YAML ({str(exc).splitlines()[0][:80]})") from None
