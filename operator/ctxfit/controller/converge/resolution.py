"""Resolution of ``spec.model`` as a step before planning (pure; docs/design/model-resolution.md).

What the first plan of a spec needs from the model, and where it comes from (``need``):

- ``spec``: ``model.architecture`` and ``model.weightsPerGPU`` are both given: nothing to read;
- ``catalog``: the model is in the built-in catalog and the revision is ``main``: its offline seed (a token or a
  preloaded cache only matters to the download then);
- ``hub``: a public Hub repo (or one on the mirror ``HF_ENDPOINT`` names): the operator reads config.json and the
  safetensors headers itself, off the reconcile path (``kube.resolution``);
- ``token``: ``model.tokenSecretRef`` is set: a short-lived resolver pod in the server's namespace, owned by the
  server, with the Secret as ``HF_TOKEN`` (the kubelet reads it; the operator never does) reports the packed result
  through its termination message;
- ``volume``: ``model.name`` is a path inside a preloaded claim (``cache.persistentVolumeClaim``), or the claim is
  read-only and holds the Hugging Face cache: the same resolver pod with the claim mounted where the engine mounts it.

The I/O layer shares one resolution per key (repo + revision for public repos; + namespace and Secret reference for
tokens; + claim for volumes) between every server that asks, and tells this step what it knows
(``ResolutionView``). This step turns that into the ``ModelResolved`` condition and the requests to make
(``ResolutionRequest``); ``record`` fills ``status.model.resolved`` once the plan exists. A planned server makes no
request: a re-plan of the same spec reads the architecture and weights per GPU back from ``status.model.resolved``
(``inputs_from_status``), except that a moving branch (a revision that is not a commit) is re-checked once per
``Settings.model_recheck_seconds``; when it moved, the server plans again.

Waiting is not failing: while the Hub is unreachable the server stays in Planning with ``ModelResolved=False /
HubUnreachable``, no attempt exists and no startup budget is used; the I/O layer retries with backoff. Access denied,
not found, revision not found, an unsupported architecture or an unreadable checkpoint are permanent for that key
until the spec changes (a spec change forgets the key's error; a token's denial is re-checked slowly, since the
Secret may have been fixed and the operator cannot watch it).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal

from ctxfit.api import InferenceServerSpec
from ctxfit.api.model_cache import ModelStatus
from ctxfit.api.resolution import ResolvedModel
from ctxfit.api.status import ConditionType, Phase, Reason, parse_rfc3339
from ctxfit.budget.planner import Plan
from ctxfit.catalog import lookup_model
from ctxfit.engines.registry import unsupported
from ctxfit.vocab.checkpoint import quantization_config
from ctxfit.vocab.hfconfig import architecture_from_hf_config
from ctxfit.vocab.modelsource import ModelSource

from .status import mark_phase
from .types import EventNote, Need, Outcome, ResolutionRequest, ResolutionView, Snapshot

if TYPE_CHECKING:
    from ..settings import Settings

COMMIT = re.compile(r"^[0-9a-f]{40}$")
WAITING_KINDS = frozenset({"HubUnreachable"})
"""Error kinds that are waiting, not failing (``ctxfit.hub.errors.ResolveKind.waiting``)."""
REASONS = {"HubUnreachable": Reason.HUB_UNREACHABLE, "ModelAccessDenied": Reason.MODEL_ACCESS_DENIED,
           "ModelNotFound": Reason.MODEL_NOT_FOUND, "RevisionNotFound": Reason.REVISION_NOT_FOUND,
           "UnsupportedArchitecture": Reason.UNSUPPORTED_ARCHITECTURE, "InvalidCheckpoint": Reason.INVALID_CHECKPOINT,
           "ModelNotCached": Reason.MODEL_NOT_FOUND, "ResolverNotConfigured": Reason.RESOLVER_NOT_CONFIGURED,
           "ForeignObject": Reason.FOREIGN_OBJECT}
HINTS = {"ModelAccessDenied": "accept the model's terms on the Hub and set spec.model.tokenSecretRef to a Secret "
                              "holding a token with access",
         "ModelNotFound": "check spec.model.name (owner/name as on the Hub, or a path inside the preloaded claim)",
         "ModelNotCached": "the preloaded claim holds no copy of this revision",
         "RevisionNotFound": "check spec.model.revision (a branch, tag or commit of the repository)",
         "UnsupportedArchitecture": "set spec.model.architecture and weightsPerGPU, or an engine version that serves "
                                    "it",
         "InvalidCheckpoint": "check the repository's config.json and safetensors files",
         "HubUnreachable": "waiting for the Hub (or HF_ENDPOINT's mirror); nothing is started meanwhile",
         "ForeignObject": "the resolver pod's name is taken by a pod that is not this server's (ownership is by uid); "
                          "ctxfit never writes or reads it: delete or rename that pod, or rename the server (asked "
                          "again with backoff)",
         "ResolverNotConfigured": "set CTXFIT_RESOLVER_IMAGE to the operator's image (the Helm chart does), or give "
                                  "spec.model.architecture and weightsPerGPU"}


def need(spec: InferenceServerSpec, namespace: str) -> Need:
    """The resolution ``spec`` needs (see the module docstring)."""
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


@dataclass(frozen=True)
class Step:
    """This pass's answer: ``ready`` (plan now, with ``source`` when one was read), else wait or stop."""

    ready: bool
    source: ModelSource | None = None


