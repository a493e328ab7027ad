"""``python -m ctxfit.controller``: run the ctxfit operator (kopf) with settings from ``CTXFIT_*``.

Reads the process-level wiring (namespaces, health port, log level, peering) and exits at once after kopf stops:
0 on a signal, 1 when kopf stopped on an error. What is read here, the fast exit and its code: docs/design/settings.md.
"""

from __future__ import annotations

import gc
import logging
import os
import sys

import kopf

from .app.handlers import build_registry
from .settings import Settings


def main() -> int:
    """Run until signalled. Returns the process exit code when kopf returns (the cleanup handler usually exits
    first: ``app.lifecycle.exit_code``); raises what kopf raises (a failed start-up)."""
    settings = Settings()
    namespaces = list(settings.watch_namespaces)
    liveness = f"http://0.0.0.0:{settings.health_port}/healthz" if settings.health_port else None
    debug = settings.log_level == "DEBUG"
    kopf.configure(verbose=debug, log_prefix=True)
    logging.getLogger("ctxfit").setLevel(settings.log_level)  # the per-server decision lines at INFO
    if not debug:  # kopf's one INFO line per handled event is noise at 200 servers
        logging.getLogger("kopf.objects").setLevel(logging.WARNING)
    gc.freeze()  # the imported modules' objects leave the collector's generations: full collections (they stop
    # every thread) walk only what the operator builds, not everything kopf, kubernetes and pydantic imported
    kopf.run(
        registry=build_registry(),
        standalone=True,
        clusterwide=not namespaces,
        namespaces=namespaces,
        liveness_endpoint=liveness,
        memo=kopf.Memo(exit_after_cleanup=exit_now),
    )
    return 0


def exit_now(code: int) -> None:
    """Flush the logs and standard streams, then end the process without the interpreter's teardown (every
    reconcile thread is a daemon and everything the operator knows is in the API server: nothing is lost)."""
    logging.shutdown()
    for stream in (sys.stdout, sys.stderr):
        stream.flush()
    os._exit(code)


def run() -> int:
    """``main``, with an error out of kopf (start-up failed: no cleanup ran) logged and turned into exit code 1."""
    try:
        return main()
    except Exception:
        logging.getLogger("ctxfit").exception("the operator stopped on an error")
        return 1


if __name__ == "__main__":
    exit_now(run())
