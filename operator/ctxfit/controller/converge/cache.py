"""The weights cache in reconciliation (pure): choose the cache, keep its claim, follow the download.

``resolve`` picks the cache and asks for the claim; ``observe_download`` folds the download into status and decides
on its failures. The rules for each failure: docs/design/weights-cache.md.
"""

from __future__ import annotations

from dataclasses import replace
from datetime import datetime

from ctxfit.api import InferenceServerSpec, bytes_to_quantity
from ctxfit.api.model_cache import CacheMode, ModelStatus
from ctxfit.api.status import Phase, Reason, parse_rfc3339
from ctxfit.recovery import Failure, FailureKind, PolicyContext
from ctxfit.recovery.download import ClaimFacts, decide_download, grown_claim_bytes
from ctxfit.render.cache import CacheVolume, checkpoint_bytes, claim_name_for, render_claim, resolve_cache

from ..views.cache import ClaimView, parse_progress
from .status import mark_phase, mark_weights_cached
from .types import DiagnoseDownload, EventNote, Outcome, RecordFailure, Snapshot

DOWNLOAD_RECHECK_SECONDS = 10.0
"""How often a running or retrying download is looked at (elapsed time and progress in status); one that has not
started waits for its pod's own change instead."""
UNKNOWN_DOWNLOAD_RESTARTS = 3
"""Restarts of the download with an unrecognized error before the policy treats it as Unknown."""
PERMANENT_KINDS = frozenset({FailureKind.MODEL_ACCESS_DENIED, FailureKind.MODEL_NOT_FOUND})

def _weights_bytes(out: Outcome) -> int | None:
    plan = out.status.plan
    return plan.per_gpu.weights_bytes if plan is not None else None


def resolve(snap: Snapshot, spec: InferenceServerSpec, out: Outcome, now: str,
            default_cache: str = "auto") -> CacheVolume | None:
    """The cache in force (None when the StorageClasses were never read: render without a cache).

    ``default_cache`` (``Settings.default_cache``): ``auto`` applies the default rule, ``emptyDir`` never
    creates a claim for a server without ``spec.model.cache``. When the StorageClasses cannot be read this
    time, the mode already in ``status.model`` stays (a failed list must not change the pod template).
    """
    st = out.status
    resolved = st.model.resolved if st.model is not None else None
    draft, adapters = (st.model.draft, st.model.adapters) if st.model is not None else (None, None)
    old = st.model if st.model is not None and st.model.cache is not None else None  # None: only resolved so far
    if snap.storage is None and old is None:
        return None
    checkpoint = checkpoint_bytes(spec, _weights_bytes(out))
    if snap.storage is not None:
        has_default = snap.storage.default_class is not None and default_cache == "auto"
    else:
        has_default = old is not None and old.cache is CacheMode.VOLUME_CLAIM_TEMPLATE
    owned = old is not None and old.cache is CacheMode.VOLUME_CLAIM_TEMPLATE
    cache, mode_spec, note = resolve_cache(spec, server=snap.name, has_default_storage_class=has_default,
                                           checkpoint=checkpoint, claim_name=owned_claim_name(old))
    have = snap.claim if snap.claim is not None and snap.claim.name == cache.claim_name else None
    # the size asked for: the spec's, a growth still to apply (wanted), never below what the claim has (a
    # claim cannot shrink; after a cache mode round trip the kept claim may be the larger one)
    grown = max(old.claim_bytes or 0, old.claim_wanted_bytes or 0) if owned and old is not None else 0
    grown = max(grown, have.request_bytes or 0) if have is not None else grown
    if cache.mode is CacheMode.VOLUME_CLAIM_TEMPLATE and grown > (cache.size_bytes or 0):
        cache = replace(cache, size_bytes=grown)
    claim_bytes = wanted = None
    if cache.mode is CacheMode.VOLUME_CLAIM_TEMPLATE:  # status says what the claim has, and what it is asked
        claim_bytes = have.request_bytes if have is not None else None
        wanted = cache.size_bytes if claim_bytes is None or claim_bytes < (cache.size_bytes or 0) else None
    st.model = ModelStatus(
        cache=cache.mode, claim_name=cache.claim_name, claim_bytes=claim_bytes, claim_wanted_bytes=wanted,
        ephemeral_bytes=cache.size_bytes if cache.mode is CacheMode.EMPTY_DIR else None,
        bytes=old.bytes if old else None, download_seconds=old.download_seconds if old else None,
        changed_at=old.changed_at if old else None, note=note, resolved=resolved, draft=draft, adapters=adapters,
        owned_claim=cache.claim_name if cache.mode is CacheMode.VOLUME_CLAIM_TEMPLATE else
        (old.owned_claim or (old.claim_name if owned else None)) if old is not None else None,
    )
    if cache.mode is CacheMode.EMPTY_DIR:
        mark_weights_cached(out, "False", Reason.NOT_CACHED, note if spec.model.cache is None else
                        "emptyDir: every attempt downloads the weights again", now, snap.generation)
    elif not cache.downloads:
        mark_weights_cached(out, "True", Reason.PRELOADED, f"preloaded in claim {cache.claim_name} (read-only)", now,
                        snap.generation)
    started = st.current_attempt is not None and st.phase is not Phase.FAILED
    template = mode_spec.volume_claim_template
    if template is not None and cache.claim_name and cache.size_bytes:
        grow = started and (have is None or (have.request_bytes or 0) < cache.size_bytes)
        if grow or (have is not None and retention_differs(have, snap.uid, template.retain)):
            out.claim = render_claim(snap.name, snap.namespace, snap.uid, spec, template, cache.claim_name,
                                     cache.size_bytes)
            out.claim_exists = have is not None
    return cache


