"""End-to-end fixtures: a real local control plane (hack/ctxfit_cluster.py), one per test session.

- `cluster` (session): starts etcd, kube-apiserver, kube-controller-manager, kube-scheduler and kwok
  with the default GPU node pool in a temporary dir, sets KUBECONFIG for the session and stops
  everything at the end (finalizer + atexit + PR_SET_PDEATHSIG, so nothing outlives the run).
  With CTXFIT_KUBECONFIG=<path> it reuses that running cluster instead and leaves it running.
- `namespace` (function): a fresh namespace with its default ServiceAccount; deleted afterwards.

Every test under tests/e2e gets the `e2e` mark. The harness start time is printed in the summary.
"""

from __future__ import annotations

import os
import shutil
import sys
import uuid
from pathlib import Path

import pytest

E2E_DIR = Path(__file__).resolve().parent
REPO_DIR = E2E_DIR.parent.parent
sys.path.insert(0, str(REPO_DIR / "hack"))

import ctxfit_cluster as cc  # noqa: E402

_summary: list[str] = []


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "e2e: needs the local control plane (hack/cluster.py)")


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        if E2E_DIR in Path(str(item.fspath)).resolve().parents:
            item.add_marker(pytest.mark.e2e)


def pytest_terminal_summary(terminalreporter, exitstatus, config) -> None:  # noqa: ANN001
    for line in _summary:
        terminalreporter.write_line(line)


def report(line: str) -> None:
    """Add a line to the end-of-run summary (visible with `pytest -q`)."""
    _summary.append(line)


def attach(kubeconfig: str) -> cc.Cluster:
    """A Cluster object for an already running cluster (CTXFIT_KUBECONFIG)."""
    kc = Path(kubeconfig).expanduser().resolve()
    if (kc.parent / cc.STATE_FILE).exists():
        c = cc.Cluster(kc.parent)
    else:  # some other cluster: kubectl works; add_node/set_pod_logs need kwok on this machine
        c = cc.Cluster(cc.temp_cluster_dir("ctxfit-attach-"))
        c.state = {"kubeconfig": str(kc)}
    proc = c.kubectl_proc("get", "--raw", "/readyz")
    if proc.returncode != 0:
        raise cc.HarnessError(f"CTXFIT_KUBECONFIG={kubeconfig}: cluster not reachable: {proc.stderr.strip()}")
    return c


@pytest.fixture(scope="session")
def cluster(request: pytest.FixtureRequest):
    """The running local cluster: .kubeconfig, .bin_dir, .kubectl(*args), .add_node(...), ..."""
    old_kubeconfig = os.environ.get("KUBECONFIG")
    reuse = os.environ.get("CTXFIT_KUBECONFIG")
    if reuse:
        c = attach(reuse)
        c.reused = True
        report(f"ctxfit e2e harness: reusing the cluster at {c.kubeconfig}")
    else:
        c = cc.Cluster(cc.temp_cluster_dir())
        c.reused = False

        def teardown() -> None:
            c.stop()
            failed = request.session.testsfailed
            if failed and os.environ.get("CI") is None:
                report(f"ctxfit e2e harness: component logs kept in {c.logs_dir}")
            else:
                shutil.rmtree(c.work_dir, ignore_errors=True)

        request.addfinalizer(teardown)
        try:
            secs = c.start(die_with_parent=True)
        except Exception:
            report(f"ctxfit e2e harness: start FAILED; logs in {c.logs_dir}")
            raise
        report(
            f"ctxfit e2e harness: started in {secs:.1f} s "
            "(etcd, kube-apiserver, kube-controller-manager, kube-scheduler, kwok, "
            f"{len(cc.default_nodes())} GPU nodes)"
        )
    os.environ["KUBECONFIG"] = str(c.kubeconfig)
    yield c
    if old_kubeconfig is None:
        os.environ.pop("KUBECONFIG", None)
    else:
        os.environ["KUBECONFIG"] = old_kubeconfig


@pytest.fixture
def namespace(cluster: cc.Cluster):
    """A fresh namespace (default ServiceAccount present); deleted without waiting afterwards."""
    name = f"e2e-{uuid.uuid4().hex[:8]}"
    cluster.create_namespace(name)
    yield name
    cluster.kubectl("delete", "namespace", name, "--wait=false", "--ignore-not-found", check=False)


# Session fixtures of the container images (image_kit.py) and the real node (realnode_kit.py), defined here so every
# module shares one of each (a fixture imported into a test module is that module's own: built or started again).
from .image_kit import container_engine, fake_engine_image, operator_image  # noqa: E402,F401
from .realnode_kit import real_node  # noqa: E402,F401
