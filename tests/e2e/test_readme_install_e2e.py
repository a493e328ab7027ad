"""README "If the CRD already exists", against the real API server and Helm: a hand-applied CRD makes
`helm install` fail on ownership; README's label/annotate commands let the release adopt it; and
`crds.enabled=false` installs beside it. The commands are read from README, not copied here."""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from pathlib import Path

import ctxfit_cluster as cc
import pytest

from tests.unit.chart.readmekit import INSTALL, commands

REPO = Path(__file__).resolve().parents[2]
CRD_FILE = REPO / "crds" / "inferenceservers.ctxfit.io.yaml"
CRD = "crd/inferenceservers.ctxfit.io"


def _helm(cluster: cc.Cluster, argv: list[str]) -> subprocess.CompletedProcess[str]:
    args = [str(REPO / a) if a == "charts/ctxfit" else a for a in argv[1:]]
    return subprocess.run([str(cluster.bin_dir / "helm"), "--kubeconfig", str(cluster.kubeconfig), *args],
                          capture_output=True, text=True, timeout=300, check=False)


def _hand_applied(cluster: cc.Cluster) -> None:
    """The CRD as `kubectl apply -f crds/...` leaves it: no Helm ownership label or annotations."""
    cluster.kubectl("apply", "-f", str(CRD_FILE))
    cluster.kubectl("label", CRD, "app.kubernetes.io/managed-by-", check=False)
    cluster.kubectl("annotate", CRD, "meta.helm.sh/release-name-", "meta.helm.sh/release-namespace-", check=False)


@pytest.fixture
def readme_install(cluster: cc.Cluster) -> Iterator[list[str]]:
    (install,) = [c for c in commands(INSTALL, "helm") if c[1] == "install"]
    release, namespace = install[2], install[install.index("--namespace") + 1]
    if _helm(cluster, ["helm", "status", release, "--namespace", namespace]).returncode == 0:
        pytest.fail(f"release {namespace}/{release} already exists in the test cluster")
    yield install
    _helm(cluster, ["helm", "uninstall", release, "--namespace", namespace, "--wait"])
    _hand_applied(cluster)  # leave the CRD as the other e2e tests expect it (kept by crds.keep)


def test_existing_crd_adopted_with_the_readme_commands(cluster: cc.Cluster, readme_install: list[str]) -> None:
    _hand_applied(cluster)
    refused = _helm(cluster, readme_install)
    assert refused.returncode != 0 and "invalid ownership metadata" in refused.stderr, refused.stderr
    for cmd in commands(INSTALL, "kubectl label") + commands(INSTALL, "kubectl annotate"):
        cluster.kubectl(*cmd[1:])
    installed = _helm(cluster, readme_install)
    assert installed.returncode == 0, installed.stderr
    labels = cluster.kubectl("get", CRD, "-o", "jsonpath={.metadata.labels.app\\.kubernetes\\.io/managed-by}")
    assert labels == "Helm"


def test_existing_crd_kept_with_crds_disabled(cluster: cc.Cluster, readme_install: list[str]) -> None:
    _hand_applied(cluster)
    installed = _helm(cluster, [*readme_install, "--set", "crds.enabled=false"])
    assert installed.returncode == 0, installed.stderr
    owner = cluster.kubectl("get", CRD, "-o", "jsonpath={.metadata.annotations.meta\\.helm\\.sh/release-name}")
    assert owner == "", "the release must not own a CRD it did not render"
