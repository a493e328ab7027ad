"""``ctxfit`` command line: ``plan``, ``diagnose``, ``crd``. Each subcommand lives in its own module."""

from __future__ import annotations

import argparse
import importlib
import sys

SUBCOMMANDS = {
    "plan": "ctxfit.cli.plan",
    "diagnose": "ctxfit.cli.diagnose",
    "crd": "ctxfit.cli.crd",
}

EXIT_OK = 0
EXIT_ERROR = 1
EXIT_INVALID = 2
EXIT_DOES_NOT_FIT = 3


def build_parser() -> argparse.ArgumentParser:
    """The top-level parser; each subcommand module adds its own arguments via ``add_arguments``."""
    parser = argparse.ArgumentParser(prog="ctxfit", description="Size LLM inference servers to their GPUs.")
    sub = parser.add_subparsers(dest="command", required=True)
    for name, module_name in SUBCOMMANDS.items():
        module = importlib.import_module(module_name)
        sub_parser = sub.add_parser(name, help=module.__doc__.splitlines()[0] if module.__doc__ else name)
        module.add_arguments(sub_parser)
        sub_parser.set_defaults(_run=module.run)
    return parser


def main(argv: list[str] | None = None) -> int:
    """Entry point of the ``ctxfit`` console script. Returns the exit code (0, 2 invalid, 3 does not fit)."""
    parser = build_parser()
    args = parser.parse_args(argv)
    code: int = args._run(args)
    return code


def fail(message: str, code: int = EXIT_INVALID) -> int:
    """Print one error line on stderr and return ``code``."""
    print(f"ctxfit: error: {message}", file=sys.stderr)
    return code


if __name__ == "__main__":
    sys.exit(main())
