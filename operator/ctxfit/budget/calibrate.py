"""Per-cluster calibration of the predicted KV pool from observed start-ups (pure).

A *sample* is one start-up's residual: observed KV pool minus the planner's uncalibrated prediction,
bytes per GPU, keyed by (engine kind, engine minor version, GPU product, TP, PP). The operator keeps
samples in a ConfigMap (``ctxfit.controller.kube.calibration``); ``ctxfit calibrate`` makes one
offline. The planner takes an optional ``CalibrationTable`` and shifts the KV term of the budget by
``correction`` of the most specific matching samples (exact key; else same engine, version and GPU at
any TP/PP; else same engine and version on any GPU).

The rule (``correction``), bytes:
1. each residual is clipped to +-``CLIP_BYTES`` (one wild start-up counts as at most 2 GiB);
2. ``m`` = median of the clipped residuals; for an even count, of the two middle values the one
   nearer zero, and 0 when they have opposite signs (no agreed direction);
3. ``correction = m * n / (n + 1)`` (shrinkage: one start-up moves the prediction half-way to what
   it saw; more agreeing start-ups move it closer).
Hence: the calibrated prediction lies between the uncalibrated one and prediction + the median raw
residual (it only ever moves toward what was observed), ``|correction| < CLIP_BYTES``, and adding one
sample of any value moves the correction by at most ``CLIP_BYTES``
(tests/unit/budget/test_calibrate_properties.py checks these with Hypothesis).

The driver's reserve per GPU product (issue 25, item 7): a sample may carry the CUDA-visible total the start-up
printed (vLLM "Free memory on device (F/T GiB)", V0 "total_gpu_memory") and the node's NVML total; their difference
is the reserve of that product under that driver. ``CalibrationTable.driver_reserve`` is the median over every
sample of the product (any engine, version or layout: the reserve is the driver's), and ``apply_learned_reserve``
puts it in place of the catalog's (``catalog/gpus.yaml`` ``driverReserveMiB``) before anything is budgeted. Such a
sample's KV residual is recorded against the prediction at the total the engine printed, so the reserve is not
counted twice (``reserve_neutral_residual``)."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, cast

from ctxfit.api import EffectiveConfig, GiB
from ctxfit.engines import BudgetTerms, Engine

if TYPE_CHECKING:
    from ctxfit.vocab.inputs import PlanInputs

CLIP_BYTES = 2 * GiB
"""A single residual counts as at most this much (bounded influence of an outlier)."""
KEEP_SAMPLES = 20
"""Samples kept per key (the newest); ``count`` keeps counting."""
MAX_RESERVE_BYTES = 8 * GiB
"""A larger NVML-minus-CUDA difference is not a driver reserve (a wrong product label, a MIG slice)."""


@dataclass(frozen=True, order=True)
class CalibrationKey:
    """(engine kind, engine minor version "0.19", GPU product label, TP, PP)."""

    engine: str
    version: str
    gpu: str
    tp: int
    pp: int

    def text(self) -> str:
        """``vllm/0.19/NVIDIA-H100-80GB-HBM3/tp1/pp1`` (``status.plan.calibrationKey``)."""
        return f"{self.engine}/{self.version}/{self.gpu}/tp{self.tp}/pp{self.pp}"

    @classmethod
    def parse(cls, text: str) -> CalibrationKey | None:
        """Inverse of ``text``; None when malformed."""
        parts = text.split("/")
        if len(parts) != 5 or not parts[3].startswith("tp") or not parts[4].startswith("pp"):
            return None
        try:
            return cls(parts[0], parts[1], parts[2], int(parts[3][2:]), int(parts[4][2:]))
        except ValueError:
            return None


def calibration_key(inputs: PlanInputs) -> CalibrationKey:
    """The key of a plan: engine kind, engine minor version, GPU product (catalog, else spec, else
    "unknown"), TP, PP."""
    product = inputs.gpu.product if inputs.gpu else (inputs.spec.gpu.product or "unknown")
    return CalibrationKey(inputs.spec.engine.kind.value, minor_version(inputs.engine_version), product,
                          inputs.tp, inputs.pp)


def minor_version(version: tuple[int, int, int]) -> str:
    """``(0, 19, 1)`` -> ``"0.19"``: calibration is per minor version (patches keep the memory model)."""
    return f"{version[0]}.{version[1]}"


@dataclass(frozen=True)
class Sample:
    """One observed start-up. ``sample_id`` = ``<server uid>/<attempt>`` (exactly-once key)."""

    sample_id: str
    server: str
    residual_bytes: int
    observed_kv_bytes: int
    predicted_kv_bytes: int
    time: str
    cuda_total_bytes: int | None = None
    """The CUDA-visible total the start-up printed, bytes (None: not printed)."""
    gpu_memory_bytes: int | None = None
    """The GPU's NVML / GFD total the plan used, bytes."""

    def to_wire(self) -> dict[str, Any]:
        """Readable YAML/JSON keys."""
        wire: dict[str, Any] = {"id": self.sample_id, "server": self.server, "residualBytes": self.residual_bytes,
                                "residualGiB": round(self.residual_bytes / GiB, 3),
                                "observedKvCacheBytes": self.observed_kv_bytes,
                                "predictedKvCacheBytes": self.predicted_kv_bytes, "time": self.time}
        if self.cuda_total_bytes and self.gpu_memory_bytes:
            wire.update(cudaTotalBytes=self.cuda_total_bytes, gpuMemoryBytes=self.gpu_memory_bytes)
        return wire

    @classmethod
    def from_wire(cls, data: Mapping[str, Any]) -> Sample:
        """Inverse of ``to_wire``. Raises ``KeyError``/``ValueError`` on malformed data."""
        cuda, nvml = data.get("cudaTotalBytes"), data.get("gpuMemoryBytes")
        return cls(str(data["id"]), str(data.get("server", "")), int(data["residualBytes"]),
                   int(data.get("observedKvCacheBytes", 0)), int(data.get("predictedKvCacheBytes", 0)),
                   str(data.get("time", "")), int(cuda) if cuda is not None else None,
                   int(nvml) if nvml is not None else None)

    @property
    def reserve_bytes(self) -> int | None:
        """NVML total minus the printed CUDA total, when both are known and plausible (0 .. 8 GiB)."""
        if not self.cuda_total_bytes or not self.gpu_memory_bytes:
            return None
        reserve = self.gpu_memory_bytes - self.cuda_total_bytes
        return reserve if 0 <= reserve <= MAX_RESERVE_BYTES else None


