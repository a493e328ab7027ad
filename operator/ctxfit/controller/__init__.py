"""The operator: kopf handlers over the pure core. ``app/`` kopf wiring, ``reconcile/`` one pass, ``converge/`` the
pure pass, ``views/`` pure folds of API objects, ``kube/`` every API call, ``runtime/`` concurrency, ``telemetry/``.
A failed pod turns into a step-down in ``converge/attempts.py`` (``fail``). Status is written at most once per
pass, in ``reconcile/write.py``. A new child object is rendered from ``converge/`` (``converge/desired.py``: workload,
Service; ``converge/autoscaling.py``: ScaledObject), applied in ``reconcile/write.py`` (docs/design/architecture.md).
"""
