"""Every golden ScaledObject (tests/golden/autoscaling/*/expected.yaml) is valid against KEDA's own CRD: a
server-side dry-run create on the local API server with the CRDs of the KEDA module the harness builds
(v2.20.2, hack/keda-bins.sh: ``keda/crd`` in the binary cache), so the OpenAPI schema, its pruning and its CEL
rule (minReplicaCount <= maxReplicaCount) all apply. Covers what the operator e2e does not create: the
LeaderWorkerSet target, scale to zero (``initialCooldownPeriod``), data parallelism and the paused annotation.
A dry run writes nothing and needs no KEDA operator (no admission webhook is run by the harness either).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml

GOLDEN = Path(__file__).resolve().parents[1] / "golden" / "autoscaling"
CASES = sorted(p.name for p in GOLDEN.iterdir() if (p / "expected.yaml").exists())
SCALEDOBJECT_CRD = "scaledobjects.keda.sh"


@pytest.fixture(scope="module")
def keda_crds(cluster: Any) -> None:
    """KEDA's CRDs from the binary cache, applied and Established (the same files the KEDA add-on installs)."""
    crd = Path(cluster.bin_dir) / "keda" / "crd" / "keda.sh_scaledobjects.yaml"
    if not crd.exists():
        pytest.fail(f"{crd} missing: run bash hack/k8s-bins.sh (make test does)")
    cluster.kubectl("apply", "--server-side", "--force-conflicts", "-f", str(crd))
    cluster.wait_established(SCALEDOBJECT_CRD, timeout=60)


def _golden(case: str, namespace: str) -> dict[str, Any]:
    obj: dict[str, Any] = yaml.safe_load((GOLDEN / case / "expected.yaml").read_text())
    obj["metadata"]["namespace"] = namespace
    return obj


def _dry_run(cluster: Any, obj: dict[str, Any]) -> tuple[int, str, dict[str, Any] | None]:
    proc = cluster.kubectl_proc("create", "--dry-run=server", "-o", "json", "-f", "-", input=json.dumps(obj))
    return proc.returncode, proc.stderr, json.loads(proc.stdout) if proc.returncode == 0 else None


def test_every_golden_has_a_case() -> None:
    assert len(CASES) >= 4, CASES


@pytest.mark.parametrize("case", CASES, ids=CASES)
def test_golden_scaled_object_is_valid_for_keda(cluster: Any, keda_crds: None, namespace: str, case: str) -> None:
    obj = _golden(case, namespace)
    code, err, stored = _dry_run(cluster, obj)
    assert code == 0, err
    assert stored is not None
    assert stored["spec"] == obj["spec"], "a field KEDA's schema does not know would have been pruned"
    assert stored["metadata"]["annotations"] == obj["metadata"]["annotations"]


def test_the_schema_is_enforced(cluster: Any, keda_crds: None, namespace: str) -> None:
    """The dry run does refuse what KEDA's CRD refuses (so the test above can fail)."""
    obj = _golden(CASES[0], namespace)
    obj["spec"]["minReplicaCount"] = obj["spec"]["maxReplicaCount"] + 1
    code, err, _ = _dry_run(cluster, obj)
    assert code != 0 and "minReplicaCount must be less than or equal to maxReplicaCount" in err, err
