"""Resolution of ``spec.model`` as a step before planning (pure).

``need`` says what the first plan needs from the model and where it comes from (spec, catalog, hub, token,
volume); the step turns what the I/O layer knows into ``ModelResolved`` and requests.
The sources, the re-checks and why waiting is not failing: docs/design/model-resolution.md.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

from ctxfit.api import InferenceServerSpec
from ctxfit.api.model_cache import ModelStatus
from ctxfit.api.resolution import ResolvedAdapter, ResolvedModel
from ctxfit.api.status import Phase, Reason, parse_rfc3339
from ctxfit.budget.planner import Plan
from ctxfit.catalog import lookup_model
from ctxfit.engines.registry import unsupported
from ctxfit.vocab.checkpoint import quantization_config
from ctxfit.vocab.extras import hub_draft
from ctxfit.vocab.hfconfig import architecture_from_hf_config
from ctxfit.vocab.modelsource import ModelSource

from ..settings import Settings
from .needs import COMMIT, adapter_needs, draft_need, need
from .readback import inputs_from_status
from .status import mark_model_resolved, mark_phase
from .types import EventNote, Need, Outcome, ResolutionRequest, ResolutionView, Snapshot

__all__ = ["Step", "adapter_needs", "draft_need", "inputs_from_status", "need", "record", "step"]

WAITING_KINDS = frozenset({"HubUnreachable"})
"""Error kinds that are waiting, not failing (``ctxfit.hub.errors.ResolveKind.waiting``)."""
REASONS = {"HubUnreachable": Reason.HUB_UNREACHABLE, "ModelAccessDenied": Reason.MODEL_ACCESS_DENIED,
           "ModelNotFound": Reason.MODEL_NOT_FOUND, "RevisionNotFound": Reason.REVISION_NOT_FOUND,
           "UnsupportedArchitecture": Reason.UNSUPPORTED_ARCHITECTURE, "InvalidCheckpoint": Reason.INVALID_CHECKPOINT,
           "ModelNotCached": Reason.MODEL_NOT_FOUND, "ResolverNotConfigured": Reason.RESOLVER_NOT_CONFIGURED,
           "HubEndpointInvalid": Reason.RESOLVER_NOT_CONFIGURED, "LocalCacheUnusable": Reason.RESOLVER_NOT_CONFIGURED,
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
         "HubEndpointInvalid": "the operator's HF_ENDPOINT (the chart's operator.hubEndpoint) must be the http(s) "
                               "URL of the Hub or a mirror, or unset",
         "LocalCacheUnusable": "the operator's (or resolver pod's) Hugging Face cache, HF_HOME, must be a "
                               "writable directory (its volume)",
         "ResolverNotConfigured": "set CTXFIT_RESOLVER_IMAGE to the operator's image (the Helm chart does), or give "
                                  "spec.model.architecture and weightsPerGPU"}


class Part(StrEnum):
    """Which part of the spec a resolution is for (the hints of a failure differ)."""

    MODEL = "model"
    DRAFT = "draft"
    ADAPTER = "adapter"


@dataclass(frozen=True)
class Step:
    """This pass's answer: ``ready`` (plan now, with ``source``, ``draft`` and the adapters' adapter_config.json
    when they were read), else wait or stop."""

    ready: bool
    source: ModelSource | None = None
    draft: ModelSource | None = None
    adapters: dict[str, ModelSource] | None = None


def step(snap: Snapshot, spec: InferenceServerSpec, out: Outcome, now: str, settings: Settings,
         spec_changed: bool) -> Step:
    """The resolution step of one pass (before ``flow._first_plan``): the model, then a Hub draft (the same states:
    waiting while the Hub is unreachable, permanent errors until the spec changes; docs/design/model-resolution.md)."""
    found = _model_step(snap, spec, out, now, settings, spec_changed)
    if not found.ready or out.status.plan is not None:  # a re-plan reads status
        return found
    found = _draft_step(snap, spec, out, now, settings, spec_changed, found)
    return _adapters_step(snap, spec, out, now, settings, spec_changed, found) if found.ready else found


def _adapters_step(snap: Snapshot, spec: InferenceServerSpec, out: Outcome, now: str, settings: Settings,
                   spec_changed: bool, found: Step) -> Step:
    needs = adapter_needs(spec, snap.namespace)
    if not needs:
        return found
    views = {v.key: v for v in snap.adapter_resolutions}
    configs: dict[str, ModelSource] = {}
    waiting = False
    for name, wanted in needs:
        view = views.get(wanted.key)
        stale_error = view is not None and view.error is not None and spec_changed and not view.in_flight
        if view is None or stale_error or (view.source is None and view.error is None):
            out.adapter_resolution_requests.append(ResolutionRequest(wanted, forget_error=spec_changed))
            if not waiting:
                _resolving(out, wanted, view, now, snap.generation, settings, role=f"adapter {name} ",
                           how="reading its adapter_config.json from the Hub" + (
                               " (a resolver pod, with the token Secret)" if wanted.kind == "token" else ""))
            waiting = True
            continue
        if view.source is not None:
            configs[name] = view.source
            continue
        request = _wait_or_fail(snap, out, wanted, view, now, settings, role=f"adapter {name} ",
                                part=Part.ADAPTER)
        if request is not None:
            out.adapter_resolution_requests.append(request)
        return Step(False)
    return Step(False) if waiting else Step(True, found.source, found.draft, configs)


def _draft_step(snap: Snapshot, spec: InferenceServerSpec, out: Outcome, now: str, settings: Settings,
                spec_changed: bool, found: Step) -> Step:
    wanted = draft_need(spec, snap.namespace)
    if wanted is None:
        return found
    view = snap.draft_resolution if snap.draft_resolution is not None and \
        snap.draft_resolution.key == wanted.key else None
    stale_error = view is not None and view.error is not None and spec_changed and not view.in_flight
    if view is None or stale_error or (view.source is None and view.error is None):
        out.draft_resolution_request = ResolutionRequest(wanted, forget_error=spec_changed)
        _resolving(out, wanted, view, now, snap.generation, settings, role="draft ")
        return Step(False)
    if view.source is not None:
        return Step(True, found.source, view.source)
    request = _wait_or_fail(snap, out, wanted, view, now, settings, role="draft ", part=Part.DRAFT)
    if request is not None:
        out.draft_resolution_request = request
    return Step(False)


def _model_step(snap: Snapshot, spec: InferenceServerSpec, out: Outcome, now: str, settings: Settings,
                spec_changed: bool) -> Step:
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
    request = _wait_or_fail(snap, out, wanted, view, now, settings)
    if request is not None:
        out.resolution_request = request
    return Step(False)


def _wait_or_fail(snap: Snapshot, out: Outcome, wanted: Need, view: ResolutionView, now: str, settings: Settings,
                  role: str = "", part: Part = Part.MODEL) -> ResolutionRequest | None:
    """A failed resolution: wait (Hub unreachable) or fail; the request to make when a retry is due."""
    assert view.error is not None
    due = view.retry_at is not None and view.retry_at <= snap.now
    request = ResolutionRequest(wanted) if due and not view.in_flight else None
    if view.error in WAITING_KINDS:
        wait = max(1.0, (view.retry_at - snap.now).total_seconds()) if view.retry_at and not due else \
            settings.resolve_poll_seconds
        message = (f"{role}{_what(wanted)}: {view.detail}; retrying in {wait:.0f} s "
                   f"({HINTS['HubUnreachable']})")
        mark_model_resolved(out, "False", Reason.HUB_UNREACHABLE, message, now, snap.generation)
        mark_phase(out, Phase.PLANNING, Reason.HUB_UNREACHABLE, message, now, snap.generation)
        out.requeue(wait)
        return request
    _failed(out, wanted, view.error, view.detail, now, snap.generation, role=role, part=part)
    if view.retry_at is not None:
        out.requeue(max(1.0, (view.retry_at - snap.now).total_seconds()))
    return request


def _what(wanted: Need) -> str:
    at = "" if wanted.revision == "main" else f"@{wanted.revision}"
    if wanted.kind == "volume" and wanted.claim is not None:
        return f"{wanted.repo}{at} in claim {wanted.claim[0]}"
    return f"{wanted.repo}{at}"


def _resolving(out: Outcome, wanted: Need, view: ResolutionView | None, now: str, generation: int,
               settings: Settings, role: str = "", how: str = "") -> None:
    how = how or {"hub": "reading config.json and the safetensors headers from the Hub",
                  "token": "a resolver pod reads the gated repository with the token Secret",
                  "volume": "a resolver pod reads the preloaded claim"}[wanted.kind]
    pod = f" ({view.pod})" if view is not None and view.pod else ""
    message = f"resolving {role}{_what(wanted)}: {how}{pod}"
    mark_model_resolved(out, "Unknown", Reason.RESOLVING, message, now, generation)
    mark_phase(out, Phase.PLANNING, Reason.RESOLVING, message, now, generation)
    out.requeue(settings.resolve_poll_seconds)


def _failed(out: Outcome, wanted: Need, kind: str, detail: str, now: str, generation: int, role: str = "",
            part: Part = Part.MODEL) -> None:
    """``role``: the message's words for the part ("draft ", "adapter x "); ``part``: what the hint depends on."""
    reason = REASONS.get(kind, Reason.INVALID_CHECKPOINT)
    hint = HINTS.get(kind, HINTS["InvalidCheckpoint"])
    if part is not Part.MODEL and kind == "ModelAccessDenied":
        hint = ("the token of spec.model.tokenSecretRef has no access to this repository: accept its terms on the Hub "
                "with that account" if wanted.kind == "token" else "accept the repository's terms on the Hub and set "
                "spec.model.tokenSecretRef (its token reads the draft and the adapters too)")
    elif part is Part.DRAFT:
        hint = "check spec.speculative.draft (name, revision), or set its architecture and weightsPerGPU"
    elif part is Part.ADAPTER:
        hint = "check spec.lora.adapters[].source and revision, or set the adapter's rank (and targetModules)"
    message = f"{role}{_what(wanted)}: {kind}: {detail}; {hint}"
    mark_model_resolved(out, "False", reason, message, now, generation)
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
           now: str, generation: int, draft: ModelSource | None = None,
           adapters: dict[str, ModelSource] | None = None) -> None:
    """``status.model.resolved`` (``status.model.draft`` for a Hub draft, ``status.model.adapters`` for Hub adapters
    read) and ``ModelResolved=True`` once the first plan of the spec exists."""
    st = out.status
    drafted = _draft_record(spec, draft, result, now)
    read = _adapter_records(spec, adapters)
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
        st.model = ModelStatus(resolved=resolved, draft=drafted, adapters=read)
    else:
        st.model.resolved, st.model.draft, st.model.adapters = resolved, drafted, read
    where = {"spec": "from spec.model.architecture and weightsPerGPU", "catalog": "from the built-in catalog"}.get(
        wanted.kind, f"from {source.describe()}" if source is not None else "")
    also = (f"; draft {draft.describe()}" if draft is not None else "") + (
        f"; adapter_config.json of {', '.join(sorted(adapters))}" if adapters else "")
    mark_model_resolved(out, "True", Reason.RESOLVED, f"{_what(wanted)} resolved {where}".strip() + also, now,
                        generation)


