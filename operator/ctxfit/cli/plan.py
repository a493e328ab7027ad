"""Show what fits: ``ctxfit plan -f FILE [--name NAME] [-o table|json|yaml]``.

``FILE`` is read as ``kubectl apply -f`` reads it (``-`` for stdin): every InferenceServer document is planned, each
in its own section (``-o json``/``yaml``: the plan object for a file of one server, ``{kind: List, items: [...]}``
for several, each item with its ``name``); documents of other kinds (a Gateway, an HTTPRoute) are skipped with one
note line on stderr. ``--name`` plans only that server.

Exit codes, one rule: 0 when a context at or above the minimum fits (``fits``; ``targetFits`` tells
whether the target itself does), 3 for every verdict that nothing can start (too little memory, weights
larger than the GPU, a TP/PP layout the model cannot be split by) with the full plan, reasons and
suggestions printed, 2 only for input that cannot be read (one line naming the field the user wrote), 1 when
stdout was closed (``| head``). Over several servers the worst wins: 2, then 3, then 0; the others are still planned.
An engine version outside the releases ctxfit models (``ctxfit.engines.versions``) is one warning line on stderr
and ``engineVersion`` in ``-o json``, never a refusal.
"""

from __future__ import annotations

import argparse
import json
import sys

import yaml
from pydantic import ValidationError

from ctxfit.api import GiB, InferenceServer, InferenceServerSpec, bytes_to_quantity
from ctxfit.budget.autoscale import (
    autoscaling_status,
    cold_start_seconds,
    server_thresholds,
    weights_per_replica_bytes,
)
from ctxfit.budget.calibrate import CalibrationTable
from ctxfit.budget.context import DEFAULT_HEADROOM
from ctxfit.budget.multinode import plan_group
from ctxfit.budget.planner import Plan
from ctxfit.render.cache import CacheVolume, checkpoint_bytes, describe_cache, resolve_cache
from ctxfit.vocab.inputs import PlanInputError

from . import EXIT_DOES_NOT_FIT, EXIT_INVALID, EXIT_OK, fail, warn
from .load import STDIN, ManifestError, load_servers, no_such_server, validation_message
from .resolve import add_resolve_arguments, extra_configs_for_cli, resolve_for_cli
from .routing import plan_routing


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """``-f FILE``, ``-o table|json|yaml``, ``--model-dir DIR``, ``--offline``, ``--hf-config FILE``,
    ``--fetch-config``."""
    parser.add_argument("-f", "--filename", required=True,
                        help="manifest (YAML, '-' for stdin): every InferenceServer document is planned, other "
                        "kinds are skipped")
    parser.add_argument("--name", help="plan only the InferenceServer of this metadata.name")
    parser.add_argument("-o", "--output", choices=["table", "json", "yaml"], default="table",
                        help="json/yaml: the plan object; a file of several servers gives {kind: List, items: [...]}")
    add_resolve_arguments(parser)
    parser.add_argument(
        "--fetch-config", action="store_true",
        help="download only config.json (and LoRA adapter_config.json, the draft's config.json) with huggingface_hub; "
        "a Hub that does not answer fails after HF_HUB_ETAG_TIMEOUT + HF_HUB_DOWNLOAD_TIMEOUT seconds per file "
        "(4 + 4 unless set, or CTXFIT_HUB_TIMEOUT_SECONDS each)"
    )
    parser.add_argument("--calibration", help="a calibration table (ctxfit calibrate --save, or the operator's "
                        "ConfigMap) applied to the KV pool")
    parser.add_argument(
        "--no-default-storage-class", action="store_true",
        help="plan the weights cache for a cluster without a default StorageClass (emptyDir)",
    )


def plan_cache(spec: InferenceServerSpec, result: Plan, name: str, has_default_storage_class: bool) -> tuple[
        CacheVolume, str, dict[str, object]]:
    """The weights cache the operator would use: (volume, why, ``-o json`` ``cache`` object)."""
    checkpoint = checkpoint_bytes(spec, result.per_gpu.weights_bytes)
    cache, _, note = resolve_cache(spec, server=name, has_default_storage_class=has_default_storage_class,
                                   checkpoint=checkpoint)
    doc: dict[str, object] = {"mode": cache.mode.value, "claimName": cache.claim_name, "sizeBytes": cache.size_bytes,
                              "size": bytes_to_quantity(cache.size_bytes) if cache.size_bytes else None,
                              "checkpointBytes": checkpoint, "downloads": cache.downloads, "note": note}
    return cache, note, doc


