"""``ctxfit`` command line: ``plan``, ``diagnose``, ``calibrate``, ``crd``. Each subcommand lives in its own module.

Exit codes, the same for every subcommand (``EXIT_CODES``; ``ctxfit --help`` and README list them): 0 done; 1 the
command ran but has no result to give (``calibrate``: the log holds no KV cache accounting in a known wording, or
there is no prediction to compare it with, so no calibration sample; any subcommand: its output could not be
written, stdout closed as ``| head`` does or a full disk); 2 bad input (one line on stderr naming the file, option
or field; also argparse's own usage errors); 3 ``plan`` only: nothing can start (the plan, reasons and suggestions
are printed).
"""

from __future__ import annotations

import argparse
import errno
import importlib
import io
import os
import sys

SUBCOMMANDS = {
    "plan": ("ctxfit.cli.plan", "predict what fits on the GPUs (exit 0 fits, 3 cannot start, 2 bad input)"),
    "diagnose": ("ctxfit.cli.diagnose", "classify a failed start and choose the next configuration (exit 0, "
                 "2 bad input)"),
    "calibrate": ("ctxfit.cli.calibrate", "compare an engine's start-up log with the plan; make a calibration entry "
                  "(exit 0, 1 no sample made, 2 bad input)"),
    "crd": ("ctxfit.cli.crd", "print the InferenceServer CRD generated from the API models (exit 0)"),
}
"""Subcommand -> (module, help). Only the chosen subcommand's module is imported (fast start-up)."""

EXIT_OK = 0
EXIT_ERROR = 1
EXIT_INVALID = 2
EXIT_DOES_NOT_FIT = 3

EXIT_CODES = (
    (EXIT_OK, "done (plan: every server fits at or above its minimum)"),
    (EXIT_ERROR, "no result: calibrate made no calibration sample (the log holds no KV cache accounting in a "
                 "known wording, or there is no prediction to compare it with), or the output could not be written "
                 "(stdout closed, as | head does, or a full disk)"),
    (EXIT_INVALID, "bad input: one line on stderr naming the file, option or field"),
    (EXIT_DOES_NOT_FIT, "plan: nothing can start for a server (the plan, reasons and suggestions are printed)"),
)
"""Every exit code of ``ctxfit`` and what it means (the top-level ``--help`` epilog prints this)."""


def exit_codes_text() -> str:
    """``EXIT_CODES`` as the help epilog."""
    return "exit codes:\n" + "\n".join(f"  {code}  {text}" for code, text in EXIT_CODES)


def build_parser(only: str | None = None) -> argparse.ArgumentParser:
    """The top-level parser. Each subcommand module adds its own arguments via ``add_arguments``;
    with ``only`` set, just that subcommand's module is imported."""
    parser = argparse.ArgumentParser(prog="ctxfit", description="Size LLM inference servers to their GPUs.",
                                     epilog=exit_codes_text(), formatter_class=argparse.RawDescriptionHelpFormatter,
                                     allow_abbrev=False)  # `--message` is no `--message-file`: a typo is an error
    sub = parser.add_subparsers(dest="command", required=True)
    for name, (module_name, help_text) in SUBCOMMANDS.items():
        sub_parser = sub.add_parser(name, help=help_text, description=help_text, epilog=exit_codes_text(),
                                    formatter_class=argparse.RawDescriptionHelpFormatter, allow_abbrev=False)
        if only is None or name == only:
            module = importlib.import_module(module_name)
            module.add_arguments(sub_parser)
            sub_parser.set_defaults(_run=module.run)
    return parser


def main(argv: list[str] | None = None) -> int:
    """Entry point of the ``ctxfit`` console script. Returns the exit code (``EXIT_CODES``)."""
    argv = sys.argv[1:] if argv is None else argv
    chosen = next((a for a in argv if not a.startswith("-")), None)
    parser = build_parser(chosen if chosen in SUBCOMMANDS else "__none__")
    args = parser.parse_args(argv)
    if sys.stdout is None:  # started with stdout closed (>&-): what the command prints fails, not vanishes
        sys.stdout = _ClosedOutput()
    try:
        code: int = args._run(args)
        sys.stdout.flush()  # a buffered write's error here, not at the interpreter's exit
    except BrokenPipeError:  # `ctxfit plan -o json | head`: the reader left; end quietly
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return EXIT_ERROR
    except OSError as exc:  # stdout cannot be written: closed, a full disk (> /dev/full), an I/O error
        if exc.filename is not None:
            raise
        return fail(f"cannot write the output: {exc.strerror or exc}", EXIT_ERROR)
    return code


class _ClosedOutput(io.TextIOBase):
    """Stands for a closed stdout: every write raises ``OSError`` (EBADF), so a command that prints ends with one
    line and exit 1, and one that writes only to files is unaffected."""

    def write(self, text: str) -> int:
        raise OSError(errno.EBADF, "standard output is closed")

    def fileno(self) -> int:
        raise OSError(errno.EBADF, "standard output is closed")


def fail(message: str, code: int = EXIT_INVALID) -> int:
    """Print one error line on stderr (terminal escapes and controls removed: it may quote input) and return
    ``code``."""
    from ctxfit.vocab.text import clean_text

    print(f"ctxfit: error: {clean_text(message)}", file=sys.stderr)
    return code


def warn(message: str) -> None:
    """Print one warning line on stderr (cleaned as ``fail`` does); the command goes on."""
    from ctxfit.vocab.text import clean_text

    print(f"ctxfit: warning: {clean_text(message)}", file=sys.stderr)


if __name__ == "__main__":
    sys.exit(main())
