"""Whose memory a CUDA OOM names: the failed process's own use and what other processes hold on the GPU.

PyTorch's OOM message (c10 ``CUDACachingAllocator.cpp``, docs/engine-memory.md C) lists every process NVML
sees on the GPU: the failed process as "Including non-PyTorch memory, this process has U memory in use" when
its PID matches, each other as "Process P has X memory in use". Inside a container NVML reports host PIDs, so
the failed process itself is printed as "Process P has ..." too (SGLang issue 5755: one process holding total -
free). The failed process holds at least what PyTorch allocated plus what it reserved ("Of the allocated memory
A is allocated by PyTorch, and R is reserved by PyTorch but unallocated").

Rule: with a "this process has U" entry, every "Process P has X" is another process. Without it, the failed
process is the listed one closest above A + R (the largest when none is above); the others are the rest. One
listed process and nothing else is the failed process alone.
"""

from __future__ import annotations

import re

from ctxfit.vocab.kinds import Number
from ctxfit.vocab.patterns import SIZE, UNIT_BYTES, parse_decimal

_PROCESS = re.compile(r"Process \d{1,10} has " + SIZE + r" memory in use", re.ASCII)
_OWN = re.compile(r"this process has " + SIZE + r" memory in use", re.ASCII)
MAX_PROCESSES = 64
"""Process entries read from one message (NVML lists each process on the GPU once)."""


def _bytes(value: str, unit: str) -> int | None:
    number = parse_decimal(value)
    if number is None or unit not in UNIT_BYTES:
        return None
    return int(number * UNIT_BYTES[unit])


def process_numbers(window: str, numbers: dict[str, Number]) -> dict[str, Number]:
    """``numbers`` with ``inUseBytes`` (the failed process) and ``otherProcessesBytes`` (every other process)
    set from the OOM message in ``window`` when it lists processes; unchanged otherwise."""
    listed = [b for m in _PROCESS.finditer(window) if (b := _bytes(m.group(1), m.group(2))) is not None]
    listed = listed[:MAX_PROCESSES]
    own_match = _OWN.search(window)
    own = _bytes(own_match.group(1), own_match.group(2)) if own_match else None
    out = dict(numbers)
    if own is not None:
        out["inUseBytes"] = own
        if listed:
            out["otherProcessesBytes"] = sum(listed)
        return out
    if not listed:
        return out
    held = int(numbers.get("allocatedBytes", 0)) + int(numbers.get("reservedBytes", 0))
    above = [b for b in listed if b >= held]
    mine = min(above) if above else max(listed)
    out["inUseBytes"] = mine
    others = sum(listed) - mine
    if others > 0:
        out["otherProcessesBytes"] = others
    return out
