"""Diagnose a failed start: ``ctxfit diagnose -f SERVER.yaml --message-file FILE`` (exit 0, 2 invalid).

Runs the same classifier and policy as the operator (``ctxfit.recovery``) on what Kubernetes showed
about the failed container, and prints the failure, the verdict and the next configuration.

``-o json`` keys are stable: ``{"failure": {"kind", "numbers", "evidence"[, "node"]}, "permanent", "next":
EffectiveConfig.to_wire() or null, "explanation"}``.

Bad input (manifest, ``--message-file``, ``--history``, ``--current``, ``--exit-code``) prints one line
naming the file or field on stderr and exits 2. A closed stdout (``-o json | head``) ends quietly (exit 1).
``-f -`` or ``--message-file -`` reads stdin (not both); a file of several InferenceServers needs ``--name``.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from typing import Any

from ctxfit.api import EffectiveConfig, EngineKind, InferenceServer, InferenceServerSpec
from ctxfit.recovery import (
    Decision,
    FailedAttempt,
    Failure,
    Observation,
    Replan,
    changed_knobs,
    classify,
    decide,
    initial_effective,
    observed_effective,
)
from ctxfit.recovery.wire import FieldError, effective_from_wire
from ctxfit.vocab.text import clean_text

from . import EXIT_ERROR, EXIT_OK, fail, warn
from .load import LOG_MAX_BYTES, STDIN, ManifestError, load_manifest, read_input, read_yaml

EXIT_CODE_RANGE = (-(1 << 31), (1 << 31) - 1)
"""``lastState.terminated.exitCode`` is an int32 in the Kubernetes API."""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """``-f``, ``--message-file``, ``--reason``, ``--exit-code``, ``--event``..., ``--history``, ``--current``."""
    parser.add_argument("-f", "--filename", required=True,
                        help="InferenceServer manifest (YAML, '-' for stdin); a file of several: choose with --name")
    parser.add_argument("--name", help="the InferenceServer of this metadata.name in a file of several")
    parser.add_argument("--message-file", required=True,
                        help="the container's termination message or log tail ('-' for stdin)")
    parser.add_argument("--reason", help="lastState.terminated.reason (e.g. Error, OOMKilled)")
    parser.add_argument("--exit-code", metavar="N", help="lastState.terminated.exitCode (an integer)")
    parser.add_argument("--node", metavar="NAME",
                        help="the node the pod ran on (spec.nodeName): named in node-bound verdicts (CUDADriverTooOld)")
    parser.add_argument("--event", action="append", default=[], metavar="TEXT",
                        help="a pod Event message (repeatable), e.g. 'Startup probe failed: ...'")
    parser.add_argument("--history", metavar="FILE",
                        help="YAML list of earlier attempts: effective fields plus 'failure: <kind>'")
    parser.add_argument("--current", metavar="FILE",
                        help="YAML mapping of the effective fields that ran (default: the planner's choice)")
    parser.add_argument("-o", "--output", choices=["table", "json"], default="table")


def parse_exit_code(text: str | None) -> int | None:
    """``--exit-code`` as an int32, None when not given.

    Raises:
        ValueError: not a whole number in the int32 range.
    """
    if text is None:
        return None
    try:
        code = int(text.strip())
    except ValueError:
        raise ValueError(f"--exit-code: must be a whole number, got {text[:40]!r}") from None
    if not EXIT_CODE_RANGE[0] <= code <= EXIT_CODE_RANGE[1]:
        raise ValueError(f"--exit-code: must be an int32 (a container exit code), got {code}")
    return code


def _clean_arg(text: str | None) -> str | None:
    """Command-line text with undecodable bytes and control sequences removed (``vocab.text.clean_text``)."""
    if text is None:
        return None
    return clean_text(text.encode("utf-8", "surrogateescape"))


def _read_text(path: str) -> str:
    return clean_text(read_input(path, "--message-file", LOG_MAX_BYTES))


def read_current(path: str, defaults: EffectiveConfig, engine: EngineKind | None = None) -> EffectiveConfig:
    """The ``--current`` mapping over ``defaults``, each field checked with the spec's bounds.

    Raises:
        ValueError: not a mapping, an unknown field or a bad value (``--current.<field>: <problem>``).
    """
    data = read_yaml(path, "--current")
    if data is None:
        return defaults
    if not isinstance(data, dict):
        raise ValueError("--current: expected a mapping of effective fields (contextLength, ...)")
    try:
        return effective_from_wire(data, defaults=defaults, engine=engine)
    except FieldError as exc:
        raise ValueError(f"--current.{exc}") from None


def read_history(path: str, defaults: EffectiveConfig, engine: EngineKind | None = None) -> list[FailedAttempt]:
    """Earlier attempts from ``--history`` (fields missing from an entry come from ``defaults``).

    Raises:
        ValueError: not a list of mappings, unknown failure kind, unknown field or bad value
            (``--history[i].<field>: <problem>``).
    """
    data = read_yaml(path, "--history")
    if data is None:
        return []
    if not isinstance(data, list):
        raise ValueError("--history: expected a YAML list of attempts")
    attempts = []
    for index, item in enumerate(data):
        if not isinstance(item, dict):
            raise ValueError(f"--history[{index}]: expected a mapping with effective fields and failure")
        try:
            attempts.append(FailedAttempt.from_wire(item, defaults=defaults, engine=engine))
        except FieldError as exc:
            raise ValueError(f"--history[{index}].{exc}") from None
    return attempts


def planner_replan() -> Replan | None:
    """``ctxfit.budget.planner.replan_context`` when the planner provides it, else None."""
    try:
        from ctxfit.budget.planner import replan_context
    except ImportError:
        return None
    return replan_context


def diagnose(spec: InferenceServerSpec, observation: Observation, *, history_path: str | None = None,
             current_path: str | None = None) -> tuple[Failure, EffectiveConfig, Decision]:
    """Classify, work out the configuration that ran, and decide.

    Raises:
        ValueError: bad ``--history`` / ``--current`` or a spec whose context cannot be known.
    """
    engine = spec.engine.kind
    failure = classify(observation, engine)
    planned = initial_effective(spec)
    if current_path:
        current = read_current(current_path, planned, engine)
    else:
        current = observed_effective(planned, failure, spec)
    history = read_history(history_path, current, engine) if history_path else []
    decision = decide(spec, current, failure, history, replan=planner_replan())
    return failure, current, decision


def to_json(failure: Failure, decision: Decision) -> dict[str, Any]:
    """The stable ``-o json`` document.

    Raises:
        ValueError: a configuration that cannot be written (a negative size: a policy bug).
    """
    return {
        "failure": failure.to_wire(),
        "permanent": decision.permanent,
        "next": decision.next.to_wire() if decision.next is not None else None,
        "explanation": decision.explanation,
    }


def render_table(name: str, failure: Failure, current: EffectiveConfig, decision: Decision) -> None:
    """Failure, verdict and a current -> next table of the knobs (rich; user text is never markup)."""
    from rich.console import Console
    from rich.table import Table
    from rich.text import Text

    console = Console(width=120, markup=False, highlight=False, emoji=False)
    head = Table(show_header=False, title=Text(f"{name}: diagnosis"), title_justify="left")
    head.add_row("failure", Text(failure.kind.value))
    head.add_row("evidence", Text(failure.evidence))
    if failure.node:
        head.add_row("node", Text(failure.node))
    for key, value in failure.numbers.items():
        head.add_row(Text(key), f"{value:,}" if isinstance(value, int) else f"{value:g}")
    verdict = "permanent" if decision.permanent else "retry"
    if decision.retry_after_seconds:
        verdict += f" in {decision.retry_after_seconds} s"
    head.add_row("verdict", verdict)
    head.add_row("explanation", Text(decision.explanation))
    console.print(head)
    if decision.next is None:
        return
    changed = set(changed_knobs(current, decision.next))
    knobs = Table(title="configuration", title_justify="left")
    knobs.add_column("field")
    knobs.add_column("current", justify="right")
    knobs.add_column("next", justify="right")
    before, after = current.to_wire(), decision.next.to_wire()
    for key in before:
        mark = " *" if key in changed else ""
        knobs.add_row(key + mark, Text(str(before[key])), Text(str(after[key])))
    console.print(knobs)


def _load_server(path: str, name: str | None = None) -> InferenceServer:
    """``load_manifest``, with the YAML constructor's own ValueErrors (an integer of > 4300 digits) naming
    the file too.

    Raises:
        ManifestError: as ``load_manifest``. ValueError: the file and the problem, one line.
    """
    try:
        return load_manifest(path, name)
    except ManifestError:
        raise
    except ValueError as exc:
        raise ValueError(f"{path}: not readable YAML ({str(exc).splitlines()[0][:80]})") from None


def _unplanned(spec: InferenceServerSpec) -> str | None:
    """Why ``ctxfit.budget.planner.initial_effective`` cannot plan ``spec`` (one line), None when it can: the
    diagnosis then runs on ``recovery.current.fallback_effective``, which the user is told."""
    from ctxfit.budget.planner import initial_effective as planned

    try:
        planned(spec)
    except (ValueError, LookupError, ArithmeticError) as exc:
        return " ".join(str(exc).split())[:200] or type(exc).__name__
    return None


def _quiet_stdout() -> None:
    """After a closed pipe: point stdout at /dev/null so the interpreter's final flush stays silent."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError, AttributeError):  # no real file descriptor (captured output)
        pass


