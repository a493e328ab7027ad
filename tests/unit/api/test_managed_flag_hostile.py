"""Hostile engine.args against the managed-flag check (reviewer): the CRD's CEL (RE2 ``matches``: a partial match,
``$`` only at the end of the text, ``.`` not a newline) and the operator's Python check agree, and every argument
argparse would read as a managed flag is refused by both. RE2 is emulated with Python's ``re``: ``search`` with
the final ``$`` as ``\\Z``."""

from __future__ import annotations

import argparse
import re

import pytest
from ctxfit.api.validation import MANAGED_FLAGS, flag_pattern, managed_flag_in

MAX_MODEL_LEN = next(f for f in MANAGED_FLAGS if "--max-model-len" in f.names)


def cel_refuses(arg: str) -> bool:
    pattern = flag_pattern(MAX_MODEL_LEN.names)
    assert pattern.endswith("$")
    return re.search(pattern[:-1] + r"\Z", arg) is not None


def argparse_sets(arg: str) -> bool:
    parser = argparse.ArgumentParser(exit_on_error=False)
    parser.add_argument("--max-model-len", type=int)
    parser.add_argument("--max-num-seqs", type=int)
    try:
        return parser.parse_known_args([arg.replace("_", "-") if arg.startswith("--max_") else arg, "1"])[0] \
            .max_model_len is not None
    except (argparse.ArgumentError, SystemExit):
        return False


@pytest.mark.parametrize("arg", [
    "--max-model-len=4096\n", "--max-model-len\n", "--max-model-len=4096\n\n", "--max-model-len=1", "--max_model_len=1",
    "--max-model=1", "--max-m", "--max-model-len=" + "9" * 100_000, "--max-model-len=\n4096", "\u2014max-model-len=1",
    "\u2010\u2010max-model-len=1", "--MAX-MODEL-LEN=1", "--max-=1", " --max-model-len=1", "--max-model-len =1",
    "--max-model-len=1\r", "--max-model-len=1\x00", "x--max-model-len=1",
])
def test_cel_and_python_agree_and_refuse_what_argparse_reads(arg: str) -> None:
    python = managed_flag_in([arg], "vllm") is MAX_MODEL_LEN
    assert python == cel_refuses(arg), f"{arg[:40]!r}: Python {python}, CEL {cel_refuses(arg)}"
    if argparse_sets(arg):
        assert python, f"{arg[:40]!r} sets --max-model-len but passes"
