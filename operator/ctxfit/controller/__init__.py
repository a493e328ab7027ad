"""The operator: kopf handlers over the pure core (api, budget, engines, recovery, render).

- ``app/``: kopf wiring, the only place that registers handlers (``python -m ctxfit.controller``: ``__main__``).
- ``reconcile/``: one pass for one server: ``read`` -> ``converge`` (pure) -> ``write`` children and status (once).
- ``rejections``: the refusal book (backoff, Events due), read into each pass's snapshot.
- ``converge/``: the pure pass (Snapshot -> Outcome): plan, attempts, status transitions, desired children.
- ``views/``: pure folds of API objects (pods, nodes, workloads, the weights cache) into frozen dataclasses.
- ``kube/``: every Kubernetes API call (server, status, Events, Deployment, Service, LWS, KEDA, claims, Lease).
- ``runtime/``: generic concurrency (work queue, threads, lanes), no domain knowledge.
- ``telemetry/``: Prometheus metrics and the per-decision log lines.
- ``settings``: the ``CTXFIT_*`` environment, the lowest layer.

Where a failed pod turns into a step-down: ``converge/attempts.py`` (``fail``). Where status is written: its
content in ``converge/status.py`` (refusals: ``converge/refusals.py``), the one write in ``reconcile/write.py``.
Where to add a child object: render it in ``converge/desired.py``, declare its ``Resource`` in ``kube/rest.py`` and
apply it in ``reconcile/write.py`` through ``kube/objects.py``.
Reasoning and figures: docs/design/.
"""