def owned_claim_name(old: ModelStatus | None) -> str | None:
    """The operator's own claim of the server as ``status.model`` records it (in any mode), None: none yet."""
    if old is None:
        return None
    if old.cache is CacheMode.VOLUME_CLAIM_TEMPLATE:
        return old.claim_name or old.owned_claim
    return old.owned_claim


def retention_differs(claim: ClaimView, uid: str, retain: bool) -> bool:
    """The server's claim is not kept as ``retain`` says: an ownerReference to the server (deleted with it)
    exactly when not retained, and the ``ctxfit.io/owner-uid`` marker in both cases (``render.cache.render_claim``).
    False when its metadata is not known (a claim just created from the rendering)."""
    holder = claim.holder
    if holder is None:
        return False
    referenced = any(owner == uid for _, owner in holder.owners)
    return referenced == retain or holder.marker != uid


def _seconds(start: str | None, end: datetime | str | None) -> int | None:
    if start is None or end is None:
        return None
    try:
        stop = parse_rfc3339(end) if isinstance(end, str) else end
        return max(0, int((stop - parse_rfc3339(start)).total_seconds()))
    except ValueError:
        return None


def _where(cache: CacheVolume) -> str:
    if cache.claim_name:
        return f"claim {cache.claim_name}"
    return f"hostPath {cache.host_path}" if cache.host_path else "the pod's ephemeral storage"


def _grow_claim(snap: Snapshot, spec: InferenceServerSpec, out: Outcome, cache: CacheVolume, failure: Failure,
                now: str) -> str | None:
    """Grow the operator's full claim (same name when expandable, else the next name). None: cannot grow."""
    st = out.status
    assert st.model is not None and cache.size_bytes is not None
    grown = grown_claim_bytes(cache.size_bytes, failure.numbers)
    template = spec.model.cache.volume_claim_template if spec.model.cache is not None else None
    class_name = template.storage_class_name if template is not None else None
    if grown is None:
        return None
    old_name = cache.claim_name or claim_name_for(snap.name)
    if snap.storage is not None and snap.storage.can_expand(class_name):
        name, how = old_name, "expanded in place (the StorageClass allows expansion)"
    else:
        generation = int(old_name.rsplit("-", 1)[1]) + 1 if old_name.rsplit("-", 1)[1].isdigit() else 2
        name, how = claim_name_for(snap.name, generation), "replaced by a new claim (its StorageClass cannot expand)"
        out.claim_delete = old_name
    st.model.claim_name, st.model.claim_wanted_bytes, st.model.changed_at = name, grown, now
    if name != old_name:
        st.model.claim_bytes = None  # the new claim does not exist yet
    have = snap.claim if snap.claim is not None and snap.claim.name == old_name else None
    size = have.request_bytes if have is not None and have.request_bytes else cache.size_bytes
    return (f"claim {old_name} of {bytes_to_quantity(size)} is full ({failure.evidence[:160]}); "
            f"{how}: {name} of {bytes_to_quantity(grown)}, same engine configuration")


