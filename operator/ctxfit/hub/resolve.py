"""Resolve a model from the Hub (or a mirror), the HF cache, or a local directory into a ``ModelSource``.

Hub: ``HfApi.model_info`` (resolved commit sha, file list with sizes), config.json with ``hf_hub_download`` at that
commit, and the safetensors headers with ``HfApi.get_safetensors_metadata`` (HTTP Range requests of the first bytes
of each shard; huggingface_hub reads more only when a header is longer). ``HF_ENDPOINT``, ``HF_TOKEN`` and
``HF_HUB_OFFLINE`` are huggingface_hub's own (read by it). Local: config.json and the first 8 + N bytes of each
``*.safetensors`` file. Without safetensors (``.bin``, GGUF) the weights fall back to file sizes, with a reason.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from ctxfit.vocab.checkpoint import Checkpoint, group_tensors
from ctxfit.vocab.modelsource import ModelSource
from ctxfit.vocab.safetensors import HeaderError, Tensor, header_length, parse_header, tensors_from_json

from .errors import ResolveError, ResolveKind

WEIGHT_SUFFIXES = (".bin", ".pt", ".pth", ".gguf")
MODELOPT_FILE = "hf_quant_config.json"
"""NVIDIA ModelOpt checkpoints describe their quantization here rather than in config.json (vLLM
``transformers_utils/config.py`` ``get_hf_file_to_dict("hf_quant_config.json")`` -> ``quant_method: modelopt``)."""


ADAPTER_FILE = "adapter_config.json"


def with_modelopt(config: dict[str, Any], hf_quant: dict[str, Any]) -> dict[str, Any]:
    """``config`` with ``quantization_config`` taken from a ModelOpt ``hf_quant_config.json`` (its ``quantization``
    block, ``quant_method: modelopt``), as vLLM reads it."""
    inner = hf_quant.get("quantization")
    block: dict[str, Any] = inner if isinstance(inner, dict) else hf_quant
    return config | {"quantization_config": {"quant_method": "modelopt", **block}}


NOT_FOUND_STATUSES = frozenset({400, 404, 410})
"""HTTP statuses that say the thing asked for is not there (permanent until the spec changes), when the answer
carries no Hub error code (``X-Error-Code``) huggingface_hub maps to a typed error; a 5xx, 408 or 429 is waiting."""


def _endpoint(exc: BaseException) -> str:
    """scheme://host:port of the request that failed (for the message), else ``the endpoint``."""
    request = getattr(getattr(exc, "response", None), "request", None)
    url = getattr(request, "url", None)
    host = getattr(url, "host", None)
    return f"{url.scheme}://{host}{f':{url.port}' if url.port else ''}" if url is not None and host else \
        "the endpoint"


