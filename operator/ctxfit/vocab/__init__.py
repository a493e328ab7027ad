"""Shared vocabulary of the pure core: the words budget, engines and recovery all speak.

Kept below them (like kopf's ``_cogs.structs``) so that the engine packages depend only on
``api``, ``catalog`` and this package, never on ``budget`` or ``recovery``:

- ``inputs``: ``PlanInputs``, a spec resolved into what the planner needs (GPU memory, architecture, weights);
- ``hfconfig``: config.json -> ``Architecture``; ``hybridconfig``: the Mamba / Gated DeltaNet layers of one;
- ``checkpoint``: a checkpoint's tensors in compact form and its weight format;
- ``safetensors``: the safetensors header; ``tensorroles``: what each checkpoint tensor is, by its name;
- ``modelsource``: what resolving ``spec.model`` found (config, tensors, where they came from);
- ``extras``: ``spec.lora`` and ``spec.speculative`` resolved; ``lorageometry``: the modules LoRA can wrap;
- ``defaults``: engine-agnostic container defaults (startup budget, host memory, /dev/shm);
- ``startup``: the memory and capacity lines an engine prints while it starts, as data;
- ``kinds``: ``FailureKind`` and ``Failure``; ``patterns``: the failure-pattern types engines fill with wordings;
- ``text``: untrusted engine text made safe to store and print;
- ``version``: engine version parsing.
"""
