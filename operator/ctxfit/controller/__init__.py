"""The operator: kopf handlers over the pure core (api, budget, engines, recovery, render).

``app/`` kopf wiring, ``reconcile/`` one pass, ``converge/`` the pure pass, ``views/`` pure folds of API objects,
``kube/`` every API call, ``runtime/`` concurrency, ``telemetry/`` metrics, ``settings`` the ``CTXFIT_*`` environment.
The package map, where a failure or a status write happens, how to add a child: docs/design/architecture.md.
"""