def _classify(exc: BaseException, repo: str) -> ResolveError:  # noqa: C901 - one answer per Hub failure class
    """huggingface_hub / HTTP errors -> ``ResolveError`` (huggingface_hub ``errors.py`` class names)."""
    from huggingface_hub import errors as hf

    if isinstance(exc, ResolveError):
        return exc
    if isinstance(exc, hf.GatedRepoError):
        return ResolveError(ResolveKind.ACCESS_DENIED, repo, "no token, or the token has no access")
    if isinstance(exc, hf.RevisionNotFoundError):
        return ResolveError(ResolveKind.REVISION_NOT_FOUND, repo, "the revision does not exist")
    if isinstance(exc, hf.RepositoryNotFoundError):
        return ResolveError(ResolveKind.NOT_FOUND, repo, "no such repo (or private without a token)")
    if isinstance(exc, hf.DisabledRepoError):
        return ResolveError(ResolveKind.NOT_FOUND, repo, "the repo is disabled on the Hub")
    if isinstance(exc, hf.HFValidationError):  # checked by huggingface_hub before any request
        return ResolveError(ResolveKind.NOT_FOUND, repo, "spec.model.name is not a Hub repo id (owner/name) nor a "
                            "path inside a preloaded claim")
    if isinstance(exc, hf.OfflineModeIsEnabled | hf.LocalEntryNotFoundError):
        return ResolveError(ResolveKind.OFFLINE, repo, "offline and not in the local Hugging Face cache")
    if isinstance(exc, hf.EntryNotFoundError):
        return ResolveError(ResolveKind.INVALID_CHECKPOINT, repo, "config.json is missing")
    if isinstance(exc, hf.SafetensorsParsingError | HeaderError):
        return ResolveError(ResolveKind.INVALID_CHECKPOINT, repo, f"unreadable safetensors header ({exc})")
    if isinstance(exc, hf.HfHubHTTPError):
        status = getattr(getattr(exc, "response", None), "status_code", None)
        if status in (401, 403):
            return ResolveError(ResolveKind.ACCESS_DENIED, repo, f"HTTP {status}")
        if (status is not None and status >= 500) or status in (408, 429):
            return ResolveError(ResolveKind.HUB_UNREACHABLE, repo, f"HTTP {status} from the Hub")
        if status in NOT_FOUND_STATUSES:  # no X-Error-Code: no such route there, not a Hub that is down
            return ResolveError(ResolveKind.NOT_FOUND, repo, f"HTTP {status} from {_endpoint(exc)} without a Hub "
                                "error code (no such repo there, or HF_ENDPOINT is not a Hub or mirror)")
        return ResolveError(ResolveKind.HUB_UNREACHABLE, repo, f"HTTP {status}")
    if isinstance(exc, OSError) and exc.filename is not None and not isinstance(exc, TimeoutError | ConnectionError):
        # a local path (HF_HOME a file, a read-only or full disk): a setting to fix here, not a Hub that is down
        return ResolveError(ResolveKind.CACHE_UNUSABLE, repo, f"{type(exc).__name__}: {exc.strerror} ({exc.filename})")
    if isinstance(exc, OSError | TimeoutError | ConnectionError) or type(exc).__module__.startswith(("httpx",
                                                                                                        "httpcore")):
        return ResolveError(ResolveKind.HUB_UNREACHABLE, repo, f"{type(exc).__name__}: {str(exc)[:120]}")
    return ResolveError(ResolveKind.INVALID_CHECKPOINT, repo, f"{type(exc).__name__}: {str(exc)[:120]}")


HUB_TIMEOUT_SECONDS = 15.0
"""Connect/read timeout of every Hub request (``CTXFIT_HUB_TIMEOUT_SECONDS``): huggingface_hub's default client has
none (``utils/_http.py default_client_factory``: ``timeout=None``), so a Hub or proxy that accepts and never answers
would hang a plan forever; past it the resolution is ``HubUnreachable`` (waiting)."""
_BOUNDED = False


def hub_timeout() -> float:
    """``CTXFIT_HUB_TIMEOUT_SECONDS`` (a positive number, at most ``bounded.MAX_HUB_TIMEOUT_SECONDS``: ``inf`` made
    every request an OverflowError, read as a bad checkpoint) or ``HUB_TIMEOUT_SECONDS``."""
    from .bounded import env_seconds

    return env_seconds("CTXFIT_HUB_TIMEOUT_SECONDS") or HUB_TIMEOUT_SECONDS


def bound_hub_requests() -> None:
    """Give huggingface_hub's HTTP client a timeout (once per process; ``hub_timeout``): the requests that pass no
    timeout of their own (the safetensors header reads) use it; ``model_info`` and ``hf_hub_download`` get it
    explicitly (they pass their own, ``None`` by default for ``model_info``)."""
    global _BOUNDED
    if _BOUNDED:
        return
    from huggingface_hub.utils import _http

    seconds = hub_timeout()

    def bounded() -> Any:
        client = _http.default_client_factory()
        client.timeout = seconds
        return client

    _http.set_client_factory(bounded)
    _BOUNDED = True


def quiet_hub_logs() -> None:
    """huggingface_hub's own retry warnings off (the CLI prints one line per failure itself)."""
    from huggingface_hub.utils import logging as hf_logging

    hf_logging.set_verbosity_error()  # type: ignore[no-untyped-call]


