"""The safetensors header reader checks each tensor's data_offsets against its dtype x shape, as safetensors does
on load: a header whose shapes claim more (or less) than its offsets hold is an unreadable checkpoint, not a
model of 10^30 parameters."""

from __future__ import annotations

import json
import struct

import pytest
from ctxfit.vocab.safetensors import HeaderError, Tensor, encode_header, parse_header

TENSORS = [Tensor("a.weight", "BF16", (4, 8)), Tensor("b.weight", "F4", (3,)), Tensor("c.bias", "F32", (8,))]


def _with(change: dict[str, object]) -> bytes:
    doc = json.loads(encode_header(TENSORS)[8:])
    for name, entry in change.items():
        doc[name] = doc[name] | entry
    raw = json.dumps(doc).encode()
    return struct.pack("<Q", len(raw)) + raw


def test_a_well_formed_header_reads_back_its_tensors() -> None:
    tensors, _ = parse_header(encode_header(TENSORS))
    assert [(t.name, t.nbytes) for t in tensors] == [("a.weight", 64), ("b.weight", 2), ("c.bias", 32)]
    order = {"a.weight": {"data_offsets": [34, 98]}, "c.bias": {"data_offsets": [0, 32]},
             "b.weight": {"data_offsets": [32, 34]}}
    assert len(parse_header(_with(order))[0]) == 3  # stored in another order, still back to back from 0


@pytest.mark.parametrize(("change", "needle"), [
    ({"a.weight": {"shape": [10**15, 10**15], "data_offsets": [0, 10]}}, "hold 10 bytes.*needs"),
    ({"c.bias": {"data_offsets": [70, 102]}}, "starts at byte 70, the tensors before it end at 66"),
    ({"a.weight": {"data_offsets": [64, 0]}}, "begin <= end"),
    ({"a.weight": {"data_offsets": "0-64"}}, "begin <= end"),
    ({"b.weight": {"data_offsets": [64, 66.0]}}, "begin <= end"),
])
def test_offsets_that_disagree_with_the_shapes_are_refused_naming_the_tensor(change: dict[str, object],
                                                                             needle: str) -> None:
    with pytest.raises(HeaderError, match=needle):
        parse_header(_with(change))


def test_entries_without_offsets_are_not_checked() -> None:
    """A caller's reduced form (dtype and shape only) still reads."""
    raw = json.dumps({"x": {"dtype": "BF16", "shape": [2, 2]}}).encode()
    assert parse_header(struct.pack("<Q", len(raw)) + raw)[0] == [Tensor("x", "BF16", (2, 2))]
