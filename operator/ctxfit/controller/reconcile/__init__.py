"""One reconcile of one InferenceServer: read -> ``converge`` (pure) -> write children, then status at most once.

Modules: ``passes``, ``read``, ``write``, ``diagnose``, ``context``; what each holds: docs/design/architecture.md.
"""

from .context import Result, Runtime
from .diagnose import diagnose
from .passes import reconcile

__all__ = ["Result", "Runtime", "diagnose", "reconcile"]
