"""Predict, then verify (pure): fold the engine's own start-up accounting into ``status.observed``, compare it with
the plan, record a calibration sample, and hold the engine to the context contract. See docs/design/verify.md."""

from __future__ import annotations

import math
from datetime import datetime

from ctxfit.api import GiB, InferenceServerSpec
from ctxfit.api.observed import ObservedStatus
from ctxfit.api.status import Attempt, AttemptOutcome, InferenceServerStatus, Reason, now_rfc3339, parse_rfc3339
from ctxfit.budget.calibrate import CalibrationKey, Sample, reserve_neutral_residual
from ctxfit.engines.startup import parse_startup
from ctxfit.recovery import Failure, FailureKind, Replan
from ctxfit.vocab.startup import StartupReport

from ..settings import Settings
from ..views.pods import GPUNode, PodView
from . import attempts
from .status import CLAMP_MARK, mark_clamped
from .types import EventNote, Outcome, ReadStartup

SOURCE_LINES = 8
SOURCE_LINE_CHARS = 300
MEMORY_FIELDS = ("gpu_memory_utilization", "mem_fraction_static", "kv_cache_dtype", "max_num_seqs",
                 "cuda_graph_max_batch_size")
"""An attempt is compared with the plan only when these equal the first attempt's (the plan's)."""
STARTUP_LOG_RETRY_SECONDS = 15.0
"""A Ready attempt whose log could not be read (or was still empty) is read again after this long, then after as
long as it has been Ready (15, 30, 60, 120, 240 s: a handful of reads, not one every 15 s per server)."""
STARTUP_LOG_PATIENCE_SECONDS = 300.0
"""...for this long after it became Ready; then it is recorded as not observed (the log could not be read)."""
STARTUP_WORDING_PATIENCE_SECONDS = 60.0
"""A log read with text but no KV accounting is read again (every ``STARTUP_LOG_RETRY_SECONDS``) for this long
after Ready: an engine prints its accounting before it serves, so a Ready engine's log without it is either the
runtime's log file still behind the engine's stdout, or a wording we do not know (then: not observed)."""


def _gib(value: int | None) -> str:
    return "?" if value is None else f"{value / GiB:.2f} GiB"


def _predicted(status: InferenceServerStatus, attempt: Attempt) -> int | None:
    """The plan's KV pool for this attempt's memory configuration, None when the attempt changed it."""
    if status.plan is None or not status.attempts:
        return None
    first, now = status.attempts[0].effective, attempt.effective
    if any(getattr(first, f) != getattr(now, f) for f in MEMORY_FIELDS):
        return None
    return status.plan.per_gpu.kv_cache_bytes


def capacity_tokens(observed: ObservedStatus) -> int | None:
    """Longest request the engine holds: min of served context, pool tokens, concurrency x context."""
    limits = [v for v in (observed.served_context_length, observed.kv_cache_tokens) if v is not None]
    if observed.max_concurrency is not None and observed.served_context_length:
        limits.append(int(observed.max_concurrency * observed.served_context_length))
    return min(limits) if limits else None


def clamp_message(observed: ObservedStatus, context: int) -> str | None:
    """Why the engine does not serve ``context`` (tokens), None when it does (or did not say)."""
    problems = []
    if observed.served_context_length is not None and observed.served_context_length < context:
        problems.append(f"serves context {observed.served_context_length}")
    if observed.kv_cache_tokens is not None and observed.kv_cache_tokens < context:
        problems.append(f"KV pool holds {observed.kv_cache_tokens} tokens")
    if observed.max_concurrency is not None and observed.max_concurrency < 1:
        problems.append(f"maximum concurrency {observed.max_concurrency:.2f} at context "
                        f"{observed.served_context_length or context}")
    if not problems:
        return None
    return f"the engine {', '.join(problems)}, below the effective context {context}"


def to_observed(report: StartupReport, attempt: int, pod: str, predicted: int | None, now: str) -> ObservedStatus:
    """``status.observed`` from a parsed report; ``error_bytes`` = observed - predicted KV pool."""
    error = report.kv_cache_bytes - predicted if report.kv_cache_bytes is not None and predicted is not None else None
    served = report.served_context_length or report.concurrency_context_length
    return ObservedStatus(
        attempt=attempt, pod=pod, kv_cache_bytes=report.kv_cache_bytes, kv_cache_tokens=report.kv_cache_tokens,
        max_concurrency=report.max_concurrency, served_context_length=served, weights_bytes=report.weights_bytes,
        load_seconds=report.load_seconds, predicted_kv_cache_bytes=predicted, error_bytes=error,
        draft_kv_cache_bytes=report.draft_kv_cache_bytes, draft_kv_cache_tokens=report.draft_kv_cache_tokens,
        source_lines=[line[:SOURCE_LINE_CHARS] for line in report.source_lines[:SOURCE_LINES]], observed_at=now,
    )


