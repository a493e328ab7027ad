"""All Kubernetes API I/O of the operator, every request through ``Rest.call``.

``rest``: the raw JSON client and the one resource table; ``objects``: the one create-or-replace / patch / delete /
scale / get-or-none, guarded; ``answers``: what a 404/409/422 means (the only place status codes are read);
``protocol``: ``KubeClient``; the other modules: the reads and writes per kind.
"""
