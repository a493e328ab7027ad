"""The records of calibration: a plan's key and one observed start-up, with their validated wire forms (pure;
``budget.calibrate`` holds the rule and the table; docs/design/calibration-trust.md)."""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any

from ctxfit.api import EngineKind, GiB

if TYPE_CHECKING:
    from ctxfit.vocab.inputs import PlanInputs

MAX_RESERVE_BYTES = 8 * GiB
"""A larger NVML-minus-CUDA difference is not a driver reserve (a wrong product label, a MIG slice)."""
MAX_BYTES = 2 << 40
"""Largest KV pool or GPU total a sample may state (2 TiB: no GPU has that much); ``residualBytes`` within +-it."""
VERSION_TEXT = re.compile(r"^[0-9]{1,4}\.[0-9]{1,4}$")
ENGINE_KINDS = frozenset(k.value for k in EngineKind)
"""The ``engine`` of a key: an ``EngineKind`` value."""
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
        return cls(bounded_text(data["id"], "id"), bounded_text(data.get("server", ""), "server", 512),
                   whole_number(data["residualBytes"], "residualBytes", -MAX_BYTES, MAX_BYTES),
                   whole_number(data.get("observedKvCacheBytes", 0), "observedKvCacheBytes", 0, MAX_BYTES),
                   whole_number(data.get("predictedKvCacheBytes", 0), "predictedKvCacheBytes", 0, MAX_BYTES),
                   bounded_text(rfc3339_text(data.get("time", "")), "time", 64),
                   whole_number(cuda, "cudaTotalBytes", 0, MAX_BYTES) if cuda is not None else None,
                   whole_number(nvml, "gpuMemoryBytes", 0, MAX_BYTES) if nvml is not None else None)

    @property
    def reserve_bytes(self) -> int | None:
        """NVML total minus the printed CUDA total, when both are known and plausible (0 .. 8 GiB)."""
        if not self.cuda_total_bytes or not self.gpu_memory_bytes:
            return None
        reserve = self.gpu_memory_bytes - self.cuda_total_bytes
        return reserve if 0 <= reserve <= MAX_RESERVE_BYTES else None


def whole_number(value: Any, where: str, low: int, high: int) -> int:
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


def rfc3339_text(value: Any) -> Any:
    """A time as RFC 3339 text (a hand edit may leave it unquoted: YAML reads a datetime)."""
    return value.isoformat().replace("+00:00", "Z") if isinstance(value, datetime) else value


def bounded_text(value: Any, where: str, limit: int = 256) -> str:
    if not isinstance(value, str) or len(value) > limit:
        raise ValueError(f"{where}: not a string of at most {limit} characters")
    return value


def namespace_of(server: str) -> str:
    """The namespace of a sample's ``server`` (``namespace/name``); "" for a sample that does not say."""
    return server.split("/", 1)[0] if "/" in server else ""


def reserve_neutral_residual(observed_kv: int, predicted_kv: int, *, fraction: float | None,
                             planned_cuda_total: int | None, printed_cuda_total: int | None) -> int:
    """Observed minus predicted KV pool with the prediction moved to the CUDA total the engine printed: the pool
    scales with the total by the memory fraction (vLLM ``requested = total x utilization``), so a wrong reserve
    shows in the learned reserve, not in the KV residual as well. Without the totals: the plain residual."""
    if not fraction or not planned_cuda_total or not printed_cuda_total:
        return observed_kv - predicted_kv
    return observed_kv - (predicted_kv + int(fraction * (printed_cuda_total - planned_cuda_total)))