def resolve_hub(repo: str, *, revision: str | None = None, token: str | bool | None = None,
                endpoint: str | None = None, offline: bool = False, cache_dir: str | None = None) -> ModelSource:
    """Resolve ``repo`` at ``revision`` from the Hub (``endpoint`` or ``HF_ENDPOINT``); ``offline`` reads only the
    local HF cache; ``cache_dir``: where config.json is downloaded (default: the HF cache).

    Raises:
        ResolveError: typed (unreachable, access denied, not found, revision not found, not cached, bad checkpoint).
    """
    check_endpoint(endpoint, repo)
    if offline:
        return _resolve_cached(repo, revision, cache_dir, endpoint)
    from huggingface_hub import HfApi, hf_hub_download
    from huggingface_hub.utils import disable_progress_bars  # type: ignore[attr-defined]

    bound_hub_requests()

    disable_progress_bars()  # get_safetensors_metadata draws one per repo; callers print their own lines
    api = HfApi(endpoint=endpoint, token=token)
    try:
        timeout = hub_timeout()
        info = api.model_info(repo, revision=revision, files_metadata=True, timeout=timeout)
        sha = info.sha
        files = {s.rfilename: s.size for s in info.siblings or []}
        if "config.json" not in files:
            raise ResolveError(ResolveKind.INVALID_CHECKPOINT, repo, "the repo has no config.json")
        path = hf_hub_download(repo, "config.json", revision=sha, token=token, endpoint=endpoint, cache_dir=cache_dir,
                               etag_timeout=timeout)
        config = _read_config(Path(path), repo)
        if MODELOPT_FILE in files and "quantization_config" not in config:
            quant = hf_hub_download(repo, MODELOPT_FILE, revision=sha, token=token, endpoint=endpoint,
                                    cache_dir=cache_dir, etag_timeout=timeout)
            config = with_modelopt(config, _read_config(Path(quant), repo))
        shards = sorted(f for f in files if f.endswith(".safetensors"))
        checkpoint: Checkpoint | None
        if shards:
            meta = api.get_safetensors_metadata(repo, revision=sha)
            tensors: list[Tensor] = []
            for fm in meta.files_metadata.values():  # checked as our own header reader checks them (dtype, shape)
                tensors += tensors_from_json({name: {"dtype": t.dtype, "shape": list(t.shape),
                                                     "data_offsets": list(t.data_offsets)}
                                              for name, t in fm.tensors.items()})[0]
            checkpoint = Checkpoint(group_tensors(tensors), tuple(sorted(meta.files_metadata)),
                                    sum(files[f] or 0 for f in meta.files_metadata if f in files) or None)
        else:
            checkpoint = _fallback([(f, files[f] or 0) for f in files if f.endswith(WEIGHT_SUFFIXES)])
    except Exception as exc:  # every huggingface_hub/HTTP failure becomes one typed kind
        raise _classify(exc, repo) from exc
    source = ModelSource(config, checkpoint, "hub", repo, revision, sha)
    save_resolution(source, endpoint)
    return source


def resolve_adapter(repo: str, *, revision: str | None = None, token: str | bool | None = None,
                    endpoint: str | None = None, cache_dir: str | None = None) -> ModelSource:
    """A LoRA adapter's ``adapter_config.json`` (rank ``r``, ``target_modules``, ``base_model_name_or_path``) at the
    commit ``revision`` resolves to, as a ``ModelSource`` whose ``config`` is that file (no checkpoint).

    Raises:
        ResolveError: typed, as ``resolve_hub`` (a repo without adapter_config.json is ``InvalidCheckpoint``).
    """
    check_endpoint(endpoint, repo)
    from huggingface_hub import HfApi, hf_hub_download

    bound_hub_requests()
    api = HfApi(endpoint=endpoint, token=token)
    try:
        timeout = hub_timeout()  # as resolve_hub: model_info's own default is no timeout (a silent Hub hung forever)
        info = api.model_info(repo, revision=revision, timeout=timeout)
        files = {s.rfilename for s in info.siblings or []}
        if ADAPTER_FILE not in files:
            raise ResolveError(ResolveKind.INVALID_CHECKPOINT, repo, f"the repo has no {ADAPTER_FILE}")
        path = hf_hub_download(repo, ADAPTER_FILE, revision=info.sha, token=token, endpoint=endpoint,
                               cache_dir=cache_dir, etag_timeout=timeout)
        config = _read_config(Path(path), repo)
    except Exception as exc:  # every huggingface_hub/HTTP failure becomes one typed kind (re-raised)
        raise _classify(exc, repo) from exc
    return ModelSource(config, None, "hub", repo, revision, info.sha)


