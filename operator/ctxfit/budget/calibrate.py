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
counted twice (``reserve_neutral_residual``).

The table is shared input, never trusted (issue 28, docs/design/calibration-trust.md): ``from_wire`` validates every
entry and sample (whole finite numbers within ``MAX_BYTES``, bounded texts, an engine, minor version and GPU label as
keys) and drops a bad one into ``CalibrationTable.problems`` instead of raising; at most ``MAX_ENTRIES`` keys are read
or kept. The operator plans a namespace's servers with ``CalibrationTable.scoped``: its own start-ups when it has
some, else only what at least ``MIN_TENANTS`` namespaces agree on (one vote per namespace), so one tenant's crafted
start-up logs never move another tenant's plans."""

from __future__ import annotations

import dataclasses
import math
import re
from collections import Counter
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING, Any, cast

from ctxfit.api import EffectiveConfig, GiB
from ctxfit.engines import BudgetTerms, Engine

if TYPE_CHECKING:
    from ctxfit.vocab.inputs import PlanInputs

CLIP_BYTES = 2 * GiB
"""A single residual counts as at most this much (bounded influence of an outlier)."""
KEEP_SAMPLES = 20
"""Samples kept per key; past it the oldest of the namespace holding the most goes (one namespace's flood of start-ups
evicts its own, never another's); ``count`` keeps counting."""
MAX_RESERVE_BYTES = 8 * GiB
"""A larger NVML-minus-CUDA difference is not a driver reserve (a wrong product label, a MIG slice)."""
MAX_ENTRIES = 64
"""Keys a table holds (engine x minor x GPU x TP x PP in use in one cluster: a few dozen at most). More are dropped on
read; ``add`` of a new key to a full table evicts the key sampled least recently."""
MAX_PROBLEMS = 20
"""Problems a read keeps the words of (``CalibrationTable.problem_count`` counts them all)."""
MAX_READ_ITEMS = 4 * MAX_ENTRIES
"""Raw list items looked at on read (valid or not): the parse cost is bounded whatever the text holds."""
MAX_BYTES = 2 << 40
"""Largest KV pool or GPU total a sample may state (2 TiB: no GPU has that much); ``residualBytes`` within +-it."""
MIN_TENANTS = 3
"""Namespaces with samples of a key before their start-ups move another namespace's plans (``lookup``): the median of
the per-namespace medians, so one tenant's crafted start-ups (any number of them) never decide another's plan."""
VERSION_TEXT = re.compile(r"^[0-9]{1,4}\.[0-9]{1,4}$")
LABEL_TEXT = re.compile(r"^[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?$")


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
        """Inverse of ``to_wire``, validated: every number a whole finite number within its bounds (``MAX_BYTES``),
        every text a bounded string. Raises ``KeyError``/``ValueError`` naming the bad field."""
        if not isinstance(data, Mapping):
            raise ValueError("sample: not a mapping")
        cuda, nvml = data.get("cudaTotalBytes"), data.get("gpuMemoryBytes")
        return cls(_text(data["id"], "id"), _text(data.get("server", ""), "server", 512),
                   _int(data["residualBytes"], "residualBytes", -MAX_BYTES, MAX_BYTES),
                   _int(data.get("observedKvCacheBytes", 0), "observedKvCacheBytes", 0, MAX_BYTES),
                   _int(data.get("predictedKvCacheBytes", 0), "predictedKvCacheBytes", 0, MAX_BYTES),
                   _text(_stamp(data.get("time", "")), "time", 64),
                   _int(cuda, "cudaTotalBytes", 0, MAX_BYTES) if cuda is not None else None,
                   _int(nvml, "gpuMemoryBytes", 0, MAX_BYTES) if nvml is not None else None)

    @property
    def reserve_bytes(self) -> int | None:
        """NVML total minus the printed CUDA total, when both are known and plausible (0 .. 8 GiB)."""
        if not self.cuda_total_bytes or not self.gpu_memory_bytes:
            return None
        reserve = self.gpu_memory_bytes - self.cuda_total_bytes
        return reserve if 0 <= reserve <= MAX_RESERVE_BYTES else None