def step(snap: Snapshot, spec: InferenceServerSpec, out: Outcome, now: str, settings: Settings,
         spec_changed: bool) -> Step:
    """The resolution step of one pass (before ``flow._first_plan``); see the module docstring."""
    st = out.status
    wanted = need(spec, snap.namespace)
    if not wanted.reads:
        return Step(True)
    resolved = st.model.resolved if st.model is not None else None
    if st.plan is not None:
        _recheck(snap, spec, out, now, settings, wanted, resolved)
        return Step(False)
    view = snap.resolution if snap.resolution is not None and snap.resolution.key == wanted.key else None
    stale_error = view is not None and view.error is not None and spec_changed and not view.in_flight
    if view is None or stale_error or (view.source is None and view.error is None):
        out.resolution_request = ResolutionRequest(wanted, forget_error=spec_changed)
        _resolving(out, wanted, view, now, snap.generation, settings)
        return Step(False)
    if view.source is not None:
        problem = unsupported(view.source.config, spec)
        if problem is None:
            return Step(True, view.source)
        _failed(out, wanted, "UnsupportedArchitecture", problem, now, snap.generation)
        return Step(False)
    assert view.error is not None
    due = view.retry_at is not None and view.retry_at <= snap.now
    if due and not view.in_flight:
        out.resolution_request = ResolutionRequest(wanted)
    if view.error in WAITING_KINDS:
        wait = max(1.0, (view.retry_at - snap.now).total_seconds()) if view.retry_at and not due else \
            settings.resolve_poll_seconds
        message = (f"{_what(wanted)}: {view.detail}; retrying in {wait:.0f} s "
                   f"({HINTS['HubUnreachable']})")
        _condition(out, "False", Reason.HUB_UNREACHABLE, message, now, snap.generation)
        mark_phase(out, Phase.PLANNING, Reason.HUB_UNREACHABLE, message, now, snap.generation)
        out.requeue(wait)
        return Step(False)
    _failed(out, wanted, view.error, view.detail, now, snap.generation)
    if view.retry_at is not None:
        out.requeue(max(1.0, (view.retry_at - snap.now).total_seconds()))
    return Step(False)


def _what(wanted: Need) -> str:
    at = "" if wanted.revision == "main" else f"@{wanted.revision}"
    if wanted.kind == "volume" and wanted.claim is not None:
        return f"{wanted.repo}{at} in claim {wanted.claim[0]}"
    return f"{wanted.repo}{at}"


def _condition(out: Outcome, status: Literal["True", "False", "Unknown"], reason: Reason, message: str, now: str,
               generation: int) -> None:
    old = out.status.condition(ConditionType.MODEL_RESOLVED)
    if status == "False" and reason is not Reason.HUB_UNREACHABLE and (old is None or old.reason is not reason):
        out.events.append(EventNote("Warning", reason, message))
    elif reason is Reason.HUB_UNREACHABLE and (old is None or old.reason is not reason):
        out.events.append(EventNote("Normal", reason, message))  # waiting, not failing
    out.status.set_condition(ConditionType.MODEL_RESOLVED, status, reason, message, now=now, generation=generation)


def _resolving(out: Outcome, wanted: Need, view: ResolutionView | None, now: str, generation: int,
               settings: Settings) -> None:
    how = {"hub": "reading config.json and the safetensors headers from the Hub",
           "token": "a resolver pod reads the gated repository with the token Secret",
           "volume": "a resolver pod reads the preloaded claim"}[wanted.kind]
    pod = f" ({view.pod})" if view is not None and view.pod else ""
    message = f"resolving {_what(wanted)}: {how}{pod}"
    _condition(out, "Unknown", Reason.RESOLVING, message, now, generation)
    mark_phase(out, Phase.PLANNING, Reason.RESOLVING, message, now, generation)
    out.requeue(settings.resolve_poll_seconds)