def check_endpoint(endpoint: str | None, repo: str) -> None:
    """``endpoint`` (else ``HF_ENDPOINT`` when set, empty included) must be an http(s) URL with a host and a valid
    port (``bounded.endpoint_fault``): otherwise every request fails before it is sent, and that is a setting to
    fix, not a Hub that is down (not waiting).

    Raises:
        ResolveError: ``BAD_ENDPOINT``, naming the value.
    """
    import os

    from .bounded import endpoint_fault

    url = endpoint or os.environ.get("HF_ENDPOINT")
    fault = None if url is None else endpoint_fault(url)
    if url is not None and fault is not None:
        raise ResolveError(ResolveKind.BAD_ENDPOINT, repo, f"HF_ENDPOINT {url[:120]!r} {fault}")


def resolution_cache_dir() -> Path:
    """Where resolutions are kept for offline use: ``$CTXFIT_CACHE/resolved`` (default ``~/.cache/ctxfit``)."""
    import os

    return Path(os.environ.get("CTXFIT_CACHE") or Path.home() / ".cache" / "ctxfit") / "resolved"


def endpoint_key(endpoint: str | None) -> str:
    """The folder of one Hub endpoint in the resolution cache: ``endpoint``, else ``HF_ENDPOINT``, else
    huggingface.co. A mirror or an internal proxy may serve another repo under the same name, so each endpoint
    keeps its own resolutions: ``<host>-<8 hex of the whole URL>`` (``huggingface.co`` for the public Hub)."""
    import hashlib
    import os
    from urllib.parse import urlsplit

    url = (endpoint or os.environ.get("HF_ENDPOINT") or "https://huggingface.co").rstrip("/")
    if url == "https://huggingface.co":
        return "huggingface.co"
    try:
        netloc = urlsplit(url).netloc
    except ValueError:  # an unbalanced IPv6 bracket: check_endpoint refuses it before any request
        netloc = ""
    host = re.sub(r"[^A-Za-z0-9.-]", "_", netloc or "endpoint")[:64]
    return f"{host}-{hashlib.sha256(url.encode()).hexdigest()[:8]}"


def _cache_file(repo: str, revision: str | None, endpoint: str | None = None) -> Path:
    safe = repo.replace("/", "--")
    return resolution_cache_dir() / endpoint_key(endpoint) / safe / f"{(revision or 'main').replace('/', '--')}.json"


def save_resolution(source: ModelSource, endpoint: str | None = None) -> None:
    """Keep config.json and the packed tensor groups of a Hub resolution (a few KiB), by endpoint (``endpoint_key``),
    revision and commit. Best effort: an unwritable cache is skipped. Only a resolution that succeeded is kept."""
    doc = {"repo": source.repo, "commit": source.commit, "config": source.config,
           "checkpoint": source.checkpoint.pack() if source.checkpoint is not None else None}
    for rev in {source.revision or "main", source.commit or ""} - {""}:
        try:
            path = _cache_file(source.repo, rev, endpoint)
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(json.dumps(doc), encoding="utf-8")
        except OSError:
            return


