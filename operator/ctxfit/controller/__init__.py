"""The operator: kopf handlers over the pure core (api, budget, engines, recovery, render).

Modules: ``settings`` (CTXFIT_* environment), ``observe`` (pods/nodes -> views, pure), ``converge`` +
``stepping`` + ``conditions`` (reconciliation as a pure function), ``kube`` (API I/O), ``reconcile``
(read -> converge -> write), ``workqueue``, ``leader`` (Lease election), ``metrics``, ``handlers``
(kopf registry), ``__main__`` (``python -m ctxfit.controller``).
"""
