"""Untrusted text from engines (termination messages, log tails, pod Events) made safe to store and print.

An engine container writes whatever it likes to its termination message and log. Copied as is into
status, Events or a terminal, ANSI/VT escape sequences recolour or rewrite the screen of whoever runs
``kubectl describe`` or ``ctxfit diagnose`` (OSC 0/2 sets the terminal title, OSC 8 makes links, CSI
moves the cursor and erases lines), NUL and other C0/C1 controls break tools, bidirectional overrides
reorder what is shown (CVE-2021-42574, "Trojan Source"), and invalid UTF-8 makes the API server or a
JSON encoder refuse the whole write.

``clean_text`` removes all of that and keeps newlines and tabs. Sequence grammar: ECMA-48 (5th ed.,
https://ecma-international.org/publications-and-standards/standards/ecma-48/) sections 5.3-5.6: CSI
``ESC [`` params ``0x30-0x3F``, intermediates ``0x20-0x2F``, final ``0x40-0x7E``; OSC/DCS/SOS/PM/APC
strings ended by BEL or ST (``ESC \\``); two-character ``ESC Fe/Fp/Fs`` sequences; the 8-bit C1 forms
(``0x9B`` CSI, ``0x9D`` OSC, ...).
"""

from __future__ import annotations

import re

_STRING_SEQUENCE = re.compile(r"(?:\x1b[\]PX^_]|[\x90\x98\x9d\x9e\x9f])[^\x07\x1b\x9c]*(?:\x07|\x1b\\|\x9c)?")
"""OSC, DCS, SOS, PM, APC (7-bit ``ESC ] P X ^ _`` or 8-bit C1): everything up to BEL/ST, or to the end."""
_CSI = re.compile(r"(?:\x1b\[|\x9b)[\x30-\x3f]*[\x20-\x2f]*[\x40-\x7e]?")
"""Control Sequence Introducer (``ESC [`` or ``0x9B``), its parameters, intermediates and final byte."""
_ESCAPE = re.compile(r"\x1b[\x20-\x2f]*[\x30-\x7e]?")
"""Any other escape: ``ESC`` + intermediates + final (e.g. ``ESC c`` reset, ``ESC ( B`` charset)."""
_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f\u200e\u200f\u202a-\u202e\u2066-\u2069\ud800-\udfff\ufeff]")
"""C0 (except tab and newline) and C1 controls, DEL, bidi marks/embeddings/overrides/isolates, lone
surrogates (not encodable as UTF-8), the BOM. ``\\r`` goes too: a bare carriage return rewrites a line."""


def clean_text(text: str | bytes) -> str:
    """``text`` without terminal escape sequences, control characters and invalid UTF-8.

    Bytes are decoded as UTF-8 with undecodable bytes dropped; ``\\r\\n`` becomes ``\\n``; newlines and tabs
    stay. Idempotent: ``clean_text(clean_text(x)) == clean_text(x)``.
    """
    if isinstance(text, bytes):
        text = text.decode("utf-8", errors="ignore")
    text = text.replace("\r\n", "\n")
    text = _STRING_SEQUENCE.sub("", text)
    text = _CSI.sub("", text)
    text = _ESCAPE.sub("", text)
    return _CONTROL.sub("", text)


def clean_lines(lines: list[str] | tuple[str, ...]) -> tuple[str, ...]:
    """``clean_text`` of each line."""
    return tuple(clean_text(line) for line in lines)


STATUS_TEXT_BYTES = 4096
"""Longest text kept from an object's status (a termination message, a scheduler or kubelet message): the
kubelet's own cap on termination messages (``terminationMessagePath``: 4096 bytes). Views are kept per pod in the
operator's indexes, so a longer text (written by anything that may update pod status) must not grow them."""


def capped(text: object, limit: int = STATUS_TEXT_BYTES) -> str:
    """``text`` as a string of at most ``limit`` bytes of UTF-8 (cut on a character boundary)."""
    raw = str(text or "").encode("utf-8", errors="replace")
    if len(raw) <= limit:
        return str(text or "")
    return raw[:limit].decode("utf-8", errors="ignore")