def _resolve_cached(repo: str, revision: str | None, cache_dir: str | None = None,
                    endpoint: str | None = None) -> ModelSource:
    """Offline: ctxfit's own resolution cache of this endpoint, else the local HF cache
    (``snapshot_download(local_files_only=True)``, a full download made earlier)."""
    from huggingface_hub import snapshot_download

    kept = _cache_file(repo, revision, endpoint)
    if kept.is_file():
        try:
            doc = json.loads(kept.read_text(encoding="utf-8"))
            checkpoint = Checkpoint.unpack(doc["checkpoint"]) if doc.get("checkpoint") else None
            return ModelSource(doc["config"], checkpoint, "cache", repo, revision, doc.get("commit"))
        except (OSError, ValueError, KeyError, TypeError):
            pass  # a damaged entry: try the HF cache

    try:
        folder = snapshot_download(repo, revision=revision, local_files_only=True, cache_dir=cache_dir)
    except Exception as exc:
        error = _classify(exc, repo)
        if error.kind is ResolveKind.OFFLINE:  # name the cache folder this process uses (CTXFIT_CACHE)
            error = ResolveError(error.kind, repo, error.detail, f"run once with network access (ctxfit keeps the "
                                 f"resolution in {resolution_cache_dir()}), or --model-dir")
        raise error from exc
    source = resolve_local(folder, origin="cache", repo=repo)
    return ModelSource(source.config, source.checkpoint, "cache", repo, revision, Path(folder).name)


def resolve_local(directory: str | Path, *, origin: str = "local", repo: str | None = None) -> ModelSource:
    """config.json and the safetensors headers of a local checkout (a preloaded volume, ``--model-dir``).

    Raises:
        ResolveError: no directory / no config.json (``ModelNotFound``), unreadable files (``InvalidCheckpoint``).
    """
    root = Path(directory)
    name = repo or str(root)
    local = None if origin == "cache" else \
        "give the directory that holds the model's config.json and *.safetensors files"
    if not root.is_dir():
        raise ResolveError(ResolveKind.NOT_FOUND, name, f"{root} is not a directory", local)
    if not (root / "config.json").exists():
        raise ResolveError(ResolveKind.NOT_FOUND, name, f"no config.json in {root}", local)
    config = _read_config(root / "config.json", name)
    if (root / MODELOPT_FILE).is_file() and "quantization_config" not in config:
        config = with_modelopt(config, _read_config(root / MODELOPT_FILE, name))
    shards = sorted(p for p in root.iterdir() if p.name.endswith(".safetensors"))
    if not shards:
        weights = [(p.name, p.stat().st_size) for p in root.iterdir() if p.name.endswith(WEIGHT_SUFFIXES)]
        return ModelSource(config, _fallback(weights), origin, name)
    tensors: list[Tensor] = []
    for shard in shards:
        try:
            with shard.open("rb") as f:
                prefix = f.read(8)
                data = prefix + f.read(header_length(prefix))
            tensors.extend(parse_header(data)[0])
        except (OSError, HeaderError) as exc:
            raise ResolveError(ResolveKind.INVALID_CHECKPOINT, name, f"{shard.name}: {exc}") from exc
    size = sum(p.stat().st_size for p in shards)
    return ModelSource(config, Checkpoint(group_tensors(tensors), tuple(p.name for p in shards), size), origin, name)


def _read_config(path: Path, repo: str) -> dict[str, Any]:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise ResolveError(ResolveKind.NOT_FOUND, repo, "no config.json") from None
    except (OSError, UnicodeDecodeError, json.JSONDecodeError, RecursionError) as exc:
        raise ResolveError(ResolveKind.INVALID_CHECKPOINT, repo, f"config.json unreadable ({exc})") from None
    if not isinstance(data, dict):
        raise ResolveError(ResolveKind.INVALID_CHECKPOINT, repo, "config.json is not a JSON object")
    return data


def _fallback(files: list[tuple[str, int]]) -> Checkpoint | None:
    if not files:
        return None
    kinds = sorted({"GGUF" if n.endswith(".gguf") else "PyTorch .bin" for n, _ in files})
    return Checkpoint((), tuple(n for n, _ in files), sum(s for _, s in files),
                      fallback=f"no safetensors ({', '.join(kinds)} only)")