def plan_autoscaling(spec: InferenceServerSpec, result: Plan, name: str) -> tuple[list[str], dict[str, object] | None]:
    """``spec.autoscaling`` thresholds from the plan, as the operator derives them before the engine reports.

    Returns (human lines, ``-o json`` ``autoscaling`` object); ([], None) without ``spec.autoscaling``.
    The JSON keys are ``status.autoscaling``'s, plus ``kvCacheFullFraction``/``kvCacheFullTokens`` (the point
    where one more full-context request no longer fits) and ``warnings``; when nothing fits, only the bounds and
    a warning (as the operator's status then has only the bounds).
    """
    scaling = spec.autoscaling
    if scaling is None:
        return [], None
    if not result.fits or result.context_length <= 0:
        return ["autoscaling: no thresholds (nothing fits)"], {
            "minReplicas": scaling.min_replicas, "maxReplicas": scaling.max_replicas,
            "warnings": ["no thresholds: nothing fits"]}
    headroom = spec.context.headroom if spec.context.headroom is not None else DEFAULT_HEADROOM
    found = server_thresholds(spec, kv_pool_bytes=result.kv_pool_bytes, kv_bytes_per_token=result.kv_bytes_per_token,
                              context_length=result.context_length, max_num_seqs=result.effective.max_num_seqs,
                              headroom=headroom)
    cold = cold_start_seconds(weights_per_replica_bytes(spec, result.per_gpu.weights_bytes), None)
    status = autoscaling_status(found, scaling, scaled_object=name, paused=False, cold_start=cold)
    doc: dict[str, object] = {**status.to_wire(), "kvCacheFullFraction": round(found.full_fraction, 4),
                              "kvCacheFullTokens": found.full_tokens, "warnings": list(found.warnings)}
    doc.pop("paused", None)
    return [f"autoscaling: {status.rule}", *(f"- autoscaling: {w}" for w in found.warnings)], doc


def _gib(n: int) -> str:
    return f"{n / GiB:.2f}"


def render_table(result: Plan, name: str, cache_line: str = "", extra_lines: tuple[str, ...] = ()) -> None:
    """Print the plan as rich tables: per-GPU budget, context, command line, reasons."""
    from rich.console import Console
    from rich.table import Table
    from rich.text import Text

    console = Console(width=120, markup=False, highlight=False)
    t = result.per_gpu
    budget = Table(title=Text(f"{name}: per-GPU memory budget"), title_justify="left")
    budget.add_column("term")
    budget.add_column("GiB", justify="right")
    budget.add_column("source")
    notes = {n.split(":", 1)[0]: n.split(":", 1)[1].strip() for n in t.notes}
    rows = [
        ("total (NVML)", t.total_bytes, f"CUDA-visible {_gib(t.cuda_total_bytes)} GiB"),
        ("usable", t.usable_bytes, notes.get("usable", "")),
        ("weights", t.weights_bytes, notes.get("weights", "")),
        ("activation", t.activation_bytes, notes.get("activation", "")),
        ("CUDA graphs", t.cuda_graph_bytes, notes.get("CUDA graphs", "")),
        ("other", t.other_bytes, notes.get("other", "")),
        *((e.label, e.bytes, e.source + ("" if e.in_budget else
                                         " [host memory]" if e.host else " [outside the budget]"))
          for e in t.extras),
        ("KV pool", t.kv_cache_bytes, ""),
    ]
    for label, value, source in rows:
        budget.add_row(label, _gib(value), Text(source))
    console.print(budget)
    summary = Table(show_header=False, title="context", title_justify="left")
    summary.add_row("KV bytes/token/GPU", f"{result.kv_bytes_per_token:,}")
    summary.add_row("predicted max context", f"{result.max_context_length:,}")
    summary.add_row("chosen context", f"{result.context_length:,}" if result.fits else "does not fit")
    summary.add_row("target fits", "yes" if result.target_fits else "no")
    summary.add_row("concurrency at chosen", f"{result.concurrency:.2f}")
    eff = result.effective.to_wire()
    summary.add_row("effective", Text(", ".join(f"{k}={v}" for k, v in eff.items() if v is not None)))
    console.print(summary)
    if result.fits:
        console.print("command: " + " ".join([*result.engine_command, *result.engine_args]), soft_wrap=True)
    if cache_line:
        console.print(cache_line, soft_wrap=True)
    for line in extra_lines:
        console.print(line, soft_wrap=True)
    for reason in result.reasons:
        console.print(f"- {reason}", soft_wrap=True)


