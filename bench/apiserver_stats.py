"""What the API server served during a window: ``apiserver_request_total`` from its ``/metrics``, by verb and
resource, before and after (``bench/reconcile_bench.py``). Every client counts: the operator, the benchmark,
kube-controller-manager (ReplicaSets, Pods, PersistentVolumes), the scheduler (bindings) and kwok (pod
status), so the split says which writes a server costs beyond its Deployment. WATCH requests are counted when
they start, not per event, and are left out.
"""

from __future__ import annotations

import collections
import re

from ctxfit.controller.kube.rest import Rest
from kubernetes import client

_SAMPLE = re.compile(r'^apiserver_request_total\{(?P<labels>[^}]*)\} (?P<value>[0-9.e+]+)$')
_LABEL = re.compile(r'(\w+)="([^"]*)"')

Key = tuple[str, str]
"""(verb, resource[/subresource])."""


def requests_served(api: client.ApiClient) -> collections.Counter[Key]:
    """``apiserver_request_total`` summed by (verb, resource/subresource); empty when /metrics is unreadable."""
    counts: collections.Counter[Key] = collections.Counter()
    try:
        text = Rest(api).request("GET", "/metrics", accept="text/plain").decode()
    except Exception:  # noqa: BLE001 - no permission or unreachable: the split is optional
        return counts
    for line in text.splitlines():
        match = _SAMPLE.match(line)
        if not match:
            continue
        labels = dict(_LABEL.findall(match.group("labels")))
        verb = labels.get("verb", "")
        if verb in ("WATCH", "CONNECT"):
            continue
        resource = labels.get("resource", "") + (f"/{labels['subresource']}" if labels.get("subresource") else "")
        counts[(verb, resource)] += int(float(match.group("value")))
    return counts


def describe(before: collections.Counter[Key], after: collections.Counter[Key], units: int, unit: str,
             top: int = 12) -> str:
    """The requests served between two readings, per ``unit``, largest first (``top`` of them)."""
    delta = after - before
    total = sum(delta.values())
    if not total:
        return "unavailable"
    parts = ", ".join(f"{verb} {resource} {n / units:.2f}" for (verb, resource), n in delta.most_common(top))
    return f"{total / units:.1f} requests/{unit}: {parts}"
