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
    huggingface_hub (needs network; HF_TOKEN for gated repos), waiting at most ``ctxfit.hub.bounded.cli_timeouts``
    (metadata + download: 8 s unless HF_HUB_ETAG_TIMEOUT / HF_HUB_DOWNLOAD_TIMEOUT / CTXFIT_HUB_TIMEOUT_SECONDS say).

    Raises:
        ManifestError (a ValueError): one line when the download fails (a Hub that does not answer in time:
            ``HubUnreachable``; offline, gated, missing).
    """
    from ctxfit.hub.bounded import cli_timeouts, environment_problem, within
    from ctxfit.hub.resolve import _classify, bound_hub_requests, quiet_hub_logs

    problem = environment_problem()  # before huggingface_hub is imported: it would raise a bare ValueError
    if problem:
        raise ManifestError(problem)
    metadata, download = cli_timeouts()
    try:
        from huggingface_hub import constants, hf_hub_download

        bound_hub_requests()
        quiet_hub_logs()
        path = within(metadata + download, lambda: hf_hub_download(repo_id=repo_id, filename=filename,
                                                                   revision=revision, etag_timeout=metadata),
                      repo_id, constants.ENDPOINT)
    except Exception as exc:  # huggingface_hub raises many types (offline, 401, 404): one typed line
        raise ManifestError(f"cannot fetch {filename}: {_classify(exc, repo_id).line()}") from exc
    return load_hf_config(path, "--fetch-config")