def observe_download(snap: Snapshot,  # noqa: C901 - one branch per download outcome; to split
                     spec: InferenceServerSpec, out: Outcome, cache: CacheVolume | None,
                     diagnose: DiagnoseDownload, record: RecordFailure, now: str) -> bool:
    """Fold the newest attempt's download into status; True while the engine has not started (or failed here).

    ``record(pod, failure, decision)`` ends the attempt through the recovery policy (``attempts.fail``).
    """
    st = out.status
    cur = st.current_attempt
    if cache is None or not cache.downloads or cur is None or st.phase is Phase.FAILED:
        return False
    pods = [p for p in snap.pods if p.attempt == cur.number and not p.deleting and p.download is not None]
    pods = [p for p in pods if p.download is not None and p.download.claim in (None, cache.claim_name)]
    if not pods:
        return False
    pending = [p for p in pods if p.download is not None and p.download.state != "succeeded"]
    model = st.model
    assert model is not None
    if not pending:
        done = pods[0].download
        assert done is not None
        seconds = _seconds(done.started_at, done.finished_at)
        if seconds is not None:
            model.download_seconds = seconds
        if cache.mode is not CacheMode.EMPTY_DIR:
            size = f"{model.bytes / 1e9:.1f} GB of " if model.bytes else ""
            mark_weights_cached(out, "True", Reason.CACHED, f"{size}{spec.model.name} ({spec.model.revision}) in "
                            f"{_where(cache)}; downloaded in {model.download_seconds or 0} s", now, snap.generation)
        if st.phase is Phase.DOWNLOADING:
            mark_phase(out, Phase.STARTING, Reason.ENGINE_STARTING, f"weights ready; starting attempt {cur.number}",
                       now, snap.generation)
        return False
    pod = pending[0]
    dl = pod.download
    assert dl is not None
    stale = model.changed_at is not None and dl.finished_at is not None and dl.finished_at <= model.changed_at
    if dl.state == "failed" and not stale:
        failure = diagnose(pod)
        if failure.kind in PERMANENT_KINDS or (failure.kind is FailureKind.UNKNOWN
                                               and dl.restart_count >= UNKNOWN_DOWNLOAD_RESTARTS):
            record(pod, failure, None)
            return True
        if failure.kind is FailureKind.CACHE_VOLUME_FULL:
            owned = cache.mode is CacheMode.VOLUME_CLAIM_TEMPLATE
            message = _grow_claim(snap, spec, out, cache, failure, now) if owned else None
            if message is None:
                ref = spec.model.token_secret_ref
                have = snap.claim if snap.claim is not None and snap.claim.name == cache.claim_name else None
                user_bytes = (have.capacity_bytes or have.request_bytes) if have is not None else cache.size_bytes
                facts = ClaimFacts(cache.mode, False, cache.claim_name, user_bytes,
                                   f"Secret {ref.name} key {ref.key}" if ref else None)
                ctx = PolicyContext(spec, cur.effective.to_config(), failure, (), None, None)
                record(pod, failure, decide_download(ctx, facts))
                return True
            out.events.append(EventNote("Warning", Reason.CLAIM_GROWN, message))
            mark_phase(out, Phase.DOWNLOADING, Reason.CLAIM_GROWN, message, now, snap.generation)
            mark_weights_cached(out, "False", Reason.CLAIM_GROWN, message, now, snap.generation)
            out.requeue(DOWNLOAD_RECHECK_SECONDS)
            return True
        message = (f"download of {spec.model.name} failed ({failure.kind.value}: {failure.evidence[:200]}); "
                   f"the kubelet retries it with backoff (restart {dl.restart_count}); no engine setting changes")
        if st.message != message:
            out.events.append(EventNote("Warning", Reason.DOWNLOAD_RETRYING, message))
        mark_phase(out, Phase.DOWNLOADING, Reason.DOWNLOAD_RETRYING, message, now, snap.generation)
        mark_weights_cached(out, "False", Reason.DOWNLOAD_RETRYING, message, now, snap.generation)
        out.requeue(DOWNLOAD_RECHECK_SECONDS)
        return True
    if dl.state == "waiting" and dl.started_at is None:  # not started: scheduling, or the claim binding
        claim = snap.claim if snap.claim is not None and snap.claim.name == cache.claim_name else None
        why = (f"claim {claim.name} is {claim.phase or 'not bound'}" if claim is not None and claim.phase != "Bound"
               else f"pod {pod.name} is {pod.phase or 'Pending'}")
        mark_weights_cached(out, "False", Reason.DOWNLOADING, f"download not started yet: {why}", now, snap.generation)
        # no recheck: what ends this wait (the pod scheduled once its claim binds, the init container started) is a
        # change of the pod, and every pod change is a pass; polling it cost 1,000 waiting servers 100 passes/s
        return False  # the pod itself waits (scheduling, GPUs, image pull): converge.waiting says why
    elapsed = _seconds(dl.started_at or pod.created, snap.now)
    progress = parse_progress(snap.download_log(pod)) if snap.download_log is not None else None
    shown = ""
    if progress is not None:
        done_bytes, total = progress
        model.bytes = total or model.bytes
        shown = f", {done_bytes / 1e9:.1f} of {total / 1e9:.1f} GB" if total else f", {done_bytes / 1e9:.1f} GB"
    message = (f"downloading {spec.model.name} ({spec.model.revision}) into {_where(cache)}: "
               f"{elapsed if elapsed is not None else 0} s{shown}")
    mark_phase(out, Phase.DOWNLOADING, Reason.DOWNLOADING, message, now, snap.generation)
    mark_weights_cached(out, "False", Reason.DOWNLOADING, message, now, snap.generation)
    out.requeue(DOWNLOAD_RECHECK_SECONDS)
    return True

