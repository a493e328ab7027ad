"""Stored status is input, not truth: validate it on read with the spec's bounds.

Anyone allowed to update ``inferenceservers/status`` (or an older/newer ctxfit) can store a status this
version cannot use: an unparsable quantity, a context of -5, a timestamp that is not RFC 3339, a GPU
product that is not a label value. ``read_status`` returns the parsed status, or an empty one and one
line naming the first bad field; the controller then re-plans from the spec and says so in an Event,
instead of crash-looping on a traceback or rendering the bad value into the engine's command line.

Bounds are the spec's (``spec.py``): context 16..2^27 tokens (``ContextSpec``), maxNumSeqs 1..65536 and
CUDA-graph batch 1..4096 (``BatchingSpec``), memory and /dev/shm 1Mi..64Ti (``ResourcesSpec``), startup
30 s..7 d (``StartupSpec``), gpuMemoryUtilization (0, 1], memFractionStatic (0, 1), kvCacheDtype one of
``KV_CACHE_DTYPES`` (``MemorySpec``), attempts 1..20 numbered 1, 2, ... (``InferenceServerSpec.attempts``);
``status.model`` sizes 0..64 TiB (``VolumeClaimTemplate.size``), a claim name that is a claim name.
"""

from __future__ import annotations

import re
from typing import Any

from pydantic import ValidationError

from .effective import EffectiveConfig
from .model import KV_CACHE_DTYPES
from .quantity import TiB, check_quantity_bounds
from .status import EffectiveStatus, InferenceServerStatus, parse_rfc3339
from .validation import LABEL_VALUE, LABEL_VALUE_MAX

MAX_ATTEMPTS = 20
DNS_SUBDOMAIN = r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*"
"""A PersistentVolumeClaim name (RFC 1123 subdomain, k8s.io/apimachinery ``IsDNS1123Subdomain``)."""


def _bounded(where: str, value: float | None, low: float, high: float, *, low_open: bool = False,
             high_open: bool = False) -> None:
    if value is None:
        return
    too_low = value <= low if low_open else value < low
    too_high = value >= high if high_open else value > high
    if too_low or too_high:
        left, right = "(" if low_open else "[", ")" if high_open else "]"
        raise ValueError(f"{where}: {value} is outside {left}{low:g}, {high:g}{right}")


def check_effective(where: str, effective: EffectiveStatus) -> EffectiveConfig:
    """The effective configuration within the spec's bounds, as ``EffectiveConfig``. Raises ``ValueError``."""
    _bounded(f"{where}.contextLength", effective.context_length, 16, 1 << 27)
    _bounded(f"{where}.gpuMemoryUtilization", effective.gpu_memory_utilization, 0, 1, low_open=True)
    _bounded(f"{where}.memFractionStatic", effective.mem_fraction_static, 0, 1, low_open=True, high_open=True)
    _bounded(f"{where}.maxNumSeqs", effective.max_num_seqs, 1, 65536)
    _bounded(f"{where}.cudaGraphMaxBatchSize", effective.cuda_graph_max_batch_size, 1, 4096)
    _bounded(f"{where}.startupTimeoutSeconds", effective.startup_timeout_seconds, 30, 7 * 24 * 3600)
    if effective.kv_cache_dtype not in KV_CACHE_DTYPES:
        raise ValueError(f"{where}.kvCacheDtype: {effective.kv_cache_dtype!r} is not one of "
                         f"{', '.join(KV_CACHE_DTYPES)}")
    for key, text in (("memoryLimit", effective.memory_limit), ("shmSize", effective.shm_size)):
        try:
            check_quantity_bounds(text, upper_bytes=64 * TiB, lower_bytes=1 << 20)
        except ValueError as exc:
            raise ValueError(f"{where}.{key}: {exc}") from None
    return effective.to_config()


def check_status(status: InferenceServerStatus) -> None:  # noqa: C901 - one bound per status field, in order
    """Raise ``ValueError`` naming the first field of a parsed status outside the spec's bounds."""
    if len(status.attempts) > MAX_ATTEMPTS:
        raise ValueError(f"status.attempts: {len(status.attempts)} entries, at most {MAX_ATTEMPTS}")
    for i, attempt in enumerate(status.attempts):
        where = f"status.attempts[{i}]"
        if attempt.number != i + 1:
            raise ValueError(f"{where}.number: {attempt.number}, expected {i + 1}")
        check_effective(f"{where}.effective", attempt.effective)
        for key, stamp in (("startedAt", attempt.started_at), ("notBefore", attempt.not_before),
                           ("finishedAt", attempt.finished_at)):
            if stamp is not None:
                try:
                    parse_rfc3339(stamp)
                except ValueError:
                    raise ValueError(f"{where}.{key}: {stamp!r} is not an RFC 3339 time") from None
    if status.effective is not None:
        check_effective("status.effective", status.effective)
    _bounded("status.contextLength", status.context_length, 16, 1 << 27)
    product = status.node_product
    if product is not None and (len(product) > LABEL_VALUE_MAX or not re.match(LABEL_VALUE, product)):
        raise ValueError(f"status.nodeProduct: {product[:80]!r} is not a label value")
    for i, excluded in enumerate(status.excluded_products or ()):
        if not re.match(LABEL_VALUE, excluded.product):
            raise ValueError(f"status.excludedProducts[{i}].product: {excluded.product[:80]!r} is not a label value")
    if status.plan is not None:
        plan = status.plan
        _bounded("status.plan.contextLength", plan.context_length, 0, 1 << 27)
        _bounded("status.plan.headroom", plan.headroom, 0, 1, high_open=True)
        if plan.gpu_memory_bytes is not None:
            _bounded("status.plan.gpuMemoryBytes", plan.gpu_memory_bytes, 1, 2 * TiB)
    if status.model is not None:
        model = status.model
        for key, value in (("claimBytes", model.claim_bytes), ("claimWantedBytes", model.claim_wanted_bytes),
                           ("ephemeralBytes", model.ephemeral_bytes), ("bytes", model.bytes)):
            _bounded(f"status.model.{key}", value, 0, 64 * TiB)
        _bounded("status.model.downloadSeconds", model.download_seconds, 0, 365 * 24 * 3600)
        name = model.claim_name
        if name is not None and (len(name) > 253 or not re.fullmatch(DNS_SUBDOMAIN, name)):
            raise ValueError(f"status.model.claimName: {name[:80]!r} is not a claim name")
        if model.changed_at is not None:
            try:
                parse_rfc3339(model.changed_at)
            except ValueError:
                raise ValueError(f"status.model.changedAt: {model.changed_at!r} is not an RFC 3339 time") from None
    if status.spec_key is not None and not re.fullmatch(r"[0-9a-f]{1,64}", status.spec_key):
        raise ValueError(f"status.specKey: {status.spec_key[:80]!r} is not a digest")


def read_status(raw: dict[str, Any] | None) -> tuple[InferenceServerStatus, str | None]:
    """Parse and check a stored status. Returns ``(status, None)``, or ``(empty status, problem)`` where
    ``problem`` is one line naming the first bad field (the caller re-plans from the spec)."""
    try:
        status = InferenceServerStatus.from_body(raw if isinstance(raw, dict) else None)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first["loc"])
        return InferenceServerStatus(), f"status.{where}: {first['msg']}"
    try:
        check_status(status)
    except ValueError as exc:
        return InferenceServerStatus(), str(exc)
    return status, None
