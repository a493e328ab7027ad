"""How ``ctxfit plan`` / ``calibrate`` get a model's config and tensors (``ctxfit.hub``), in one place.

Order: a spec with both ``model.architecture`` and ``model.weightsPerGPU`` needs nothing; ``--model-dir DIR`` (or a
``model.name`` that is an absolute path) reads a local checkout; ``--hf-config FILE`` gives a config only; a model in
the catalog uses the catalog (its offline seed, no network); any other model is resolved from the Hub
(``HF_ENDPOINT``, ``HF_TOKEN``, ``spec.model.revision``), or from the local HF cache with ``--offline``.
"""

from __future__ import annotations

import argparse
from typing import Any

from ctxfit.api import InferenceServerSpec
from ctxfit.catalog import lookup_model
from ctxfit.vocab.extras import hub_draft
from ctxfit.vocab.modelsource import ModelSource

from .hfconfig import fetch_hf_config, load_hf_config
from .load import ManifestError


def add_resolve_arguments(parser: argparse.ArgumentParser) -> None:
    """``--model-dir``, ``--offline``, ``--hf-config``."""
    parser.add_argument("--model-dir", help="a local checkout (config.json and *.safetensors) to read instead of the "
                        "Hub; only the safetensors headers are read")
    parser.add_argument("--offline", action="store_true",
                        help="never fetch: use an earlier resolution of the same HF_ENDPOINT ($CTXFIT_CACHE/resolved, "
                        "default ~/.cache/ctxfit/resolved), else a full download in the Hugging Face cache (HF_HOME), "
                        "or the catalog")
    parser.add_argument("--hf-config", help="a Hugging Face config.json (architecture only; weights from the spec "
                        "or the catalog)")


def resolve_for_cli(spec: InferenceServerSpec, args: argparse.Namespace) -> tuple[dict[str, Any] | None,
                                                                                  ModelSource | None]:
    """(hf_config, model source) for ``plan``.

    Raises:
        ManifestError: one line naming the repo and what to do (``ResolveError.line``), or the unreadable file.
    """
    from ctxfit.hub.bounded import environment_problem
    from ctxfit.hub.resolve import quiet_hub_logs

    problem = environment_problem()  # importing huggingface_hub (quiet_hub_logs) would raise a bare ValueError
    if problem:
        raise ManifestError(problem)
    quiet_hub_logs()  # huggingface_hub's retry warnings: the CLI prints its own one line
    from ctxfit.hub import ResolveError, require_supported, resolve_hub, resolve_local

    model = spec.model
    try:
        source: ModelSource | None
        if getattr(args, "model_dir", None):
            source = resolve_local(args.model_dir, repo=model.name)
        elif getattr(args, "hf_config", None):
            return load_hf_config(args.hf_config), None
        elif getattr(args, "fetch_config", False):
            return fetch_hf_config(model.name, revision=model.revision), None
        elif model.architecture is not None and model.weights_per_gpu is not None:
            return None, None
        elif model.name.startswith("/"):
            source = resolve_local(model.name, origin="volume")
        elif lookup_model(model.name) is not None:
            return None, None  # the catalog is the offline seed
        else:
            revision = None if model.revision == "main" else model.revision
            source = resolve_hub(model.name, revision=revision, offline=bool(getattr(args, "offline", False)))
        require_supported(source, spec)
        return None, source
    except ResolveError as exc:
        raise ManifestError(exc.line()) from exc


def extra_configs_for_cli(spec: InferenceServerSpec, args: argparse.Namespace
                          ) -> tuple[dict[str, dict[str, Any]], ModelSource | None]:
    """(adapter name -> adapter_config.json, the resolved draft) for ``plan``: adapters' adapter_config.json from the
    Hub (``HF_ENDPOINT``, ``HF_TOKEN``, each one's revision) for Hub adapters without a rank (unknown modules: every
    linear module, the larger budget); a Hub
    draft without a geometry or weights resolved like the model (``ctxfit.hub.resolve_hub``: config.json and the
    safetensors headers; the local HF cache with ``--offline``). A draft in the catalog needs nothing.

    Raises:
        ManifestError: a download failed (one line naming the repo).
    """
    from ctxfit.hub import ResolveError, resolve_hub

    from .hfconfig import fetch_hf_config

    offline = bool(getattr(args, "offline", False))
    adapters: dict[str, dict[str, Any]] = {}
    try:
        if spec.lora is not None and not offline:
            for adapter in spec.lora.adapters:
                if adapter.from_hub and adapter.rank is None:
                    adapters[adapter.name] = fetch_hf_config(adapter.source, revision=adapter.revision,
                                                             filename="adapter_config.json")
        draft = hub_draft(spec)
        if draft is None:
            return adapters, None
        return adapters, resolve_hub(draft[0], revision=None if draft[1] == "main" else draft[1], offline=offline)
    except ResolveError as exc:
        raise ManifestError(exc.line()) from exc
    except ValueError as exc:
        raise ManifestError(str(exc).splitlines()[0]) from exc
