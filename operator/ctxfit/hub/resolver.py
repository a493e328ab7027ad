"""The resolver pod's entrypoint: ``python -m ctxfit.hub.resolver`` (the operator's own image).

The operator creates it in the server's namespace for what it must not read itself: a gated repository (the token
Secret reaches this container as ``HF_TOKEN`` through a ``secretKeyRef``, read by the kubelet) and a preloaded
claim (mounted read-only at the engine's mount path). It resolves once, writes the packed result
(``ctxfit.vocab.modelsource.pack_source``, a few KiB; or ``pack_error``) to its termination message file, prints
one line, and exits (0 resolved, 1 failed). Configuration, all from the environment the operator renders:

- ``CTXFIT_RESOLVE_REPO``: repository id (or, with ``CTXFIT_RESOLVE_DIR``, the name to report);
- ``CTXFIT_RESOLVE_REVISION``: branch, tag or commit (default ``main``);
- ``CTXFIT_RESOLVE_DIR``: read this local checkout instead of the Hub (a path inside the mounted claim);
- ``CTXFIT_RESOLVE_OFFLINE=1``: the claim holds the Hugging Face cache (``HF_HOME``): read the cached snapshot;
- ``CTXFIT_RESOLVE_ADAPTER=1``: the repository is a LoRA adapter: read its ``adapter_config.json``
  (``resolve_adapter``; a gated adapter repo of a server with ``spec.model.tokenSecretRef``);
- ``CTXFIT_TERMINATION_LOG``: where to write (default ``/dev/termination-log``);
- ``HF_ENDPOINT``, ``HF_TOKEN``, ``HF_HOME``: huggingface_hub's own.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

from ctxfit.vocab.modelsource import pack_error, pack_source

from .errors import ResolveError, ResolveKind
from .resolve import resolve_adapter, resolve_hub, resolve_local

MAX_MESSAGE_BYTES = 4096
"""The kubelet keeps at most this much of a termination message (``TerminationMessagePath``)."""


def run(environ: dict[str, str] | None = None) -> tuple[int, str]:
    """Resolve as the environment says; returns (exit code, packed message)."""
    env = dict(os.environ if environ is None else environ)
    repo = env.get("CTXFIT_RESOLVE_REPO", "")
    revision = env.get("CTXFIT_RESOLVE_REVISION") or "main"
    directory = env.get("CTXFIT_RESOLVE_DIR") or ""
    try:
        if not repo and not directory:
            raise ResolveError(ResolveKind.NOT_FOUND, "?", "CTXFIT_RESOLVE_REPO is not set")
        if directory:
            source = resolve_local(directory, origin="volume", repo=repo or directory)
        elif env.get("CTXFIT_RESOLVE_ADAPTER") == "1":
            hf_home = env.get("HF_HOME")
            source = resolve_adapter(repo, revision=None if revision == "main" else revision,
                                     token=env.get("HF_TOKEN") or False, endpoint=env.get("HF_ENDPOINT") or None,
                                     cache_dir=f"{hf_home}/hub" if hf_home else None)
        else:
            hf_home = env.get("HF_HOME")
            source = resolve_hub(repo, revision=None if revision == "main" else revision,
                                 offline=env.get("CTXFIT_RESOLVE_OFFLINE") == "1", token=env.get("HF_TOKEN") or False,
                                 endpoint=env.get("HF_ENDPOINT") or None,
                                 cache_dir=f"{hf_home}/hub" if hf_home else None)
            if env.get("CTXFIT_RESOLVE_OFFLINE") == "1":
                source = type(source)(source.config, source.checkpoint, "volume", source.repo, source.revision,
                                      source.commit)
    except ResolveError as exc:
        return 1, pack_error(exc.kind.value, exc.repo, exc.detail)
    message = pack_source(source)
    if len(message.encode()) > MAX_MESSAGE_BYTES:  # never seen (24 fixture repos: at most 2.4 KiB); say so
        return 1, pack_error(ResolveKind.INVALID_CHECKPOINT.value, source.repo,
                             f"the packed resolution is {len(message)} bytes, over the {MAX_MESSAGE_BYTES}-byte "
                             "termination message")
    return 0, message


def main() -> int:
    code, message = run()
    path = Path(os.environ.get("CTXFIT_TERMINATION_LOG") or "/dev/termination-log")
    try:
        path.write_text(message, encoding="utf-8")
    except OSError as exc:
        print(f"ctxfit resolver: cannot write {path}: {exc}", file=sys.stderr)
        return 2
    print(f"ctxfit resolver: {'resolved' if code == 0 else 'failed'} ({len(message)} bytes reported)")
    return code


if __name__ == "__main__":
    sys.exit(main())
