"""Diagnose a failed start: ``ctxfit diagnose -f SERVER.yaml --message-file FILE`` (exit 0, 2 invalid).

Runs the same classifier and policy as the operator (``ctxfit.recovery``) on what Kubernetes showed
about the failed container, and prints the failure, the verdict and the next configuration.

``-o json`` keys are stable: ``{"failure": {"kind", "numbers", "evidence"}, "permanent", "next":
EffectiveConfig.to_wire() or null, "explanation"}``.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

import yaml

from ctxfit.api import EffectiveConfig, InferenceServerSpec
from ctxfit.recovery import (
    Attempt,
    Decision,
    Failure,
    Observation,
    Replan,
    changed_knobs,
    classify,
    decide,
    initial_effective,
    observed_effective,
)

from . import EXIT_OK, fail
from .load import ManifestError, load_manifest


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """``-f``, ``--message-file``, ``--reason``, ``--exit-code``, ``--event``..., ``--history``, ``--current``."""
    parser.add_argument("-f", "--filename", required=True, help="InferenceServer manifest (YAML)")
    parser.add_argument("--message-file", required=True,
                        help="the container's termination message or log tail ('-' for stdin)")
    parser.add_argument("--reason", help="lastState.terminated.reason (e.g. Error, OOMKilled)")
    parser.add_argument("--exit-code", type=int, help="lastState.terminated.exitCode")
    parser.add_argument("--event", action="append", default=[], metavar="TEXT",
                        help="a pod Event message (repeatable), e.g. 'Startup probe failed: ...'")
    parser.add_argument("--history", metavar="FILE",
                        help="YAML list of earlier attempts: effective fields plus 'failure: <kind>'")
    parser.add_argument("--current", metavar="FILE",
                        help="YAML mapping of the effective fields that ran (default: the planner's choice)")
    parser.add_argument("-o", "--output", choices=["table", "json"], default="table")


def _read_text(path: str) -> str:
    if path == "-":
        return sys.stdin.read()
    try:
        return Path(path).read_bytes().decode("utf-8", errors="replace")
    except OSError as exc:
        raise ValueError(f"--message-file: cannot read {path}: {exc.strerror}") from exc


def _read_yaml(path: str, flag: str) -> Any:
    try:
        return yaml.safe_load(Path(path).read_text(encoding="utf-8"))
    except OSError as exc:
        raise ValueError(f"{flag}: cannot read {path}: {exc.strerror}") from exc
    except yaml.YAMLError as exc:
        raise ValueError(f"{flag}: {path} is not valid YAML ({str(exc).splitlines()[0]})") from exc


def read_current(path: str, defaults: EffectiveConfig) -> EffectiveConfig:
    """The ``--current`` mapping over ``defaults``.

    Raises:
        ValueError: not a mapping, or a bad field.
    """
    data = _read_yaml(path, "--current")
    if not isinstance(data, dict):
        raise ValueError("--current: expected a mapping of effective fields (contextLength, ...)")
    merged = {**defaults.to_wire(), **data}
    try:
        return EffectiveConfig.from_wire(merged)
    except (KeyError, ValueError, TypeError) as exc:
        raise ValueError(f"--current: {exc}") from None


def read_history(path: str, defaults: EffectiveConfig) -> list[Attempt]:
    """Earlier attempts from ``--history`` (fields missing from an entry come from ``defaults``).

    Raises:
        ValueError: not a list of mappings, unknown failure kind, bad field (message names the entry).
    """
    data = _read_yaml(path, "--history")
    if data is None:
        return []
    if not isinstance(data, list):
        raise ValueError("--history: expected a YAML list of attempts")
    attempts = []
    for index, item in enumerate(data):
        if not isinstance(item, dict):
            raise ValueError(f"--history[{index}]: expected a mapping with effective fields and failure")
        try:
            attempts.append(Attempt.from_wire(item, defaults=defaults))
        except (ValueError, TypeError) as exc:
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
    failure = classify(observation, spec.engine.kind)
    planned = initial_effective(spec)
    current = read_current(current_path, planned) if current_path else observed_effective(planned, failure, spec)
    history = read_history(history_path, current) if history_path else []
    decision = decide(spec, current, failure, history, replan=planner_replan())
    return failure, current, decision


def to_json(failure: Failure, decision: Decision) -> dict[str, Any]:
    """The stable ``-o json`` document."""
    return {
        "failure": failure.to_wire(),
        "permanent": decision.permanent,
        "next": decision.next.to_wire() if decision.next is not None else None,
        "explanation": decision.explanation,
    }


def render_table(name: str, failure: Failure, current: EffectiveConfig, decision: Decision) -> None:
    """Failure, verdict and a current -> next table of the knobs (rich)."""
    from rich.console import Console
    from rich.markup import escape
    from rich.table import Table

    console = Console(width=120)
    head = Table(show_header=False, title=f"{name}: diagnosis", title_justify="left")
    head.add_row("failure", failure.kind.value)
    head.add_row("evidence", escape(failure.evidence))
    for key, value in failure.numbers.items():
        head.add_row(key, f"{value:,}" if isinstance(value, int) else f"{value:g}")
    verdict = "permanent" if decision.permanent else "retry"
    if decision.retry_after_seconds:
        verdict += f" in {decision.retry_after_seconds} s"
    head.add_row("verdict", verdict)
    head.add_row("explanation", escape(decision.explanation))
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
        knobs.add_row(key + mark, str(before[key]), str(after[key]))
    console.print(knobs)


def run(args: argparse.Namespace) -> int:
    """Diagnose and print. Returns 0 (diagnosed, permanent or not) or 2 (invalid input)."""
    try:
        server = load_manifest(args.filename)
        message = _read_text(args.message_file)
        observation = Observation(reason=args.reason, exit_code=args.exit_code, message=message,
                                  events=tuple(args.event))
        failure, current, decision = diagnose(server.spec, observation, history_path=args.history,
                                              current_path=args.current)
    except (ManifestError, ValueError) as exc:
        return fail(str(exc))
    if args.output == "json":
        json.dump(to_json(failure, decision), sys.stdout, indent=2)
        sys.stdout.write("\n")
    else:
        render_table(server.metadata.name, failure, current, decision)
    return EXIT_OK