def plan_server(server: InferenceServer, args: argparse.Namespace, table: CalibrationTable | None,
                where: str = "") -> tuple[int, dict[str, object] | None]:
    """Plan one server and, for ``-o table``, print it. Returns (exit code, the ``-o json`` document or None when
    its input could not be read: then one error line was printed). ``where`` prefixes the lines (a file of several
    servers names the one they are about)."""
    from ctxfit.engines.versions import check_version

    try:
        hf_config, model = resolve_for_cli(server.spec, args)
        adapter_configs, draft_model = extra_configs_for_cli(server.spec, args)
        result, _ = plan_group(server.spec, hf_config=hf_config, model=model, calibration=table,
                               adapter_configs=adapter_configs, draft_model=draft_model)
    except (ManifestError, PlanInputError) as exc:
        return fail(where + str(exc)), None
    except ValidationError as exc:  # e.g. a config.json whose fields break the Architecture rules
        return fail(where + "config.json: " + validation_message(exc)), None
    except (ValueError, TypeError, ArithmeticError, RecursionError) as exc:
        return fail(where + f"{type(exc).__name__}: {exc}".splitlines()[0]), None
    version = check_version(server.spec)
    if not version.ok:  # planned all the same, with the nearest modelled release's rules: a warning, not a refusal
        warn(where + version.message())
    cache, note, cache_doc = plan_cache(server.spec, result, server.metadata.name, not args.no_default_storage_class)
    scaling_lines, scaling_doc = plan_autoscaling(server.spec, result, server.metadata.name)
    doc = ({"name": server.metadata.name} | result.to_json() | {"cache": cache_doc, "engineVersion": version.to_json()}
           | ({"autoscaling": scaling_doc} if scaling_doc is not None else {}))
    routing_lines, routing_doc = plan_routing(server.spec, result, server.metadata.name)
    if routing_doc is not None:
        doc["routing"] = routing_doc
    if args.output == "table":
        render_table(result, server.metadata.name, f"weights cache: {describe_cache(cache)}; {note}",
                     (*scaling_lines, *routing_lines))
    return (EXIT_OK if result.fits else EXIT_DOES_NOT_FIT), doc


def run(args: argparse.Namespace) -> int:
    """Plan every InferenceServer of ``-f`` (``-`` reads stdin; ``--name`` picks one) and print each. Returns 0
    (each ``fits``), 3 (a does-not-fit verdict for one at least) or 2 (input that cannot be read, for one at
    least: its line names the server and the field; the others are still planned)."""
    try:
        found = load_servers(args.filename)
        table = None
        if args.calibration:
            from .calibrate import load_table

            table = load_table(args.calibration)
    except ManifestError as exc:
        return fail(str(exc))
    entries = found.servers
    if args.name is not None:
        entries = found.named(args.name)
        if not entries:
            return fail(no_such_server("stdin" if args.filename == STDIN else args.filename, args.name, found))
    elif (note := found.note()) is not None:
        print(f"ctxfit: note: {note}", file=sys.stderr)
    several = len(entries) > 1
    codes: list[int] = []
    docs: list[dict[str, object]] = []
    for _, _, server in entries:
        if isinstance(server, ManifestError):
            codes.append(fail(str(server)))
            continue
        if several and args.output == "table" and (docs or codes):
            print()
        code, doc = plan_server(server, args, table, f"{server.metadata.name}: " if several else "")
        codes.append(code)
        if doc is not None:
            docs.append(doc)
    if args.output != "table" and docs:
        out: object = docs[0] if not several else {"kind": "List", "items": docs}
        if args.output == "json":
            json.dump(out, sys.stdout, indent=2)
            sys.stdout.write("\n")
        else:
            yaml.safe_dump(out, sys.stdout, sort_keys=False)
    return max(codes, key=lambda c: (c == EXIT_INVALID, c == EXIT_DOES_NOT_FIT, c))
