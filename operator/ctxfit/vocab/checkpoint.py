"""A checkpoint's tensors in compact form, and its weight format (pure).

A DeepSeek-V3 checkpoint has ~90,000 tensors but ~60 distinct ones once the decoder-layer index and the expert
index are taken out of the names. ``group_tensors`` keeps exactly that: one ``TensorGroup`` per (name pattern,
dtype, shape, instances per layer) with the layer indices it occurs in. Every estimate reads the groups, and the
wire form (``Checkpoint.to_wire``) is small enough for a resolver pod's termination message (4 KiB) once
compressed.

Formats (``checkpoint_format``) from config.json ``quantization_config`` (``quant_method``, ``bits``,
``format``/``config_groups``, ``fmt``, ``load_in_4bit``) and the stored dtypes: ``bf16``, ``fp16``, ``fp32``,
``fp8``, ``awq``, ``gptq``, ``compressed-tensors``, ``mxfp4``, ``nvfp4`` (``modelopt`` FP4), ``bitsandbytes``,
``gguf`` / ``pytorch-bin`` (no safetensors: sizes only).
"""

from __future__ import annotations

import base64
import json
import re
import zlib
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any

from .safetensors import DTYPE_BITS, Tensor

_LAYER_INDEX = re.compile(r"((?:^|\.)(?:layers|h|blocks|block|layer|decoder_layers)\.)(\d+)(\.)")
_EXPERT_INDEX = re.compile(r"(\.experts\.)(\d+)(\.)")


@dataclass(frozen=True)
class TensorGroup:
    """Tensors that differ only by decoder-layer and expert index.

    Attributes:
        pattern: the name with the first layer index as ``{L}`` and the expert index as ``{E}``.
        dtype: safetensors dtype.
        shape: dimensions of each instance.
        layers: layer indices the pattern occurs in (empty when it has no layer index).
        per_layer: instances per layer (experts per layer, or 1); for a pattern without layers, the count.
    """

    pattern: str
    dtype: str
    shape: tuple[int, ...]
    layers: tuple[int, ...]
    per_layer: int = 1

    @property
    def count(self) -> int:
        """Instances in the checkpoint."""
        return self.per_layer * max(1, len(self.layers))

    @property
    def instance_bytes(self) -> int:
        """Stored bytes of one instance."""
        return Tensor("", self.dtype, self.shape).nbytes

    @property
    def nbytes(self) -> int:
        """Stored bytes of all instances."""
        return self.instance_bytes * self.count

    def example(self) -> str:
        """A real tensor name of the group (first layer, expert 0): what role classification reads."""
        name = self.pattern.replace("{L}", str(self.layers[0]) if self.layers else "0")
        return name.replace("{E}", "0")


def group_tensors(tensors: list[Tensor]) -> tuple[TensorGroup, ...]:
    """Group tensors by (pattern, dtype, shape); layers with a different instance count form their own group.

    Returns:
        groups sorted by pattern; ``sum(g.nbytes) == sum(t.nbytes)`` exactly.
    """
    seen: dict[tuple[str, str, tuple[int, ...]], dict[int | None, int]] = defaultdict(lambda: defaultdict(int))
    for t in tensors:
        layer: int | None = None
        pattern = t.name
        m = _LAYER_INDEX.search(pattern)
        if m:
            layer = int(m.group(2))
            pattern = pattern[: m.start(2)] + "{L}" + pattern[m.end(2):]
        pattern = _EXPERT_INDEX.sub(r"\1{E}\3", pattern)
        seen[(pattern, t.dtype, t.shape)][layer] += 1
    groups: list[TensorGroup] = []
    for (pattern, dtype, shape), by_layer in seen.items():
        if None in by_layer:
            groups.append(TensorGroup(pattern, dtype, shape, (), by_layer[None]))
            continue
        by_count: dict[int, list[int]] = defaultdict(list)
        for layer, n in by_layer.items():
            assert layer is not None
            by_count[n].append(layer)
        for n, layers in sorted(by_count.items()):
            groups.append(TensorGroup(pattern, dtype, shape, tuple(sorted(layers)), n))
    return tuple(sorted(groups, key=lambda g: (g.pattern, g.layers[:1], g.dtype, g.shape)))


