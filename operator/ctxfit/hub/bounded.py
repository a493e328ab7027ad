"""A bounded wait for the CLI's own Hub downloads (``ctxfit plan --fetch-config``: config.json, adapter_config.json).

``hf_hub_download`` first asks for the file's metadata (a HEAD, ``etag_timeout``); when that fails and the file is
not cached, huggingface_hub asks again with its own 60 s timeout and up to 5 retries with backoff
(``file_download._ETAG_RETRY_TIMEOUT``, ``utils/_http.http_backoff``): about 6 minutes against a Hub or proxy that
accepts the connection and never answers, and the failure then reads like a missing cache. The CLI instead gives
one fetch ``metadata + download`` seconds (``cli_timeouts``) and then says, in one line, that the Hub did not answer.
The Hub's environment variables are checked here too, before huggingface_hub is imported (it reads them then):
``timeout_problem``, ``endpoint_problem``.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable
from typing import TypeVar

from .errors import ResolveError, ResolveKind

T = TypeVar("T")

CLI_HUB_TIMEOUT_SECONDS = 4.0
"""Seconds the CLI waits for each of the two steps of one file fetch (metadata, download) unless set otherwise."""

MAX_HUB_TIMEOUT_SECONDS = 3600.0
"""The most a timeout variable may say (``inf`` or ``1e300`` mean this): a socket or thread-join timeout past the
platform's time_t fails with OverflowError, which huggingface_hub's error then reads as a bad checkpoint."""

HF_TIMEOUTS = ("HF_HUB_ETAG_TIMEOUT", "HF_HUB_DOWNLOAD_TIMEOUT")
"""huggingface_hub's own timeout variables: it reads them with ``int()`` when it is imported."""
CTXFIT_TIMEOUT = "CTXFIT_HUB_TIMEOUT_SECONDS"
"""ctxfit's own: seconds one Hub request may wait (``cli_timeouts``, ``resolve.hub_timeout``)."""


def env_seconds(name: str) -> float | None:
    """Environment variable ``name`` as a positive number of seconds (at most ``MAX_HUB_TIMEOUT_SECONDS``), None when
    unset or not one (non-numeric, zero, negative, nan)."""
    try:
        value = float(os.environ.get(name) or "")
    except ValueError:
        return None
    return min(value, MAX_HUB_TIMEOUT_SECONDS) if value > 0 else None


def timeout_problem() -> str | None:
    """One line naming a set timeout variable that cannot be used, else None: a ``HF_TIMEOUTS`` variable
    huggingface_hub cannot use (it reads them with ``int()`` on import: ``abc``, ``1.5`` or an empty value make
    ``import huggingface_hub`` raise "invalid literal for int()"; a negative one reaches the socket, "Timeout value
    out of range", read as a bad checkpoint), or a non-empty ``CTXFIT_TIMEOUT`` that ``env_seconds`` would ignore
    (not a positive number: the default would be used without a word)."""
    for name in HF_TIMEOUTS:
        raw = os.environ.get(name)
        if raw is None:
            continue
        try:
            ok = int(raw) >= 0
        except ValueError:
            ok = False
        if not ok:
            shown = raw if len(raw) <= 40 else raw[:40] + "..."
            return (f"{name}={shown!r} is not a whole number of seconds (huggingface_hub reads it with int()); "
                    f"unset it or set e.g. {name}=10")
    raw = os.environ.get(CTXFIT_TIMEOUT)
    if raw and env_seconds(CTXFIT_TIMEOUT) is None:
        shown = raw if len(raw) <= 40 else raw[:40] + "..."
        return (f"{CTXFIT_TIMEOUT}={shown!r} is not a positive number of seconds; "
                f"unset it or set e.g. {CTXFIT_TIMEOUT}=10")
    return None


def endpoint_fault(url: str) -> str | None:
    """Why ``url`` is not a Hub endpoint huggingface_hub can send to (an http(s) URL with a host and a port in
    0..65535), else None. An empty value, a missing scheme or a port out of range fail every request before it is
    sent (``httpx.UnsupportedProtocol``; ``ValueError: Port out of range`` on ``import huggingface_hub``, which
    parses ``HF_ENDPOINT``): a setting to fix, not a Hub that is down."""
    from urllib.parse import urlsplit

    if not url:
        return "is empty"
    try:
        parts = urlsplit(url)
        _ = parts.port  # raises on a port out of range or not a number
        ok = parts.scheme in ("http", "https") and bool(parts.hostname)
    except ValueError as exc:  # an unbalanced IPv6 bracket, a bad port
        return f"is not a URL ({exc})"
    return None if ok else "is not an http(s) URL"


def endpoint_problem() -> str | None:
    """One line when ``HF_ENDPOINT`` is set (empty included) to something ``endpoint_fault`` refuses, else None."""
    raw = os.environ.get("HF_ENDPOINT")
    fault = None if raw is None else endpoint_fault(raw)
    if raw is None or fault is None:
        return None
    shown = raw if len(raw) <= 80 else raw[:80] + "..."
    return (f"HF_ENDPOINT={shown!r} {fault}; set it to the http(s) URL of the Hub or a mirror "
            "(e.g. https://huggingface.co), or unset it")


def environment_problem() -> str | None:
    """The first of ``endpoint_problem`` and ``timeout_problem`` (one line), else None."""
    return endpoint_problem() or timeout_problem()


def cli_timeouts() -> tuple[float, float]:
    """(metadata, download) seconds one CLI file fetch may wait for the Hub: ``HF_HUB_ETAG_TIMEOUT`` and
    ``HF_HUB_DOWNLOAD_TIMEOUT`` (huggingface_hub's own variables) when set, else ``CTXFIT_HUB_TIMEOUT_SECONDS`` for
    both, else ``CLI_HUB_TIMEOUT_SECONDS`` each (the whole fetch: 8 s)."""
    base = env_seconds(CTXFIT_TIMEOUT) or CLI_HUB_TIMEOUT_SECONDS
    return env_seconds("HF_HUB_ETAG_TIMEOUT") or base, env_seconds("HF_HUB_DOWNLOAD_TIMEOUT") or base


def within(seconds: float, call: Callable[[], T], repo: str, endpoint: str) -> T:
    """``call()``'s result, waiting at most ``seconds`` for it (it runs in a daemon thread, left behind past the
    deadline: for a process that exits on the error, the CLI).

    Raises:
        ResolveError: ``HUB_UNREACHABLE`` past the deadline, naming ``endpoint`` and the seconds waited.
        Exception: whatever ``call`` raised.
    """
    result: list[T] = []
    error: list[BaseException] = []

    def run() -> None:
        try:
            result.append(call())
        except BaseException as exc:  # noqa: BLE001 - re-raised in the caller's thread
            error.append(exc)

    worker = threading.Thread(target=run, name="ctxfit-hub-fetch", daemon=True)
    worker.start()
    worker.join(seconds)
    if worker.is_alive():
        raise ResolveError(ResolveKind.HUB_UNREACHABLE, repo, f"no answer from {endpoint} in {seconds:g} s "
                           "(HF_HUB_ETAG_TIMEOUT + HF_HUB_DOWNLOAD_TIMEOUT)")
    if error:
        raise error[0]
    return result[0]
