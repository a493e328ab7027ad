"""A re-plan of the same spec reads what the first plan resolved back from ``status.model`` (pure; nothing is read
again; docs/design/model-resolution.md)."""

from __future__ import annotations

from ctxfit.api import InferenceServerSpec
from ctxfit.api.resolution import ResolvedAdapter, ResolvedModel


def inputs_from_status(spec: InferenceServerSpec, resolved: ResolvedModel | None,
                       draft: ResolvedModel | None = None,
                       adapters: list[ResolvedAdapter] | None = None) -> InferenceServerSpec:
    """``spec`` with the architecture and weights per GPU the first plan resolved (the model's, a Hub draft's from
    ``status.model.draft``, the Hub adapters' rank and modules from ``status.model.adapters``), for a re-plan of the
    same spec (spec fields win; nothing is read again)."""
    from ctxfit.api import bytes_to_quantity

    if adapters and spec.lora is not None:
        read = {(a.name, a.repo): a for a in adapters}
        filled = []
        for adapter in spec.lora.adapters:
            found = read.get((adapter.name, adapter.source))
            if found is not None and adapter.rank is None and found.rank is not None:
                adapter = adapter.model_copy(update={
                    "rank": found.rank,
                    "target_modules": adapter.target_modules if adapter.target_modules is not None
                    else found.target_modules})
            filled.append(adapter)
        spec = spec.model_copy(update={"lora": spec.lora.model_copy(update={"adapters": filled})})

    speculative = spec.speculative
    if draft is not None and speculative is not None and speculative.draft is not None and \
            speculative.draft.name == draft.repo:
        fill: dict[str, object] = {}
        if speculative.draft.architecture is None and draft.architecture is not None:
            fill["architecture"] = draft.architecture
        if speculative.draft.weights_per_gpu is None and draft.weights_per_gpu_bytes:
            fill["weights_per_gpu"] = bytes_to_quantity(draft.weights_per_gpu_bytes)
        if fill:
            spec = spec.model_copy(update={"speculative": speculative.model_copy(
                update={"draft": speculative.draft.model_copy(update=fill)})})
    if resolved is None or resolved.source not in ("hub", "volume"):
        return spec

    update: dict[str, object] = {}
    if spec.model.architecture is None and resolved.architecture is not None:
        update["architecture"] = resolved.architecture
    if spec.model.weights_per_gpu is None and resolved.weights_per_gpu_bytes:
        update["weights_per_gpu"] = bytes_to_quantity(resolved.weights_per_gpu_bytes)
    if not update:
        return spec
    return spec.model_copy(update={"model": spec.model.model_copy(update=update)})
