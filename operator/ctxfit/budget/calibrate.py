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

The driver's reserve per GPU product: a sample may carry the CUDA-visible total the start-up
printed (vLLM "Free memory on device (F/T GiB)", V0 "total_gpu_memory") and the node's NVML total; their difference
is the reserve of that product under that driver. ``CalibrationTable.driver_reserve`` is the median over every
sample of the product (any engine, version or layout: the reserve is the driver's), and ``apply_learned_reserve``
(``budget.calibrated``) puts it in place of the catalog's (``catalog/gpus.yaml`` ``driverReserveMiB``) before anything
is budgeted. Such a sample's KV residual is recorded against the prediction at the total the engine printed, so the
reserve is not counted twice (``reserve_neutral_residual``).

The table is shared input, never trusted (docs/design/calibration-trust.md): ``from_wire`` validates every
entry and sample (whole finite numbers within ``MAX_BYTES``, bounded texts, an engine, minor version and GPU label as
keys) and drops a bad one into ``CalibrationTable.problems`` instead of raising; at most ``MAX_ENTRIES`` keys are read
or kept. The operator plans a namespace's servers with ``CalibrationTable.scoped``: its own start-ups when it has
some, else only what at least ``MIN_TENANTS`` namespaces agree on (one vote per namespace), so one tenant's crafted
start-up logs never move another tenant's plans."""

from __future__ import annotations

import dataclasses
from collections import Counter
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from ctxfit.api import GiB

from .samples import (
    ENGINE_KINDS,
    LABEL_TEXT,
    MAX_BYTES,
    MAX_RESERVE_BYTES,
    VERSION_TEXT,
    CalibrationKey,
    Sample,
    bounded_text,
    calibration_key,
    minor_version,
    namespace_of,
    reserve_neutral_residual,
    whole_number,
)

CLIP_BYTES = 2 * GiB
"""A single residual counts as at most this much (bounded influence of an outlier)."""
KEEP_SAMPLES = 20
"""Samples kept per key; past it the oldest of the namespace holding the most goes (one namespace's flood of start-ups
evicts its own, never another's); ``count`` keeps counting."""
MAX_ENTRIES = 64
"""Keys a table holds (engine x minor x GPU x TP x PP in use in one cluster: a few dozen at most). More are dropped on
read; ``add`` of a new key to a full table evicts the key sampled least recently."""
MAX_PROBLEMS = 20
"""Problems a read keeps the words of (``CalibrationTable.problem_count`` counts them all)."""
MAX_READ_ITEMS = 4 * MAX_ENTRIES
"""Raw list items looked at on read (valid or not): the parse cost is bounded whatever the text holds."""
MIN_TENANTS = 3
"""Namespaces with samples of a key before their start-ups move another namespace's plans (``lookup``): the median of
the per-namespace medians, so one tenant's crafted start-ups (any number of them) never decide another's plan."""
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
        engine, version = bounded_text(data["engine"], "engine", 16), bounded_text(data["version"], "version", 16)
        gpu = bounded_text(data["gpu"], "gpu", 63)
        if engine not in ENGINE_KINDS or not VERSION_TEXT.match(version) or not LABEL_TEXT.match(gpu):
            raise ValueError(f"key {engine}/{version}/{gpu}: not an engine, minor version and GPU label")
        key = CalibrationKey(engine, version, gpu, whole_number(data["tp"], "tp", 1, 64),
                             whole_number(data["pp"], "pp", 1, 64))
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
        count = max(whole_number(data.get("count", len(samples)), "count", 0, 1 << 40), len(samples))
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



__all__ = ["CLIP_BYTES", "KEEP_SAMPLES", "MAX_BYTES", "MAX_ENTRIES", "MAX_RESERVE_BYTES", "MIN_TENANTS",
           "CalibrationEntry", "CalibrationKey", "CalibrationTable", "Correction", "Sample", "calibration_key",
           "correction", "median_toward_zero", "minor_version", "namespace_of", "reserve_neutral_residual"]
