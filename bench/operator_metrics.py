"""The operator's own view of a benchmark run, from its ``/metrics``: reconcile durations, how long
reconciles waited for a worker slot (``ctxfit_workqueue_wait_seconds``, by pass: a server's first reconcile
or a later one) and its API requests by verb and resource (``ctxfit_api_request_duration_seconds``), as
count, mean and bucket-bound p50/p95 (the smallest bucket bound holding that share)."""

from __future__ import annotations

import collections
import math
import re
import urllib.request


def scrape(port: int) -> str:
    """The operator's /metrics text ("" when unreachable)."""
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as rsp:
            return str(rsp.read().decode())
    except OSError:
        return ""


def _histogram(text: str, name: str, match: str = "") -> tuple[float, float, list[tuple[float, float]]]:
    """(count, sum, [(le, cumulative count)]) of histogram ``name`` over series whose labels contain ``match``."""
    buckets: dict[float, float] = collections.defaultdict(float)
    count = total = 0.0
    for line in text.splitlines():
        if not line.startswith(name) or match not in line:
            continue
        head, _, value = line.rpartition(" ")
        if head.startswith(name + "_bucket"):
            le = re.search(r'le="([^"]+)"', head)
            if le:
                buckets[math.inf if le.group(1) == "+Inf" else float(le.group(1))] += float(value)
        elif head.startswith(name + "_count"):
            count += float(value)
        elif head.startswith(name + "_sum"):
            total += float(value)
    return count, total, sorted(buckets.items())


def _quantile(buckets: list[tuple[float, float]], count: float, q: float) -> float:
    for le, cumulative in buckets:
        if cumulative >= q * count:
            return le
    return math.inf


def describe_histogram(text: str, name: str, match: str = "") -> str:
    """``N, mean X ms, p50 <= Y s, p95 <= Z s`` (bucket bounds), or "none"."""
    count, total, buckets = _histogram(text, name, match)
    if not count:
        return "none"
    return (f"{count:.0f}, mean {total / count * 1000:.0f} ms, p50 <= {_quantile(buckets, count, .5):g} s, "
            f"p95 <= {_quantile(buckets, count, .95):g} s")


def api_requests(text: str, top: int = 8) -> str:
    """The operator's API requests by verb and resource, most total time first: count, mean, p95 bound."""
    name = "ctxfit_api_request_duration_seconds"
    kinds = sorted({m.group(1) for m in re.finditer(name + r'_count\{([^}]*)\}', text)})
    rows = []
    for labels in kinds:
        count, total, buckets = _histogram(text, name, labels)
        verb = re.search(r'verb="([^"]+)"', labels)
        resource = re.search(r'resource="([^"]+)"', labels)
        what = f"{verb.group(1) if verb else '?'} {resource.group(1) if resource else '?'}"
        rows.append((total, f"{what} {count:.0f} x {total / count * 1000:.0f} ms (p95 <= "
                            f"{_quantile(buckets, count, .95):g} s)"))
    return "; ".join(row for _, row in sorted(rows, reverse=True)[:top]) or "none"


def resolutions(text: str, kind: str = "hub", outcome: str = "Resolved") -> tuple[int, float, float | None]:
    """(count, total seconds, Unix time the last one ended) of the operator's model resolutions of ``kind`` that
    ended with ``outcome`` (``ctxfit_model_resolution_duration_seconds``, ``..._end_timestamp_seconds``); the end is
    None when the operator exports no such metric (an older operator)."""
    labels = f'kind="{kind}",outcome="{outcome}"'
    count, total, _ = _histogram(text, "ctxfit_model_resolution_duration_seconds", labels)
    end = re.search(r'^ctxfit_model_resolution_end_timestamp_seconds\{' + re.escape(labels) + r'\} (\S+)$', text, re.M)
    return int(count), total, float(end.group(1)) if end else None


def describe(port: int) -> str:
    """Reconcile durations and queue waits (first / later passes) as one block of lines."""
    text = scrape(port)
    if not text:
        return "operator metrics: unavailable"
    wait = "ctxfit_workqueue_wait_seconds"
    first, later = 'pass="first"', 'pass="later"'
    return "\n".join([
        f"reconciles: {describe_histogram(text, 'ctxfit_reconcile_duration_seconds')}",
        f"queue wait, first passes: {describe_histogram(text, wait, first)}",
        f"queue wait, later passes: {describe_histogram(text, wait, later)}",
        f"API requests: {api_requests(text)}",
    ])