def _int(value: Any, where: str, low: int, high: int) -> int:
    """``value`` as an int within [low, high]; ``ValueError`` naming ``where`` otherwise (a float that is not a
    whole finite number, a bool, a string, ``.inf``/``.nan`` are all refused: they came from a hand edit)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ValueError(f"{where}: {value!r} is not a number")
    if isinstance(value, float) and (not math.isfinite(value) or not value.is_integer()):
        raise ValueError(f"{where}: {value!r} is not a whole finite number")
    number = int(value)
    if not low <= number <= high:
        raise ValueError(f"{where}: {number} is outside [{low}, {high}]")
    return number


def _stamp(value: Any) -> Any:
    """A time as RFC 3339 text (a hand edit may leave it unquoted: YAML reads a datetime)."""
    return value.isoformat().replace("+00:00", "Z") if isinstance(value, datetime) else value


def _text(value: Any, where: str, limit: int = 256) -> str:
    if not isinstance(value, str) or len(value) > limit:
        raise ValueError(f"{where}: not a string of at most {limit} characters")
    return value


def namespace_of(server: str) -> str:
    """The namespace of a sample's ``server`` (``namespace/name``); "" for a sample that does not say."""
    return server.split("/", 1)[0] if "/" in server else ""


def _upper_middle(values: list[int]) -> int:
    """The median; of an even count the upper middle (for a reserve: the safe side)."""
    ordered = sorted(values)
    return ordered[len(ordered) // 2]


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
        samples = [*self.samples, sample]
        while len(samples) > KEEP_SAMPLES:  # the oldest of the namespace holding the most goes: a flood evicts its own
            held = Counter(namespace_of(s.server) for s in samples)
            most = max(held.values())
            del samples[next(i for i, s in enumerate(samples) if held[namespace_of(s.server)] == most)]
        self.samples = samples
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
    def from_wire(cls, data: Mapping[str, Any], problems: list[str] | None = None) -> CalibrationEntry:
        """Inverse of ``to_wire``, validated: a bad key raises ``KeyError``/``ValueError``; a bad sample is
        dropped and said in ``problems``; only the newest ``KEEP_SAMPLES`` are read (a hand-edited list keeps
        only the newest, as ``add``)."""
        if not isinstance(data, Mapping):
            raise ValueError("entry: not a mapping")
        engine, version = _text(data["engine"], "engine", 16), _text(data["version"], "version", 16)
        gpu = _text(data["gpu"], "gpu", 63)
        if engine not in ENGINE_LABELS or not VERSION_TEXT.match(version) or not LABEL_TEXT.match(gpu):
            raise ValueError(f"key {engine}/{version}/{gpu}: not an engine, minor version and GPU label")
        key = CalibrationKey(engine, version, gpu, _int(data["tp"], "tp", 1, 64), _int(data["pp"], "pp", 1, 64))
        raw = data.get("samples") or []
        if not isinstance(raw, list):
            raise ValueError(f"{key.text()}: samples is not a list")
        samples = []
        for item in raw[-KEEP_SAMPLES:]:
            try:
                samples.append(Sample.from_wire(item))
            except (KeyError, ValueError, TypeError) as exc:
                if problems is not None:
                    problems.append(f"{key.text()}: sample dropped ({exc})")
        count = max(_int(data.get("count", len(samples)), "count", 0, 1 << 40), len(samples))
        return cls(key, count, samples)


@dataclass(frozen=True)
class Correction:
    """What the planner applies: offset bytes, how many start-ups, and the sentence for the reasons."""

    offset_bytes: int
    samples: int
    scope: str
    reason: str


@dataclass
class CalibrationTable:
    """All entries, by key. ``namespace``: the namespace whose plans this view calibrates (``scoped``); None: every
    sample pooled (the CLI's own table). ``problems``: what was dropped when it was read (``from_wire``)."""

    entries: dict[CalibrationKey, CalibrationEntry] = field(default_factory=dict)
    namespace: str | None = None
    problems: tuple[str, ...] = ()
    problem_count: int = 0
    """How many problems there were (``problems`` keeps the first ``MAX_PROBLEMS``)."""

    def scoped(self, namespace: str) -> CalibrationTable:
        """The same entries, calibrating plans of ``namespace`` (see ``lookup``); shares the entries (read only)."""
        return dataclasses.replace(self, namespace=namespace)

    def _estimate(self, samples: list[Sample], values: Callable[[Sample], int | None],
                  middle: Callable[[list[int]], int]) -> tuple[list[int], int, str] | None:
        """The values (residuals, reserves) this view trusts among ``samples`` (docs/design/calibration-trust.md):

        - the CLI's own table (``namespace`` None): every sample;
        - a namespace that has samples here: its own only (a tenant moves only its own plans);
        - else, when at least ``MIN_TENANTS`` namespaces have samples here: one value per namespace, the ``middle``
          of its own (each namespace one vote, however many start-ups it made), so the median the caller takes is
          set by the honest majority of namespaces: one tenant's crafted start-ups cannot move it past the honest
          namespaces' values;
        - else None (too few namespaces to outvote one).

        Returns (values, start-ups behind them, the words for the reasons)."""
        if self.namespace is None:
            picked = [v for s in samples if (v := values(s)) is not None]
            return (picked, len(picked), "") if picked else None
        own = [v for s in samples if namespace_of(s.server) == self.namespace and (v := values(s)) is not None]
        if own:
            return own, len(own), "; samples of this namespace only"
        by_tenant: dict[str, list[int]] = {}
        for sample in samples:
            value = values(sample)
            if value is not None:
                by_tenant.setdefault(namespace_of(sample.server), []).append(value)
        if len(by_tenant) < MIN_TENANTS:
            return None
        votes = [middle(vs) for _, vs in sorted(by_tenant.items())]
        return votes, sum(len(vs) for vs in by_tenant.values()), f"; one vote per namespace, {len(votes)} namespaces"

    def add(self, key: CalibrationKey, sample: Sample) -> bool:
        """Record ``sample`` under ``key`` (idempotent by sample id across the whole table)."""
        if any(s.sample_id == sample.sample_id for e in self.entries.values() for s in e.samples):
            return False
        if key not in self.entries and len(self.entries) >= MAX_ENTRIES:
            self.evict()
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
            found = self._estimate(samples, lambda s: s.residual_bytes, median_toward_zero) if samples else None
            if found is not None:
                residuals, startups, whose = found
                offset = correction(residuals)
                reason = (f"calibrated from {startups} start-up{'s' if startups != 1 else ''} of "
                          f"{engine_label} {key.version} {scope}: {offset / GiB:+.2f} GiB KV pool "
                          f"(median residual {median_toward_zero(residuals) / GiB:+.2f} "
                          f"GiB, shrunk by n/(n+1), each clipped to +-2 GiB{whose})")
                return Correction(offset, startups, scope, reason)
        return None

    def driver_reserve(self, product: str) -> tuple[int, int] | None:
        """(reserve bytes, samples) learned for a GPU product: the median of NVML minus the printed CUDA total over
        its samples (any engine, version, TP, PP; of an even count the upper middle, the safe side); None without
        one."""
        samples = [s for k, e in sorted(self.entries.items()) if k.gpu == product for s in e.samples]
        found = self._estimate(samples, lambda s: s.reserve_bytes, _upper_middle)
        if found is None:
            return None
        return _upper_middle(found[0]), found[1]

    def evict(self) -> CalibrationKey | None:
        """Drop the entry sampled least recently (its newest sample's time, then its key); None when empty."""
        if not self.entries:
            return None
        oldest = min(self.entries.values(), key=lambda e: (max((s.time for s in e.samples), default=""), e.key))
        del self.entries[oldest.key]
        return oldest.key

    def to_wire(self) -> dict[str, Any]:
        """``{"entries": [...]}`` sorted by key."""
        return {"entries": [self.entries[k].to_wire() for k in sorted(self.entries)]}

    @classmethod
    def from_wire(cls, data: Mapping[str, Any] | None) -> CalibrationTable:
        """Inverse of ``to_wire``, validated on read: a malformed entry or sample is dropped and said in
        ``problems`` (a hand-edited or hostile ConfigMap must never stop planning), at most ``MAX_ENTRIES``."""
        entries: dict[CalibrationKey, CalibrationEntry] = {}
        problems: list[str] = []
        raw_entries = (data or {}).get("entries") if isinstance(data, Mapping) else None
        if raw_entries is not None and not isinstance(raw_entries, list):
            problems.append("entries is not a list")
            raw_entries = []
        for index, raw in enumerate(raw_entries or []):
            if len(entries) >= MAX_ENTRIES or index >= MAX_READ_ITEMS:
                problems.append(f"{len(raw_entries or []) - index} entries past the first {index} dropped (a table "
                                f"holds at most {MAX_ENTRIES})")
                break
            try:
                entry = CalibrationEntry.from_wire(raw, problems)
            except (KeyError, ValueError, TypeError) as exc:
                problems.append(f"entry {index} dropped ({exc})")
                continue
            known = entries.get(entry.key)
            if known is None:
                entries[entry.key] = entry
            else:  # a key written twice (a hand edit): one entry with the samples of both
                for sample in entry.samples:
                    if all(s.sample_id != sample.sample_id for s in known.samples):
                        known.add(sample)
        return cls(entries, problems=tuple(problems[:MAX_PROBLEMS]), problem_count=len(problems))


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