def _clip(value: int) -> int:
    return max(-CLIP_BYTES, min(CLIP_BYTES, value))


def median_toward_zero(values: Iterable[int]) -> int:
    """Median; for an even count the middle value nearer zero, 0 when the two middles differ in sign."""
    ordered = sorted(values)
    if not ordered:
        return 0
    n = len(ordered)
    if n % 2:
        return ordered[n // 2]
    low, high = ordered[n // 2 - 1], ordered[n // 2]
    if (low < 0) != (high < 0) and low != 0 and high != 0:
        return 0
    return low if abs(low) <= abs(high) else high


def correction(residuals: Iterable[int]) -> int:
    """The calibration offset for these residuals, bytes (see the module docstring for the rule)."""
    clipped = [_clip(r) for r in residuals]
    n = len(clipped)
    if n == 0:
        return 0
    return int(median_toward_zero(clipped) * n / (n + 1))


@dataclass
class CalibrationEntry:
    """Samples of one key: ``count`` start-ups seen, the newest ``KEEP_SAMPLES`` kept."""

    key: CalibrationKey
    count: int = 0
    samples: list[Sample] = field(default_factory=list)

    def add(self, sample: Sample) -> bool:
        """Add ``sample`` unless its id is already here (idempotent). Returns True when added."""
        if any(s.sample_id == sample.sample_id for s in self.samples):
            return False
        self.samples = [*self.samples, sample][-KEEP_SAMPLES:]
        self.count += 1
        return True

    def to_wire(self) -> dict[str, Any]:
        """Readable document: key, count, median residual, correction, samples."""
        residuals = [s.residual_bytes for s in self.samples]
        return {"engine": self.key.engine, "version": self.key.version, "gpu": self.key.gpu, "tp": self.key.tp,
                "pp": self.key.pp, "count": self.count, "medianResidualBytes": median_toward_zero(residuals),
                "medianResidualGiB": round(median_toward_zero(residuals) / GiB, 3),
                "correctionBytes": correction(residuals), "samples": [s.to_wire() for s in self.samples]}

    @classmethod
    def from_wire(cls, data: Mapping[str, Any]) -> CalibrationEntry:
        """Inverse of ``to_wire``. Raises ``KeyError``/``ValueError``/``TypeError`` on malformed data."""
        key = CalibrationKey(str(data["engine"]), str(data["version"]), str(data["gpu"]), int(data["tp"]),
                             int(data["pp"]))
        samples = [Sample.from_wire(s) for s in data.get("samples") or []]
        count = max(int(data.get("count", len(samples))), len(samples))
        return cls(key, count, samples[-KEEP_SAMPLES:])  # a hand-edited list keeps only the newest, as ``add``


@dataclass(frozen=True)
class Correction:
    """What the planner applies: offset bytes, how many start-ups, and the sentence for the reasons."""

    offset_bytes: int
    samples: int
    scope: str
    reason: str


@dataclass
class CalibrationTable:
    """All entries, by key."""

    entries: dict[CalibrationKey, CalibrationEntry] = field(default_factory=dict)

    def add(self, key: CalibrationKey, sample: Sample) -> bool:
        """Record ``sample`` under ``key`` (idempotent by sample id across the whole table)."""
        if any(s.sample_id == sample.sample_id for e in self.entries.values() for s in e.samples):
            return False
        entry = self.entries.setdefault(key, CalibrationEntry(key))
        return entry.add(sample)

    def lookup(self, key: CalibrationKey, engine_label: str) -> Correction | None:
        """The most specific correction for ``key`` (exact; any TP/PP; any GPU), None without samples."""
        scopes = (
            (f"on {key.gpu} at TP {key.tp} PP {key.pp}", lambda k: k == key),
            (f"on {key.gpu} (any TP/PP)", lambda k: (k.engine, k.version, k.gpu) == (key.engine, key.version, key.gpu)),
            ("on any GPU", lambda k: (k.engine, k.version) == (key.engine, key.version)),
        )
        for scope, matches in scopes:
            samples = [s for k, e in sorted(self.entries.items()) if matches(k) for s in e.samples]
            if samples:
                offset = correction(s.residual_bytes for s in samples)
                reason = (f"calibrated from {len(samples)} start-up{'s' if len(samples) != 1 else ''} of "
                          f"{engine_label} {key.version} {scope}: {offset / GiB:+.2f} GiB KV pool "
                          f"(median residual {median_toward_zero(s.residual_bytes for s in samples) / GiB:+.2f} "
                          "GiB, shrunk by n/(n+1), each clipped to +-2 GiB)")
                return Correction(offset, len(samples), scope, reason)
        return None

    def driver_reserve(self, product: str) -> tuple[int, int] | None:
        """(reserve bytes, samples) learned for a GPU product: the median of NVML minus the printed CUDA total over
        its samples (any engine, version, TP, PP; of an even count the upper middle, the safe side); None without
        one."""
        reserves = sorted(r for k, e in sorted(self.entries.items()) if k.gpu == product for s in e.samples
                          if (r := s.reserve_bytes) is not None)
        if not reserves:
            return None
        return reserves[len(reserves) // 2], len(reserves)

    def to_wire(self) -> dict[str, Any]:
        """``{"entries": [...]}`` sorted by key."""
        return {"entries": [self.entries[k].to_wire() for k in sorted(self.entries)]}

    @classmethod
    def from_wire(cls, data: Mapping[str, Any] | None) -> CalibrationTable:
        """Inverse of ``to_wire``; malformed entries are skipped (a hand-edited ConfigMap must not crash)."""
        table = cls()
        for raw in (data or {}).get("entries") or []:
            try:
                entry = CalibrationEntry.from_wire(raw)
            except (KeyError, ValueError, TypeError):
                continue
            table.entries[entry.key] = entry
        return table


class CalibratedEngine:
    """An ``Engine`` whose budget moves ``offset_bytes`` from "other" into the KV pool (negative: out of it).

    Every other method is the wrapped engine's. The usable total is unchanged, so the sum
    ``usable = weights + activation + cuda_graph + other + kv_cache`` still holds.
    """

    def __init__(self, inner: Engine, correction_: Correction) -> None:
        self._inner = inner
        self.correction = correction_

    def budget(self, inputs: PlanInputs, effective: EffectiveConfig) -> BudgetTerms:
        """The wrapped engine's terms with the calibration offset applied to the KV pool."""
        terms = self._inner.budget(inputs, effective)
        offset = self.correction.offset_bytes
        shift = f"{-offset / GiB:+.2f} GiB calibration ({self.correction.samples} observed start-ups)"
        notes = [f"{n}; {shift}" if n.startswith("other:") else n for n in terms.notes]
        if not any(n.startswith("other:") for n in terms.notes):
            notes.append(f"other: {shift}")
        return dataclasses.replace(terms, kv_cache_bytes=terms.kv_cache_bytes + offset,
                                   other_bytes=terms.other_bytes - offset, notes=tuple(notes))

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)


ENGINE_LABELS = {"vllm": "vLLM", "sglang": "SGLang"}


def apply_learned_reserve(inputs: PlanInputs, table: CalibrationTable | None) -> tuple[PlanInputs, str | None]:
    """``inputs`` with the CUDA-visible total from the product's learned driver reserve (``driver_reserve``), and
    the sentence for the reasons; unchanged (None) without a learned reserve or a product."""
    product = inputs.gpu.product if inputs.gpu else inputs.spec.gpu.product
    learned = table.driver_reserve(product) if table is not None and product else None
    if learned is None:
        return inputs, None
    reserve, n = learned
    catalog = inputs.gpu_total_bytes - inputs.cuda_total_bytes
    moved = dataclasses.replace(inputs, cuda_total_bytes=inputs.gpu_total_bytes - reserve)
    return moved, (f"driver reserve of {product} learned from {n} start-up{'s' if n != 1 else ''}: "
                   f"{reserve / 2**20:.0f} MiB (catalog {catalog / 2**20:.0f} MiB), CUDA total "
                   f"{moved.cuda_total_bytes / GiB:.2f} GiB")


def reserve_neutral_residual(observed_kv: int, predicted_kv: int, *, fraction: float | None,
                             planned_cuda_total: int | None, printed_cuda_total: int | None) -> int:
    """Observed minus predicted KV pool with the prediction moved to the CUDA total the engine printed: the pool
    scales with the total by the memory fraction (vLLM ``requested = total x utilization``), so a wrong reserve
    shows in the learned reserve, not in the KV residual as well. Without the totals: the plain residual."""
    if not fraction or not planned_cuda_total or not printed_cuda_total:
        return observed_kv - predicted_kv
    return observed_kv - (predicted_kv + int(fraction * (printed_cuda_total - planned_cuda_total)))


def calibrate_engine(engine: Engine, inputs: PlanInputs,
                     table: CalibrationTable | None) -> tuple[Engine, CalibrationKey, Correction | None]:
    """``engine`` wrapped with the table's most specific correction for ``inputs`` (unchanged without one)."""
    key = calibration_key(inputs)
    found = table.lookup(key, ENGINE_LABELS.get(key.engine, key.engine)) if table is not None else None
    if found is None or found.offset_bytes == 0:
        return engine, key, found
    return cast(Engine, CalibratedEngine(engine, found)), key, found