@dataclass(frozen=True)
class Checkpoint:
    """What the safetensors headers of a checkpoint say, compactly.

    Attributes:
        groups: the tensors (``group_tensors``); empty when the checkpoint has no safetensors.
        files: weight files read (safetensors shards, or the .bin/.gguf files sized).
        file_bytes: total size of the weight files, bytes (headers included), when known.
        fallback: why the tensors are unknown (no safetensors: ``.bin``/GGUF), else None.
    """

    groups: tuple[TensorGroup, ...]
    files: tuple[str, ...] = ()
    file_bytes: int | None = None
    fallback: str | None = None
    dtype_bytes_total: dict[str, int] = field(default_factory=dict, compare=False)

    @property
    def tensor_bytes(self) -> int:
        """Stored bytes of every tensor (the index's ``metadata.total_size``)."""
        return sum(g.nbytes for g in self.groups)

    @property
    def checkpoint_bytes(self) -> int:
        """Bytes a download moves: the files' size when known, else the tensors'."""
        return self.file_bytes if self.file_bytes is not None else self.tensor_bytes

    def dtypes(self) -> dict[str, int]:
        """Stored bytes per dtype."""
        out: dict[str, int] = defaultdict(int)
        for g in self.groups:
            out[g.dtype] += g.nbytes
        return dict(out)

    def to_wire(self) -> dict[str, Any]:
        """JSON-ready form: groups as ``[pattern, dtype, shape, layers, per_layer]`` with layers as ranges."""
        return {"groups": [[g.pattern, g.dtype, list(g.shape), _ranges(g.layers), g.per_layer] for g in self.groups],
                "files": list(self.files), "fileBytes": self.file_bytes, "fallback": self.fallback}

    @classmethod
    def from_wire(cls, doc: dict[str, Any]) -> Checkpoint:
        """Inverse of ``to_wire``. Raises ``ValueError``/``KeyError``/``TypeError`` on a malformed document."""
        groups = []
        for pattern, dtype, shape, layers, per_layer in doc["groups"]:
            if dtype not in DTYPE_BITS:
                raise ValueError(f"unknown dtype {dtype!r}")
            groups.append(TensorGroup(str(pattern), str(dtype), tuple(int(d) for d in shape),
                                      _parse_ranges(str(layers)), int(per_layer)))
        file_bytes = doc.get("fileBytes")
        return cls(tuple(groups), tuple(str(f) for f in doc.get("files") or ()),
                   int(file_bytes) if file_bytes is not None else None, doc.get("fallback"))

    def pack(self) -> str:
        """zlib + base64 of the wire JSON (what a resolver pod reports)."""
        raw = json.dumps(self.to_wire(), separators=(",", ":")).encode()
        return base64.b64encode(zlib.compress(raw, 9)).decode()

    @classmethod
    def unpack(cls, text: str) -> Checkpoint:
        """Inverse of ``pack``. Raises ``ValueError`` on anything else."""
        try:
            doc = json.loads(zlib.decompress(base64.b64decode(text), bufsize=1 << 16))
        except (zlib.error, ValueError) as exc:
            raise ValueError(f"not a packed checkpoint ({exc})") from None
        return cls.from_wire(doc)


def _ranges(layers: tuple[int, ...]) -> str:
    out: list[str] = []
    start = prev = None
    for n in layers:
        if start is None:
            start = prev = n
        elif prev is not None and n == prev + 1:
            prev = n
        else:
            out.append(f"{start}" if start == prev else f"{start}-{prev}")
            start = prev = n
    if start is not None:
        out.append(f"{start}" if start == prev else f"{start}-{prev}")
    return ",".join(out)


def _parse_ranges(text: str) -> tuple[int, ...]:
    layers: list[int] = []
    for part in filter(None, text.split(",")):
        lo, _, hi = part.partition("-")
        first, last = int(lo), int(hi or lo)
        if last < first or last - first > 100_000:
            raise ValueError(f"bad layer range {part!r}")
        layers.extend(range(first, last + 1))
    return tuple(layers)


QUANT_FORMATS = {
    "fp8": "fp8", "fbgemm_fp8": "fp8", "ptpc_fp8": "fp8", "awq": "awq", "awq_marlin": "awq", "gptq": "gptq",
    "gptq_marlin": "gptq", "compressed-tensors": "compressed-tensors", "compressed_tensors": "compressed-tensors",
    "mxfp4": "mxfp4", "bitsandbytes": "bitsandbytes", "modelopt": "modelopt", "modelopt_fp4": "nvfp4",
    "gguf": "gguf", "quark": "quark", "hqq": "hqq", "torchao": "torchao", "exl2": "exl2", "marlin": "gptq",
    "bitnet": "bitnet", "fp_quant": "fp-quant", "auto-round": "auto-round", "auto_round": "auto-round",
}


def checkpoint_format(config: dict[str, Any], checkpoint: Checkpoint | None) -> str:
    """The weight format: a ``QUANT_FORMATS`` value from ``quantization_config``, else the dominant stored float
    dtype (``bf16``/``fp16``/``fp32``), else ``unknown``. ModelOpt FP4 checkpoints are ``nvfp4``, FP8 ones ``fp8``.
    """
    quant = quantization_config(config)
    if quant is not None:
        method = str(quant.get("quant_method") or "").lower()
        if method == "modelopt":
            algo = str(quant.get("quant_algo") or (quant.get("quantization") or {}).get("quant_algo") or "").upper()
            return "nvfp4" if "FP4" in algo else "fp8"
        if method in QUANT_FORMATS:
            return QUANT_FORMATS[method]
        if method:
            return method
    if checkpoint is None or not checkpoint.groups:
        return "unknown"
    by_dtype = checkpoint.dtypes()
    name = {"BF16": "bf16", "F16": "fp16", "F32": "fp32", "F8_E4M3": "fp8", "F8_E5M2": "fp8"}
    dominant = max(by_dtype, key=lambda d: by_dtype[d])
    return name.get(dominant, dominant.lower())


def quantization_config(config: dict[str, Any]) -> dict[str, Any] | None:
    """``quantization_config`` of the config or of its ``text_config`` (multimodal), else None."""
    for holder in (config, config.get("text_config")):
        if isinstance(holder, dict) and isinstance(holder.get("quantization_config"), dict):
            return dict(holder["quantization_config"])
    return None


def is_quantized(config: dict[str, Any], checkpoint: Checkpoint | None) -> bool:
    """True when the checkpoint stores quantized linear weights: a ``quantization_config`` (other than one that only
    quantizes the KV cache), or most stored bytes in integer / fp8 / fp4 dtypes."""
    quant = quantization_config(config)
    if quant is not None and (quant.get("quant_method") or quant.get("load_in_4bit") or quant.get("load_in_8bit")):
        return True
    if checkpoint is None or not checkpoint.groups:
        return False
    by_dtype = checkpoint.dtypes()
    packed = sum(n for d, n in by_dtype.items() if d not in ("BF16", "F16", "F32", "F64"))
    return packed * 2 > sum(by_dtype.values())
