"""One reconcile of one InferenceServer: read -> ``converge`` (pure) -> write children, then status at most once.

- ``passes``: ``reconcile`` (never raises; the refusal's second pass) and one ``_pass``.
- ``read``: the ``Snapshot`` from the caller's watches and the API (objects not the server's read as absent).
- ``write``: the children in their order, the one status write, the Events.
- ``diagnose``: a failed pod into a ``Failure`` (termination, log tail, Events).
- ``context``: ``Runtime`` (what reconciles share), ``Result``, the stop rule.
"""

from .context import Result, Runtime
from .diagnose import diagnose
from .passes import reconcile

__all__ = ["Result", "Runtime", "diagnose", "reconcile"]
