"""Observed vs predicted, offline: ``ctxfit calibrate -f SERVER.yaml --log STARTUP.log [-o table|json]``.

Reads the engine's start-up log with the same parsers the operator uses
(``ctxfit.engines.startup``), plans the server without calibration, and prints both term by term, the
error (observed minus predicted KV pool per GPU) and the calibration entry this start-up makes
(``ctxfit.budget.calibrate``). ``--calibration FILE`` adds the sample to an existing table (YAML as
the operator's ConfigMap ``calibration.yaml`` holds it, or the ConfigMap itself); ``--save FILE``
writes the updated table, which ``ctxfit plan --calibration FILE`` applies.
Exit codes (``ctxfit.cli.EXIT_CODES``): 0 a calibration sample was made (and saved with ``--save``); 1 none was made,
with one line on stderr saying why (the log holds no KV cache accounting in a known wording, or there is no
prediction to compare it with: what the log says is still printed), or stdout was closed; 2 invalid input (one line
naming the file or option). ``-f -`` or ``--log -`` reads stdin (not both).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import sys
from pathlib import Path
from typing import Any

import yaml
from pydantic import ValidationError

from ctxfit.api import EngineKind, GiB
from ctxfit.budget.calibrate import (
    CalibrationEntry,
    CalibrationKey,
    CalibrationTable,
    Sample,
    correction,
    reserve_neutral_residual,
)
from ctxfit.budget.planner import plan
from ctxfit.engines.startup import logged_version, parse_startup
from ctxfit.vocab.inputs import PlanInputError
from ctxfit.vocab.startup import StartupReport
from ctxfit.vocab.version import parse_version

from . import EXIT_ERROR, EXIT_OK, fail
from .load import LOG_MAX_BYTES, STDIN, ManifestError, load_manifest, read_input, read_yaml, validation_message
from .resolve import add_resolve_arguments, resolve_for_cli

DATA_KEY = "calibration.yaml"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """``-f FILE --log FILE [-o table|json] [--calibration FILE] [--save FILE] [--hf-config FILE]``."""
    parser.add_argument("-f", "--filename", required=True,
                        help="InferenceServer manifest (YAML, '-' for stdin); a file of several: choose with --name")
    parser.add_argument("--name", help="the InferenceServer of this metadata.name in a file of several")
    parser.add_argument("--log", required=True, help="the engine's start-up log (text, '-' for stdin)")
    parser.add_argument("-o", "--output", choices=["table", "json"], default="table")
    parser.add_argument("--calibration", help="an existing calibration table to add this start-up to")
    parser.add_argument("--save", help="write the updated calibration table (YAML) here")
    add_resolve_arguments(parser)


def load_table(path: str, flag: str = "--calibration") -> CalibrationTable:
    """A calibration table from YAML: the table itself (``ctxfit calibrate --save``) or the operator's ConfigMap
    holding it under ``data.calibration.yaml``.

    Unlike the operator, which drops a malformed entry or sample of a hand-edited ConfigMap (with a Warning Event),
    the CLI refuses the file:
    a user who names a table means to use it, and a plan silently made without it would say otherwise.

    Raises:
        ManifestError (a ValueError): one line naming ``flag``: unreadable, not UTF-8, not YAML, not a table (no
            ``entries`` list: an empty file, a manifest), or an entry that does not parse (its index and why).
    """
    doc = read_yaml(path, flag)
    if isinstance(doc, dict) and isinstance(doc.get("data"), dict) and DATA_KEY in doc["data"]:
        try:
            doc = yaml.safe_load(str(doc["data"][DATA_KEY]))
        except yaml.YAMLError as exc:
            raise ManifestError(f"{flag}: {path}: data.{DATA_KEY} is not valid YAML "
                             f"({str(exc).splitlines()[0]})") from exc
    if not isinstance(doc, dict) or not isinstance(doc.get("entries"), list):
        raise ManifestError(f"{flag}: {path} is not a calibration table (a mapping with an 'entries' list, as "
                         "ctxfit calibrate --save writes it, or the operator's ConfigMap)")
    for index, raw in enumerate(doc["entries"]):
        problems: list[str] = []
        try:
            if not isinstance(raw, dict):
                raise TypeError("not a mapping")
            CalibrationEntry.from_wire(raw, problems)
            if problems:
                raise ValueError(problems[0])
        except (KeyError, ValueError, TypeError, ArithmeticError) as exc:
            why = f"missing {exc}" if isinstance(exc, KeyError) else str(exc).splitlines()[0][:120]
            raise ManifestError(f"{flag}: {path}: entries[{index}] is not a calibration entry ({why})") from None
    table = CalibrationTable.from_wire(doc)
    if table.problems:  # e.g. more entries than a table holds
        raise ManifestError(f"{flag}: {path}: {table.problems[0]}")
    return table


def save_table(table: CalibrationTable, path: str) -> None:
    """Write ``table`` as YAML to ``path``. A file already there is replaced only when it is a calibration table
    (the one ``--calibration`` read, or another): a manifest or anything else is kept.

    Raises:
        ManifestError (a ValueError): one line naming ``--save``: the path is a directory, its folder is missing
            or not writable, or the file holds something other than a calibration table.
    """
    target = Path(path)
    if target.is_dir():
        raise ManifestError(f"--save: {path} is a directory")
    if target.exists():
        load_table(path, "--save")  # refuses to overwrite what is not a table
    try:
        target.write_text(yaml.safe_dump(table.to_wire(), sort_keys=False, width=120), encoding="utf-8")
    except OSError as exc:
        raise ManifestError(f"--save: cannot write {path}: {exc.strerror or exc}") from exc


def read_log(path: str) -> str:
    """The log's text (undecodable bytes replaced; ``-``: stdin). Raises ``ManifestError`` naming ``--log`` when
    unreadable."""
    return read_input(path, "--log", LOG_MAX_BYTES).decode("utf-8", errors="replace")


def version_mismatch(kind: EngineKind, version: str | None, text: str) -> str | None:
    """An error line when the log states an engine minor version other than ``spec.engine.version``'s: its
    numbers would be filed as a calibration sample under the manifest's key (``engine/minor/...``) and bias
    every plan of that key. None when they agree or either is unknown."""
    logged = logged_version(kind, text)
    if logged is None or not version:
        return None
    wanted = parse_version(version, default=(0, 0, 0))[:2]
    if wanted == (0, 0) or logged == wanted:
        return None
    return (f"--log: the log was written by {kind.value} {logged[0]}.{logged[1]}, spec.engine.version is {version}: "
            "calibrate with a start-up of the version the manifest names")


def observed_json(report: StartupReport) -> dict[str, Any]:
    """``status.observed`` names (plus the terms vLLM prints)."""
    return {"kvCacheBytes": report.kv_cache_bytes, "kvCacheTokens": report.kv_cache_tokens,
            "maxConcurrency": report.max_concurrency,
            "servedContextLength": report.served_context_length or report.concurrency_context_length,
            "weightsBytes": report.weights_bytes, "loadSeconds": report.load_seconds,
            "activationBytes": report.activation_bytes, "nonTorchBytes": report.non_torch_bytes,
            "cudaGraphBytes": report.cuda_graph_bytes, "derived": list(report.derived),
            "sourceLines": list(report.source_lines)}


def run(args: argparse.Namespace) -> int:
    """Compare, print, optionally save. See the module docstring for exit codes."""
    try:
        if args.filename == STDIN and args.log == STDIN:
            raise ManifestError("-f and --log cannot both read stdin ('-'): give one of them as a file")
        server = load_manifest(args.filename, getattr(args, "name", None))
        text = read_log(args.log)
        table = load_table(args.calibration) if args.calibration else CalibrationTable()
    except (ManifestError, OSError) as exc:
        return fail(str(exc).splitlines()[0])
    mismatch = version_mismatch(server.spec.engine.kind, server.spec.engine.version, text)
    if mismatch:
        return fail(mismatch)
    report = parse_startup(server.spec.engine.kind, text)
    result, why = _predict(server.spec, args, report)
    if result is None:  # what the log says is still worth printing: say why there is no prediction
        doc = {"observed": observed_json(report), "predicted": None, "errorBytes": None, "calibration": None,
               "noPrediction": why}
        if args.output == "json":
            json.dump(doc, sys.stdout, indent=2)
            sys.stdout.write("\n")
        else:
            _observed_only(doc, server.metadata.name)
        return no_sample(report, f"no prediction to compare the log with ({why})")
    t = result.per_gpu
    predicted = {"kvCacheBytes": t.kv_cache_bytes, "kvCacheTokens": max(0, result.kv_pool_bytes)
                 // max(1, result.kv_bytes_per_token), "weightsBytes": t.weights_bytes,
                 "activationBytes": t.activation_bytes, "cudaGraphBytes": t.cuda_graph_bytes,
                 "otherBytes": t.other_bytes, "contextLength": result.context_length,
                 "maxContextLength": result.max_context_length, "kvBytesPerToken": result.kv_bytes_per_token}
    error = report.kv_cache_bytes - t.kv_cache_bytes if report.kv_cache_bytes is not None else None
    calibration: dict[str, Any] | None = None
    key = CalibrationKey.parse(result.calibration_key or "")
    if error is not None and key is not None and report.kv_cache_bytes is not None:
        sample_id = "offline:" + hashlib.sha256(text.encode()).hexdigest()[:16]
        residual = reserve_neutral_residual(report.kv_cache_bytes, t.kv_cache_bytes,
                                            fraction=result.effective.gpu_memory_utilization,
                                            planned_cuda_total=t.cuda_total_bytes,
                                            printed_cuda_total=report.cuda_total_bytes)
        printed = report.cuda_total_bytes
        table.add(key, Sample(sample_id, server.metadata.name, residual, report.kv_cache_bytes, t.kv_cache_bytes, "",
                              printed, t.total_bytes if printed else None))
        entry = table.entries[key]
        calibration = {"key": key.text(), "correctionBytes": correction(s.residual_bytes for s in entry.samples),
                       "entry": entry.to_wire()}
        if args.save:
            try:
                save_table(table, args.save)
            except ManifestError as exc:
                return fail(str(exc))
    doc = {"observed": observed_json(report), "predicted": predicted, "errorBytes": error, "calibration": calibration,
           "noPrediction": None, "weightsFrom": why}
    if args.output == "json":
        json.dump(doc, sys.stdout, indent=2)
        sys.stdout.write("\n")
    else:
        _table(doc, server.metadata.name)
    if calibration is None:
        return no_sample(report, f"the plan has no calibration key ({result.calibration_key or 'none'})")
    return EXIT_OK


def no_sample(report: StartupReport, otherwise: str) -> int:
    """Exit 1 with one stderr line saying why no calibration sample was made: the log's accounting was not
    recognised (not observed), else ``otherwise``."""
    why = ("the log holds no KV cache accounting in a known wording (not observed)" if not report.observed
           else "the log gives the KV pool in tokens or blocks only, not its bytes (a sample needs the bytes)"
           if report.kv_cache_bytes is None else otherwise)
    print(f"ctxfit: no calibration sample: {why}", file=sys.stderr)
    return EXIT_ERROR


def _gib(value: object) -> str:
    return "-" if not isinstance(value, int) else f"{value / GiB:.2f}"


def _table(doc: dict[str, Any], name: str) -> None:
    from rich.console import Console
    from rich.table import Table
    from rich.text import Text

    console = Console(width=120, markup=False, highlight=False)
    obs, pred = doc["observed"], doc["predicted"]
    table = Table(title=Text(f"{name}: predicted vs observed (per GPU)"), title_justify="left")
    for column in ("term", "predicted GiB", "observed GiB", "observed - predicted"):
        table.add_column(column, justify="left" if column == "term" else "right")
    for label, pkey, okey in (("weights", "weightsBytes", "weightsBytes"),
                              ("activation", "activationBytes", "activationBytes"),
                              ("non-torch / other", "otherBytes", "nonTorchBytes"),
                              ("CUDA graphs", "cudaGraphBytes", "cudaGraphBytes"),
                              ("KV pool", "kvCacheBytes", "kvCacheBytes")):
        p, o = pred.get(pkey), obs.get(okey)
        diff = f"{(o - p) / GiB:+.2f}" if isinstance(o, int) and isinstance(p, int) else "-"
        if label == "CUDA graphs" and p == 0:
            diff = "outside the budget"  # vLLM < 0.20 does not deduct graphs from the KV budget
        table.add_row(label, _gib(p), _gib(o), diff)
    table.add_row("KV tokens", f"{pred['kvCacheTokens']:,}",
                  f"{obs['kvCacheTokens']:,}" if obs["kvCacheTokens"] is not None else "-", "-")
    served = obs["servedContextLength"]
    table.add_row("context", f"{pred['contextLength']:,}", f"{served:,}" if served else "-", "-")
    console.print(table)
    if obs["maxConcurrency"] is not None:
        console.print(f"max concurrency (engine): {obs['maxConcurrency']:.2f}x")
    if obs["loadSeconds"] is not None:
        console.print(f"weights loaded in {obs['loadSeconds']:.1f} s")
    cal = doc["calibration"]
    if cal is not None:
        entry = cal["entry"]
        console.print(f"calibration {cal['key']}: {entry['count']} start-up(s), median residual "
                      f"{entry['medianResidualBytes'] / GiB:+.2f} GiB, correction {cal['correctionBytes'] / GiB:+.2f} "
                      "GiB", soft_wrap=True)
    for line in obs["sourceLines"]:
        console.print(f"  < {line}", soft_wrap=True)


def _predict(spec: Any, args: argparse.Namespace, report: StartupReport) -> tuple[Any, str | None]:
    """(plan, note) or (None, why not). The model is resolved as ``ctxfit plan`` does; when its weights cannot be
    estimated, the weights the log printed are used (and the note says so)."""
    from ctxfit.api import bytes_to_quantity

    resolve_note: str | None = None
    try:
        hf_config, model = resolve_for_cli(spec, args)
    except ManifestError as exc:
        hf_config, model, resolve_note = None, None, str(exc).splitlines()[0]
    try:
        return plan(spec, hf_config=hf_config, model=model), resolve_note
    except PlanInputError as exc:
        if exc.field != "spec.model.weightsPerGPU" or report.weights_bytes is None:
            return None, resolve_note or str(exc).splitlines()[0]
    except ValidationError as exc:
        return None, "config.json: " + validation_message(exc)
    except (ValueError, TypeError, ArithmeticError) as exc:
        return None, f"{type(exc).__name__}: {exc}".splitlines()[0]
    logged = spec.model_copy(update={"model": spec.model.model_copy(
        update={"weights_per_gpu": bytes_to_quantity(report.weights_bytes)})})
    try:
        return plan(logged, hf_config=hf_config, model=model), "weights from the log (the model's own could not be " \
            "estimated)"
    except (PlanInputError, ValueError, TypeError, ArithmeticError) as exc:
        return None, str(exc).splitlines()[0]


def _observed_only(doc: dict[str, Any], name: str) -> None:
    from rich.console import Console
    from rich.table import Table
    from rich.text import Text

    console = Console(width=120, markup=False, highlight=False)
    obs = doc["observed"]
    table = Table(title=Text(f"{name}: observed (per GPU); no prediction"), title_justify="left")
    table.add_column("term")
    table.add_column("observed GiB", justify="right")
    for label, key in (("weights", "weightsBytes"), ("activation", "activationBytes"),
                       ("non-torch / other", "nonTorchBytes"), ("CUDA graphs", "cudaGraphBytes"),
                       ("KV pool", "kvCacheBytes")):
        table.add_row(label, _gib(obs.get(key)))
    table.add_row("KV tokens", f"{obs['kvCacheTokens']:,}" if obs["kvCacheTokens"] is not None else "-")
    console.print(table)
    console.print(f"no prediction: {doc['noPrediction']}", soft_wrap=True)
    for line in obs["sourceLines"]:
        console.print(f"  < {line}", soft_wrap=True)