def _failed(out: Outcome, wanted: Need, kind: str, detail: str, now: str, generation: int) -> None:
    reason = REASONS.get(kind, Reason.INVALID_CHECKPOINT)
    message = f"{_what(wanted)}: {kind}: {detail}; {HINTS.get(kind, HINTS['InvalidCheckpoint'])}"
    _condition(out, "False", reason, message, now, generation)
    mark_phase(out, Phase.FAILED, reason, message, now, generation)


def _recheck(snap: Snapshot, spec: InferenceServerSpec, out: Outcome, now: str, settings: Settings, wanted: Need,
             resolved: ResolvedModel | None) -> None:
    """A planned server on a moving branch: one background re-check per ``model_recheck_seconds``; when the branch
    moved (a newer resolution with another commit), plan again."""
    if resolved is None or resolved.source not in ("hub", "volume") or COMMIT.match(wanted.revision) \
            or resolved.resolved_at is None:
        return
    age = (snap.now - parse_rfc3339(resolved.resolved_at)).total_seconds()
    view = snap.resolution if snap.resolution is not None and snap.resolution.key == wanted.key else None
    newer = view is not None and view.source is not None and view.resolved_at is not None and \
        view.resolved_at > parse_rfc3339(resolved.resolved_at)
    if newer and view is not None and view.source is not None and view.source.commit != resolved.sha:
        old, new = (resolved.sha or "?")[:12], (view.source.commit or "?")[:12]
        out.events.append(EventNote("Normal", Reason.REVISION_MOVED,
                                    f"{_what(wanted)} moved from {old} to {new}: planning again"))
        out.replan_resolution = True
        return
    if age >= settings.model_recheck_seconds and not newer and not (view is not None and view.in_flight):
        out.resolution_request = ResolutionRequest(wanted, recheck=True)
    if age < settings.model_recheck_seconds:
        out.requeue(settings.model_recheck_seconds - age)


def record(out: Outcome, spec: InferenceServerSpec, namespace: str, source: ModelSource | None, result: Plan,
           now: str, generation: int) -> None:
    """``status.model.resolved`` and ``ModelResolved=True`` once the first plan of the spec exists."""
    st = out.status
    wanted = need(spec, namespace)
    kind = "volume" if wanted.kind == "volume" else ("hub" if wanted.reads else wanted.kind)
    config = source.config if source is not None else None
    architecture = spec.model.architecture
    if architecture is None and config is not None:
        try:
            architecture = architecture_from_hf_config(config)
        except (ValueError, TypeError, KeyError, AssertionError):
            architecture = None
    if architecture is None:
        entry = lookup_model(spec.model.name)
        architecture = entry.architecture if entry is not None else None
    archs = [a for a in (config or {}).get("architectures") or [] if isinstance(a, str)][:8]
    quant = quantization_config(config) if config is not None else None
    resolved = ResolvedModel(
        source=kind, repo=wanted.repo[:253], revision=wanted.revision[:255],
        sha=source.commit if source is not None and source.commit and COMMIT.match(source.commit) else None,
        architectures=archs, architecture=architecture,
        quantization=(source.weight_format if source is not None else
                      (str(quant.get("quant_method")) if quant else None)),
        checkpoint_bytes=source.checkpoint.checkpoint_bytes if source is not None and source.checkpoint else None,
        weights_per_gpu_bytes=result.per_gpu.weights_bytes,
        max_position_embeddings=architecture.max_position_embeddings if architecture is not None else None,
        resolved_at=now)
    if st.model is None:
        st.model = ModelStatus(resolved=resolved)
    else:
        st.model.resolved = resolved
    where = {"spec": "from spec.model.architecture and weightsPerGPU", "catalog": "from the built-in catalog"}.get(
        wanted.kind, f"from {source.describe()}" if source is not None else "")
    _condition(out, "True", Reason.RESOLVED, f"{_what(wanted)} resolved {where}".strip(), now, generation)


def inputs_from_status(spec: InferenceServerSpec, resolved: ResolvedModel | None) -> InferenceServerSpec:
    """``spec`` with the architecture and weights per GPU the first plan resolved, for a re-plan of the same spec
    (spec fields win; nothing is read again)."""
    if resolved is None or resolved.source not in ("hub", "volume"):
        return spec
    from ctxfit.api import bytes_to_quantity

    update: dict[str, object] = {}
    if spec.model.architecture is None and resolved.architecture is not None:
        update["architecture"] = resolved.architecture
    if spec.model.weights_per_gpu is None and resolved.weights_per_gpu_bytes:
        update["weights_per_gpu"] = bytes_to_quantity(resolved.weights_per_gpu_bytes)
    if not update:
        return spec
    return spec.model_copy(update={"model": spec.model.model_copy(update=update)})
