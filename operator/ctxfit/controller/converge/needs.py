"""What a spec needs resolved before its first plan, and the key each read is shared under (pure; the cases:
docs/design/model-resolution.md, "controller/converge/resolution.py")."""

from __future__ import annotations

import re
from typing import Literal

from ctxfit.api import InferenceServerSpec
from ctxfit.catalog import lookup_model
from ctxfit.vocab.extras import hub_draft

from .types import Need

COMMIT = re.compile(r"^[0-9a-f]{40}$")
"""A revision that is a commit (never moves, so never re-checked)."""


def need(spec: InferenceServerSpec, namespace: str) -> Need:
    """The resolution ``spec`` needs: ``spec``, ``catalog``, ``hub``, ``token`` or ``volume``
    (docs/design/model-resolution.md)."""
    model = spec.model
    revision = model.revision or "main"
    if model.architecture is not None and model.weights_per_gpu is not None:
        return Need("spec", ("spec",), model.name, revision)
    claim = model.cache.persistent_volume_claim if model.cache is not None else None
    where = (claim.claim_name, claim.sub_path or "") if claim is not None else None
    if where is not None and model.name.startswith("/"):
        return Need("volume", ("volume", namespace, *where, model.name, revision), model.name, revision, claim=where)
    if revision == "main" and lookup_model(model.name) is not None:
        return Need("catalog", ("catalog", model.name), model.name, revision)  # the offline seed: nothing to read
    if where is not None and claim is not None and claim.read_only:  # the claim holds the Hugging Face cache
        return Need("volume", ("volume", namespace, *where, model.name, revision), model.name, revision, claim=where)
    if model.token_secret_ref is not None:
        secret = (model.token_secret_ref.name, model.token_secret_ref.key)
        return Need("token", ("token", namespace, *secret, model.name, revision), model.name, revision, secret=secret)
    return Need("hub", ("hub", model.name, revision), model.name, revision)


def _extra_need(spec: InferenceServerSpec, namespace: str, what: Literal["hub", "adapter"], repo: str,
                revision: str) -> Need:
    """The Hub read of a draft (``what="hub"``: config.json and headers) or an adapter (``adapter_config.json``) the
    way the model is read: with ``spec.model.tokenSecretRef`` through the resolver pod with that token (a gated
    draft or adapter repo needs the token as a gated model does; the download container gets the same Secret), keyed
    ``("token", namespace, secret, key, repo, revision)`` (a draft: the key a gated model of that repo has) or
    ``("adapter-token", ...)``; without one the operator reads it itself, keyed ``(what, repo, revision)``."""
    ref = spec.model.token_secret_ref
    if ref is None:
        return Need("hub", (what, repo, revision), repo, revision)
    secret = (ref.name, ref.key)
    kind = "token" if what == "hub" else "adapter-token"
    return Need("token", (kind, namespace, *secret, repo, revision), repo, revision, secret=secret)


def draft_need(spec: InferenceServerSpec, namespace: str) -> Need | None:
    """The Hub resolution ``spec.speculative.draft`` needs (``vocab.extras.hub_draft``: a Hub draft the catalog and
    the spec do not describe), None when it needs none. Shared with every server under the same key as a model;
    with a token as the model (``_extra_need``)."""
    found = hub_draft(spec)
    return None if found is None else _extra_need(spec, namespace, "hub", found[0], found[1])


def adapter_needs(spec: InferenceServerSpec, namespace: str) -> tuple[tuple[str, Need], ...]:
    """(adapter name, the read of its adapter_config.json) for every Hub adapter whose rank the spec leaves unset
    (key ``("adapter", repo, revision)``, with a token ``("adapter-token", namespace, secret, key, repo, revision)``;
    the CLI reads the same file, ``cli.resolve.extra_configs_for_cli``)."""
    if spec.lora is None:
        return ()
    return tuple((a.name, _extra_need(spec, namespace, "adapter", a.source, a.revision or "main"))
                 for a in spec.lora.adapters if a.from_hub and a.rank is None)
