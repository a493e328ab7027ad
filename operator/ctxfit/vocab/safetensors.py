"""The safetensors header: the 8-byte little-endian length and the JSON that names every tensor (pure).

Format (https://github.com/huggingface/safetensors, ``safetensors/src/tensor.rs``): bytes 0-7 are ``N`` as a
u64 little-endian, bytes 8..8+N a UTF-8 JSON object ``{name: {"dtype", "shape", "data_offsets"}, "__metadata__":
{...}}``, then the tensor data. Only the header is ever read here; the data offsets give each tensor's stored
size, which ``Tensor.nbytes`` recomputes from dtype and shape (they agree for every well-formed file).
"""

from __future__ import annotations

import json
import math
import struct
from dataclasses import dataclass

DTYPE_BITS = {
    "BOOL": 8, "U8": 8, "I8": 8, "F8_E5M2": 8, "F8_E4M3": 8, "F8_E8M0": 8, "E8M0": 8,
    "I16": 16, "U16": 16, "F16": 16, "BF16": 16,
    "I32": 32, "U32": 32, "F32": 32,
    "I64": 64, "U64": 64, "F64": 64,
    "F4": 4, "F6_E2M3": 6, "F6_E3M2": 6,
}
"""Bits per element of every safetensors dtype (``safetensors::Dtype::bitsize``; F4/F6 are sub-byte, 0.6+)."""

MAX_HEADER_BYTES = 100 * 1024 * 1024
"""safetensors refuses headers above 100 MB (``MAX_HEADER_SIZE`` in ``tensor.rs``); so do we."""

FLOAT_DTYPES = frozenset({"F16", "BF16", "F32", "F64"})
"""Dtypes that hold unquantized floating-point values (the engine casts these to its serving dtype)."""


class HeaderError(ValueError):
    """A safetensors header that cannot be read (too short, too long, not JSON, wrong shape of JSON)."""


@dataclass(frozen=True)
class Tensor:
    """One tensor as the header declares it.

    Attributes:
        name: the checkpoint name, e.g. ``model.layers.0.self_attn.q_proj.weight``.
        dtype: the safetensors dtype string (``BF16``, ``F8_E4M3``, ``I32``, ``U8``...).
        shape: dimensions, elements.
    """

    name: str
    dtype: str
    shape: tuple[int, ...]

    @property
    def numel(self) -> int:
        """Elements (1 for a scalar)."""
        return math.prod(self.shape)

    @property
    def nbytes(self) -> int:
        """Stored bytes: elements x dtype bits / 8, rounded up (sub-byte dtypes pack)."""
        return -(-self.numel * DTYPE_BITS.get(self.dtype, 8) // 8)


def header_length(prefix: bytes) -> int:
    """The JSON header's length N from the file's first 8 bytes.

    Raises:
        HeaderError: fewer than 8 bytes, or N above ``MAX_HEADER_BYTES``.
    """
    if len(prefix) < 8:
        raise HeaderError(f"file shorter than the 8-byte header length ({len(prefix)} bytes)")
    (length,) = struct.unpack("<Q", prefix[:8])
    if length <= 1 or length > MAX_HEADER_BYTES:
        raise HeaderError(f"header length {length} out of range (2..{MAX_HEADER_BYTES})")
    return int(length)


def parse_header(data: bytes) -> tuple[list[Tensor], dict[str, str]]:
    """Tensors and ``__metadata__`` from the file's first 8 + N bytes (more bytes are ignored).

    Raises:
        HeaderError: not a safetensors header (length, JSON, entry fields).
    """
    length = header_length(data)
    raw = data[8 : 8 + length]
    if len(raw) < length:
        raise HeaderError(f"header truncated: {len(raw)} of {length} bytes")
    try:
        doc = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError, RecursionError) as exc:
        raise HeaderError(f"header is not JSON ({str(exc).splitlines()[0][:80]})") from None
    if not isinstance(doc, dict):
        raise HeaderError("header is not a JSON object")
    return tensors_from_json(doc)


def tensors_from_json(doc: dict[str, object]) -> tuple[list[Tensor], dict[str, str]]:
    """Tensors from a decoded header object (also huggingface_hub's ``SafetensorsFileMetadata`` source form).

    Raises:
        HeaderError: an entry without a known dtype or an integer shape.
    """
    meta_raw = doc.get("__metadata__")
    metadata = {str(k): str(v) for k, v in meta_raw.items()} if isinstance(meta_raw, dict) else {}
    tensors: list[Tensor] = []
    for name, entry in doc.items():
        if name == "__metadata__":
            continue
        if not isinstance(entry, dict):
            raise HeaderError(f"tensor {name!r}: not an object")
        dtype, shape = entry.get("dtype"), entry.get("shape")
        if not isinstance(dtype, str) or dtype not in DTYPE_BITS:
            raise HeaderError(f"tensor {name!r}: unknown dtype {dtype!r}")
        if not isinstance(shape, list) or not all(isinstance(d, int) and not isinstance(d, bool) and d >= 0
                                                  for d in shape):
            raise HeaderError(f"tensor {name!r}: shape must be a list of non-negative integers")
        tensors.append(Tensor(name, dtype, tuple(shape)))
    _check_offsets(doc, tensors)
    return tensors, metadata


def _check_offsets(doc: dict[str, object], tensors: list[Tensor]) -> None:
    """Each tensor's ``data_offsets`` hold exactly its dtype x shape bytes, back to back from 0, as safetensors
    checks on load (``Metadata::validate`` in ``tensor.rs``: InvalidOffset, TensorInvalidInfo); entries without
    offsets (a caller's reduced form) are not checked. Raises ``HeaderError`` naming the tensor."""
    spans: list[tuple[int, int, str]] = []
    for t in tensors:
        entry = doc[t.name]
        assert isinstance(entry, dict)
        offsets = entry.get("data_offsets")
        if offsets is None:
            continue
        if not (isinstance(offsets, list | tuple) and len(offsets) == 2
                and all(isinstance(o, int) and not isinstance(o, bool) and o >= 0 for o in offsets)
                and offsets[0] <= offsets[1]):
            raise HeaderError(f"tensor {t.name!r}: data_offsets must be [begin, end] with 0 <= begin <= end")
        if offsets[1] - offsets[0] != t.nbytes:
            raise HeaderError(f"tensor {t.name!r}: data_offsets hold {offsets[1] - offsets[0]} bytes, its "
                              f"{t.dtype} shape {list(t.shape)[:8]} needs {t.nbytes}")
        spans.append((offsets[0], offsets[1], t.name))
    end = 0
    for begin, stop, name in sorted(spans):
        if begin != end:
            raise HeaderError(f"tensor {name!r}: data starts at byte {begin}, the tensors before it end at {end}")
        end = stop


def encode_header(tensors: list[Tensor], metadata: dict[str, str] | None = None) -> bytes:
    """The 8 + N header bytes for ``tensors`` laid out back to back (test fixtures and the Hub stand-in).

    Returns:
        bytes: length prefix and JSON, padded with spaces to a multiple of 8 as safetensors writes it.
    """
    doc: dict[str, object] = {}
    if metadata:
        doc["__metadata__"] = metadata
    offset = 0
    for t in tensors:
        doc[t.name] = {"dtype": t.dtype, "shape": list(t.shape), "data_offsets": [offset, offset + t.nbytes]}
        offset += t.nbytes
    raw = json.dumps(doc, separators=(",", ":")).encode()
    raw += b" " * (-len(raw) % 8)
    return struct.pack("<Q", len(raw)) + raw
