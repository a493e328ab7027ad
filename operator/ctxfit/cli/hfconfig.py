"""Reading a Hugging Face ``config.json`` for ``ctxfit plan``: a local file, or huggingface_hub's download.

The mapping to an ``Architecture`` is pure and lives in ``ctxfit.vocab.hfconfig``; this module does the I/O.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from .load import ManifestError


def load_hf_config(path: str | Path, flag: str = "--hf-config") -> dict[str, Any]:
    """Read a config.json file.

    Raises:
        ManifestError (a ValueError): one line naming ``flag``: unreadable, not UTF-8, not JSON, not an object.
    """
    try:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
    except OSError as exc:
        raise ManifestError(f"{flag}: cannot read {path}: {exc.strerror or exc}") from exc
    except UnicodeDecodeError:
        raise ManifestError(f"{flag}: {path} is not UTF-8 text") from None
    except (json.JSONDecodeError, RecursionError) as exc:
        raise ManifestError(f"{flag}: {path} is not valid JSON ({str(exc).splitlines()[0][:80]})") from None
    if not isinstance(data, dict):
        raise ManifestError(f"{flag}: {path} is not a JSON object")
    return data


def fetch_hf_config(repo_id: str, *, revision: str | None = None, filename: str = "config.json") -> dict[str, Any]:
    """Download ``filename`` (``config.json``, or a LoRA adapter's ``adapter_config.json``) of ``repo_id`` with
    huggingface_hub (needs network; HF_TOKEN for gated repos).

    Raises:
        ValueError: when the download fails (offline, gated, missing).
    """
    try:
        from huggingface_hub import hf_hub_download

        path = hf_hub_download(repo_id=repo_id, filename=filename, revision=revision)
    except Exception as exc:  # huggingface_hub raises many types (offline, 401, 404)
        raise ValueError(f"cannot fetch {filename} of {repo_id}: {exc}") from exc
    return load_hf_config(path, "--fetch-config")

