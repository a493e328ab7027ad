"""On the real local control plane: every refusal of every child kind (claims included) gets
the same backoff and one Event per distinct cause, and status says what is true (docs/design/refusals.md).

Reproduction of the issue's storm: a claim grown on a StorageClass that cannot expand (the harness's ``standard``
class, ``allowVolumeExpansion: false``: kube-apiserver's PersistentVolumeClaimResize admission answers 403). Before:
512 ``ObjectRejected`` Events in 30 s, ~2,200 status writes in 70 s, then an ``OverflowError`` every 10 s, and a
status claiming the size the claim does not have.
"""

from __future__ import annotations

import re
import time
from typing import Any

from cluster_storage import with_download
from ctxfit.api import GiB, quantity_to_bytes

from .operator_kit import OperatorProcess, ServerClient, manifest

NAME = "kimi-k25"


def _metric(op: OperatorProcess, name: str, labels: str) -> float:
    found = re.findall(rf"^{name}\{{{labels}\}} ([0-9.e+]+)$", op.scrape(), re.M)
    return float(found[0]) if found else 0.0


def status_writes(op: OperatorProcess) -> float:
    """Status replaces the operator sent, every answer counted (``ctxfit_api_requests_total``)."""
    return sum(float(v) for v in re.findall(
        r'^ctxfit_api_requests_total\{(?=[^}]*verb="PUT")(?=[^}]*resource="inferenceservers/status")[^}]*\} '
        r"([0-9.e+]+)$", op.scrape(), re.M))


def claim(api: ServerClient, name: str) -> dict[str, Any]:
    return api.core.api_client.sanitize_for_serialization(
        api.core.read_namespaced_persistent_volume_claim(name, api.namespace))


def test_growing_a_claim_its_class_cannot_expand_is_one_event_a_backoff_and_the_true_size(
        api: ServerClient, op: OperatorProcess) -> None:
    obj = manifest("kimi-128k.yaml")
    obj["spec"]["model"]["cache"] = {"volumeClaimTemplate": {"size": "100Gi"}}
    with_download(obj, delay_ms=200)
    api.create(obj)
    api.wait_phase(NAME, "Ready", timeout=120)
    assert claim(api, f"{NAME}-weights")["status"]["phase"] == "Bound"
    writes_before = status_writes(op)
    api.patch_spec(NAME, {"model": {"cache": {"volumeClaimTemplate": {"size": "900Gi"}}}})

    def refused() -> dict[str, Any] | None:
        cond = next((c for c in api.get(NAME)["status"].get("conditions", []) if c["type"] == "ObjectsAccepted"), None)
        return cond if cond is not None and cond["status"] == "False" else None

    cond = api.wait(refused, "ObjectsAccepted=False for the claim", timeout=60)
    assert "PersistentVolumeClaim/expand kimi-k25-weights (403)" in cond["message"], cond
    started = time.monotonic()
    time.sleep(40)
    rejected = [e for e in api.events(NAME) if e["reason"] == "ObjectRejected"]
    assert len(rejected) == 1, rejected  # was 512 in 30 s
    tries = _metric(op, "ctxfit_reconcile_errors_total", 'reason="rejected_403"')
    assert 1 <= tries <= 4, tries  # 10 s, 20 s, 40 s backoff in ~45 s
    writes = status_writes(op) - writes_before
    assert writes <= 12, f"{writes} status writes in {time.monotonic() - started:.0f} s"  # was ~2,200 in 70 s
    status = api.get(NAME)["status"]
    have = claim(api, f"{NAME}-weights")["spec"]["resources"]["requests"]["storage"]
    assert quantity_to_bytes(have) == 100 * GiB
    assert status["model"]["claimBytes"] == 100 * GiB, status["model"]  # what the claim has
    assert status["model"]["claimWantedBytes"] == 900 * GiB, status["model"]
    log = op.log_path.read_text()
    assert "OverflowError" not in log and "Traceback" not in log
