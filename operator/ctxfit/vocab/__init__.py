"""Shared vocabulary of the pure core: the words budget, engines and recovery all speak.

Kept below them (like kopf's ``_cogs.structs``) so that the engine packages depend only on
``api``, ``catalog`` and this package, never on ``budget`` or ``recovery``:

- ``inputs``: ``PlanInputs`` (spec + GPU + model resolved for the planner) and ``hfconfig``
  (config.json -> ``Architecture``);
- ``defaults``: engine-agnostic container defaults (startup budget, host memory, /dev/shm);
- ``kinds``: ``FailureKind`` and ``Failure``; ``patterns``: the failure-pattern types engines
  fill with their wordings;
- ``version``: engine version parsing.
"""
