"""The operator: kopf handlers over the pure core. ``app/`` kopf wiring, ``reconcile/`` one pass, ``converge/`` the
pure pass, ``views/`` pure folds of API objects, ``kube/`` every API call, ``runtime/`` concurrency, ``telemetry/``.
A failed pod turns into a step-down in ``converge/attempts.py`` (``fail``). Status is written once per pass, in
``reconcile/write.py``. A new child object is rendered in ``converge/desired.py`` and applied in ``reconcile/write.py``
(its ``Resource`` in ``kube/rest.py``). The map and the reasoning: docs/design/architecture.md.
"""