def run(args: argparse.Namespace) -> int:
    """Diagnose and print. Returns 0 (diagnosed, permanent or not), 2 (invalid input), 1 (stdout closed)."""
    try:
        if args.filename == STDIN and args.message_file == STDIN:
            raise ValueError("-f and --message-file cannot both read stdin ('-'): give one of them as a file")
        server = _load_server(args.filename, getattr(args, "name", None))
        message = _read_text(args.message_file)
        observation = Observation(reason=_clean_arg(args.reason), exit_code=parse_exit_code(args.exit_code),
                                  message=message, events=tuple(_clean_arg(e) or "" for e in args.event),
                                  node=_clean_arg(args.node))
        if not args.current and (why := _unplanned(server.spec)) is not None:
            warn(f"{args.filename}: the planner cannot plan this server ({why}); the diagnosis assumes the spec's "
                 "own values and engine defaults: give --current FILE with the configuration that ran")
        failure, current, decision = diagnose(server.spec, observation, history_path=args.history,
                                              current_path=args.current)
        document = to_json(failure, decision)
        current.to_wire()
    except (ManifestError, ValueError) as exc:
        return fail(" ".join(str(exc).split()) or type(exc).__name__)
    try:
        if args.output == "json":
            json.dump(document, sys.stdout, indent=2)
            sys.stdout.write("\n")
            sys.stdout.flush()
        else:
            render_table(server.metadata.name, failure, current, decision)
            sys.stdout.flush()
    except BrokenPipeError:
        _quiet_stdout()
        return EXIT_ERROR
    return EXIT_OK