def _adapter_records(spec: InferenceServerSpec, adapters: dict[str, ModelSource] | None
                     ) -> list[ResolvedAdapter] | None:
    """``status.model.adapters``: what each Hub adapter's adapter_config.json said."""
    if not adapters or spec.lora is None:
        return None
    out: list[ResolvedAdapter] = []
    for adapter in spec.lora.adapters:
        source = adapters.get(adapter.name)
        if source is None:
            continue
        config = source.config
        rank = config.get("r")
        targets = config.get("target_modules")
        targets = [targets] if isinstance(targets, str) else targets
        base = config.get("base_model_name_or_path")
        out.append(ResolvedAdapter(
            name=adapter.name, repo=adapter.source, sha=source.commit if source.commit and COMMIT.match(source.commit)
            else None, rank=rank if isinstance(rank, int) and 1 <= rank <= 1024 else None,
            target_modules=[str(t)[:128] for t in targets][:64] if isinstance(targets, list) else None,
            base_model=base[:253] if isinstance(base, str) else None))
    return out or None


def _draft_record(spec: InferenceServerSpec, draft: ModelSource | None, result: Plan, now: str
                  ) -> ResolvedModel | None:
    """``status.model.draft``: the Hub draft's geometry and the weights per GPU the plan gave it."""
    found = hub_draft(spec)
    if draft is None or found is None:
        return None
    try:
        architecture = architecture_from_hf_config(draft.config)
    except (ValueError, TypeError, KeyError, AssertionError):
        architecture = None
    weights = next((e.bytes for e in result.per_gpu.extras if e.label == "draft weights"), None)
    return ResolvedModel(
        source="hub", repo=found[0][:253], revision=found[1][:255],
        sha=draft.commit if draft.commit and COMMIT.match(draft.commit) else None,
        architectures=[a for a in draft.config.get("architectures") or [] if isinstance(a, str)][:8],
        architecture=architecture, quantization=draft.weight_format,
        checkpoint_bytes=draft.checkpoint.checkpoint_bytes if draft.checkpoint else None,
        weights_per_gpu_bytes=weights,
        max_position_embeddings=architecture.max_position_embeddings if architecture is not None else None,
        resolved_at=now)
