"""``python -m ctxfit.controller``: run the ctxfit operator (kopf) with settings from ``CTXFIT_*``.

Process-level wiring read here (the full settings object is built again in the startup handler and
kept on ``memo``): namespaces to watch (``CTXFIT_WATCH_NAMESPACES``, empty = cluster-wide), kopf's
liveness endpoint ``http://0.0.0.0:$CTXFIT_HEALTH_PORT/healthz``, the log level ``CTXFIT_LOG_LEVEL``
(INFO: one line per decision per server, ``controller/telemetry/decision_log.py``; DEBUG adds kopf's per-event
lines). kopf itself runs standalone; when ``CTXFIT_PEERING`` is set, only the holder of that Lease
reconciles (``controller/kube/leader.py``).
SIGTERM/SIGINT stop it cleanly (queue drained, Lease released); once kopf has stopped (at most
``handlers.KOPF_EXIT_SECONDS`` after the cleanup), the process exits at once (``exit_now``) instead of tearing
the interpreter down object by object, which took seconds with 1,000 servers' state in memory (bench/README.md).
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
    """Run until signalled. Returns the process exit code."""
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
        registry=build_registry(scaled_objects=settings.keda_enabled),
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


if __name__ == "__main__":
    exit_now(main())
