"""``vocab.text.clean_text``: engine output without terminal escapes, controls or invalid UTF-8."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from ctxfit.vocab.text import clean_text
from hypothesis import given
from hypothesis import strategies as st

REPO = Path(__file__).resolve().parents[3]

CASES = [
    ("\x1b[31mCUDA out of memory\x1b[0m", "CUDA out of memory"),
    ("\x1b]0;pwned title\x07ValueError: x", "ValueError: x"),
    ("\x1b]2;title\x1b\\after", "after"),
    ("\x1b]8;;http://evil.example\x1b\\link\x1b]8;;\x1b\\", "link"),
    ("a\x00b\x07c\x08d", "abcd"),
    ("line1\r\nline2\rX", "line1\nline2X"),
    ("tab\tkept\nnewline kept", "tab\tkept\nnewline kept"),
    ("\x9b31mC1 CSI\x9dtitle\x9c", "C1 CSI"),
    ("\x1b[2J\x1b[H\x1b[?25lclear", "clear"),
    ("\x1bcreset \x1b(Bcharset", "reset charset"),
    ("admin\u202e\u2066txt.exe", "admintxt.exe"),
    ("lone \ud800 surrogate", "lone  surrogate"),
    ("unterminated \x1b]0;title", "unterminated "),
    ("Ünïcødé 中文 stays", "Ünïcødé 中文 stays"),
]


@pytest.mark.parametrize(("raw", "clean"), CASES, ids=[repr(c[0])[:30] for c in CASES])
def test_clean_text(raw: str, clean: str) -> None:
    assert clean_text(raw) == clean


def test_invalid_utf8_bytes_are_dropped() -> None:
    assert clean_text(b"ok \xff\xfe\xc3 end \xc3\xa9") == "ok  end é"


@given(st.one_of(st.text(), st.binary()))
def test_output_is_printable_utf8_and_idempotent(raw: str | bytes) -> None:
    out = clean_text(raw)
    out.encode("utf-8")  # never raises: no lone surrogates
    assert "\x1b" not in out and "\x00" not in out and "\r" not in out
    assert all(ch in "\n\t" or (ord(ch) >= 0x20 and not 0x7f <= ord(ch) <= 0x9f) for ch in out)
    assert clean_text(out) == out
    json.dumps(out, ensure_ascii=False).encode("utf-8")


def test_diagnose_cli_prints_no_escape_sequences(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The CLI side of class 8: a hostile message file is classified and printed without its escapes."""
    from ctxfit.cli import main

    server = tmp_path / "server.yaml"
    server.write_text((REPO / "manifests" / "kimi-128k.yaml").read_text())
    message = tmp_path / "message.txt"
    message.write_bytes(b"\x1b]0;owned\x07\x1b[31mtorch.OutOfMemoryError: CUDA out of memory.\x1b[0m Tried to allocate "
                        b"2.00 GiB\x00\xff\xfe\r\n")
    for output in ("table", "json"):
        code = main(["diagnose", "-f", str(server), "--message-file", str(message), "-o", output])
        out, err = capsys.readouterr()
        assert code == 0, err
        assert "\x1b" not in out and "\x00" not in out and "owned" not in out and "\ufffd" not in out
        assert "\\u001b" not in out and "\\u0000" not in out
        assert "OutOfMemoryError" in out