def _sample(out: Outcome, uid: str, server: str, observed: ObservedStatus, now: str,
            cuda_total: int | None = None, utilization: float | None = None) -> None:
    """One calibration sample; with the CUDA total the engine printed it also teaches the product's driver
    reserve, and its KV residual is taken at that total (``budget.calibrate.reserve_neutral_residual``)."""
    st = out.status
    if st.plan is None or observed.kv_cache_bytes is None or observed.predicted_kv_cache_bytes is None:
        return
    key = CalibrationKey.parse(st.plan.calibration_key or "")
    if key is None:
        return
    uncalibrated = observed.predicted_kv_cache_bytes - (st.plan.calibration_bytes or 0)
    per_gpu = st.plan.per_gpu
    planned_total = int(per_gpu.usable_bytes / utilization) if utilization and per_gpu is not None else None
    residual = reserve_neutral_residual(observed.kv_cache_bytes, uncalibrated, fraction=utilization,
                                        planned_cuda_total=planned_total, printed_cuda_total=cuda_total)
    nvml = per_gpu.total_bytes if per_gpu is not None and cuda_total else None
    out.samples.append((key, Sample(f"{uid}/{observed.attempt}", server, residual, observed.kv_cache_bytes,
                                    uncalibrated, now, cuda_total if nvml else None, nvml)))


def _ready_for(finished_at: str | None, now: datetime) -> float:
    """Seconds the attempt has been Ready (0 for a little ahead of ``now``: clocks of two replicas); ``inf`` (the
    patience is over) when that is unknown: no or an unreadable ``finishedAt`` (no zone: naive minus aware raised
    TypeError in the pass), or one more than
    ``STARTUP_LOG_PATIENCE_SECONDS`` ahead (a hand edit, a clock stepped back), else the log would be read every
    ``STARTUP_LOG_RETRY_SECONDS`` until then, or forever."""
    if finished_at is None:
        return math.inf
    try:
        seconds = (now - parse_rfc3339(finished_at)).total_seconds()
    except (ValueError, TypeError):
        return math.inf
    return math.inf if seconds < -STARTUP_LOG_PATIENCE_SECONDS else max(seconds, 0.0)


def observe_startup(out: Outcome, spec: InferenceServerSpec, pod: PodView, read_startup: ReadStartup, *,
                    uid: str, server: str, node: GPUNode | None, settings: Settings, now: datetime,
                    generation: int, replan: Replan) -> None:
    """Read the current (Ready) attempt's start-up once; record, compare, sample, verify the contract."""
    st = out.status
    cur = st.current_attempt
    if cur is None or cur.outcome is not AttemptOutcome.SUCCEEDED:
        return
    if st.observed is not None and st.observed.attempt == cur.number:
        return
    stamp = now_rfc3339(now)
    text = read_startup(pod)
    unread = text is None or not text.strip()
    report = parse_startup(spec.engine.kind, text or "")
    if not report.observed:
        ready_for = _ready_for(cur.finished_at, now)
        if ready_for < (STARTUP_LOG_PATIENCE_SECONDS if unread else STARTUP_WORDING_PATIENCE_SECONDS):
            # not read yet (no kubelet answer, or the log file lags): again after as long as it has been Ready
            out.requeue(max(STARTUP_LOG_RETRY_SECONDS, ready_for))
            return
    observed = to_observed(report, cur.number, pod.name, _predicted(st, cur), stamp)
    st.observed = observed
    if not report.observed:
        why = (f"the engine log could not be read in {STARTUP_LOG_PATIENCE_SECONDS:.0f} s" if unread else
               "the engine log shows no KV cache accounting in a known wording")
        out.events.append(EventNote("Normal", Reason.OBSERVED, f"attempt {cur.number}: {why} (not observed)"))
        return
    _sample(out, uid, server, observed, stamp, report.cuda_total_bytes, cur.effective.gpu_memory_utilization)
    error = f" (error {observed.error_bytes / GiB:+.2f} GiB)" if observed.error_bytes is not None else ""
    out.events.append(EventNote(
        "Normal", Reason.OBSERVED,
        f"attempt {cur.number}: predicted {_gib(observed.predicted_kv_cache_bytes)} / observed "
        f"{_gib(observed.kv_cache_bytes)} KV cache per GPU{error}; {observed.kv_cache_tokens} tokens, context "
        f"{observed.served_context_length or cur.effective.context_length}"))
    problem = clamp_message(observed, cur.effective.context_length)
    if problem is None:
        return
    capacity = capacity_tokens(observed) or 0
    evidence = f"{CLAMP_MARK} {problem}; " + " | ".join(observed.source_lines[:3])
    out.events.append(EventNote("Warning", Reason.CONTEXT_CLAMPED, f"attempt {cur.number}: {problem}"))
    failure = Failure(FailureKind.KV_CACHE_TOO_SMALL, {"requestedContextLength": cur.effective.context_length,
                                                       "estimatedMaxContextLength": capacity}, evidence)
    attempts.fail(out, spec, cur, pod, failure, node, settings, now, generation, replan, clamped=True)
    mark_clamped(out, stamp, generation)
