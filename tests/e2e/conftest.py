"""End-to-end fixtures: a real local control plane (hack/ctxfit_cluster.py), one per test session.

- `cluster` (session): starts etcd, kube-apiserver, kube-controller-manager, kube-scheduler and kwok
  with the default GPU node pool in a temporary dir, sets KUBECONFIG for the session and stops
  everything at the end (finalizer + atexit + PR_SET_PDEATHSIG, so nothing outlives the run).
  With CTXFIT_KUBECONFIG=<path> it reuses that running cluster instead and leaves it running.
- `namespace` (function): a fresh namespace with its default ServiceAccount; deleted afterwards.
- `crd` (session): the checked-in CRD applied and Established; `api` / `op` (function): the API helper and the
  operator for the test's namespace (`operator_kit.ServerClient`, `operator_kit.OperatorProcess`).
- `lws` (session), `groups` (function): the LeaderWorkerSet controller and a client for the namespace's sets.
- `prometheus`, `keda` (session), `engine_pod` (function): a real Prometheus, the real KEDA operator, and fake
  engine pods' metrics on that Prometheus (`addons_prometheus`, `addons_keda`, `engine_metrics_fixture`).

Every test under tests/e2e gets the `e2e` mark. The harness start time is printed in the summary.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

E2E_DIR = Path(__file__).resolve().parent
REPO_DIR = E2E_DIR.parent.parent
sys.path.insert(0, str(REPO_DIR / "hack"))

import ctxfit_cluster as cc  # noqa: E402
from addons_keda import KEDA_BINARY, KedaOperator, keda_available, start_keda, stop_keda  # noqa: E402
from addons_lws import LWS_BINARY, lws_available, start_lws  # noqa: E402
from addons_proc import stop_component  # noqa: E402
from addons_prometheus import (  # noqa: E402
    PROCESS_NAME,
    PROMETHEUS_BINARY,
    Prometheus,
    prometheus_available,
    start_prometheus,
    stop_prometheus,
)
from engine_metrics_fixture import EnginePod  # noqa: E402
from kubernetes.client import CustomObjectsApi  # noqa: E402
from kubernetes.client.rest import ApiException  # noqa: E402

from .operator_kit import CRD_FILE, LWS, REPO, OperatorProcess, ServerClient, kubectl  # noqa: E402

_summary: list[str] = []


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "e2e: needs the local control plane (hack/cluster.py)")


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        if E2E_DIR in Path(str(item.fspath)).resolve().parents:
            item.add_marker(pytest.mark.e2e)


def pytest_terminal_summary(terminalreporter, exitstatus, config) -> None:
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


# The operator under test (operator_kit)

@pytest.fixture(scope="session")
def crd(cluster: Any) -> Path:
    """The checked-in CRD, applied once and Established."""
    cluster.kubectl("apply", "-f", str(CRD_FILE))
    cluster.wait_established("inferenceservers.ctxfit.io", timeout=30)
    return CRD_FILE


@pytest.fixture
def api(cluster: Any, crd: Path, namespace: str) -> Iterator[ServerClient]:
    """API helper for this test's namespace; deletes the servers and waits for their pods afterwards."""
    helper = ServerClient(Path(cluster.kubeconfig), namespace, Path(cluster.bin_dir) / "kubectl")
    yield helper
    try:
        helper.delete_all()
        helper.wait(lambda: not helper.core.list_namespaced_pod(namespace).items, "pods released", timeout=30)
    except (ApiException, AssertionError):
        pass


@pytest.fixture
def op(cluster: Any, crd: Path, namespace: str, tmp_path: Path) -> Iterator[OperatorProcess]:
    """The operator, running for this test's namespace; its log is printed when the test fails."""
    operator = OperatorProcess(Path(cluster.kubeconfig), namespace, tmp_path / "operator.log").start()
    yield operator
    operator.stop()
    # captured output is shown only when the test fails
    print(f"--- operator log ({operator.log_path}) ---\n{operator.log_path.read_text()[-6000:]}")


# Multi-node: the LeaderWorkerSet controller

@pytest.fixture(scope="session")
def lws(cluster: Any) -> Any:
    """The LWS controller, started once on the session's cluster."""
    if not lws_available(cluster):
        pytest.fail(f"{LWS_BINARY} not built: run bash hack/k8s-bins.sh (make test does)")
    if LWS_BINARY not in cluster.state.get("processes", {}):
        start_lws(cluster)
    return cluster


@pytest.fixture
def groups(lws: Any, api: ServerClient) -> Iterator[CustomObjectsApi]:
    """LeaderWorkerSet client; deletes this namespace's sets afterwards so the H100s are free again."""
    custom = CustomObjectsApi(api.core.api_client)
    yield custom
    try:
        custom.delete_collection_namespaced_custom_object(*LWS[:2], api.namespace, LWS[2])
        api.wait(lambda: not api.core.list_namespaced_pod(api.namespace).items, "group pods released", timeout=60)
    except (ApiException, AssertionError):
        pass


# Autoscaling: Prometheus and KEDA

@pytest.fixture(scope="session")
def prometheus(cluster: Any) -> Iterator[Prometheus]:
    """A Prometheus for the session (scrapes the shared fake engine endpoint); stopped at the end."""
    if not prometheus_available():
        pytest.fail(f"{PROMETHEUS_BINARY} missing: apt-get install prometheus (.ci/run does)")
    stop_component(cluster, PROCESS_NAME)  # one left over by a crashed session on a reused cluster
    t0 = time.monotonic()
    prom = start_prometheus(cluster)
    prom.wait_scraping()
    report(f"ctxfit e2e harness: Prometheus up and scraping in {time.monotonic() - t0:.1f} s ({prom.url})")
    yield prom
    stop_prometheus(cluster, prom)


@pytest.fixture(scope="session")
def keda(cluster: Any) -> Iterator[KedaOperator]:
    """The KEDA operator for the session (CRDs installed); stopped at the end."""
    if not keda_available(cluster):
        pytest.fail(f"{KEDA_BINARY} not built: run bash hack/k8s-bins.sh (make test does)")
    stop_component(cluster, KEDA_BINARY)  # one left over by a crashed session on a reused cluster
    t0 = time.monotonic()
    operator = start_keda(cluster)
    report(f"ctxfit e2e harness: KEDA operator ready in {time.monotonic() - t0:.1f} s (CRDs included)")
    yield operator
    stop_keda(cluster)


@pytest.fixture
def engine_pod(prometheus: Prometheus) -> Iterator[Callable[..., EnginePod]]:
    """Factory of fake engine pods' metrics on the session's Prometheus; their series go away afterwards."""
    made: list[EnginePod] = []

    def make(namespace: str, server: str, pod: str, engine_kind: str = "vllm",
             engine_labels: dict[str, str] | None = None) -> EnginePod:
        p = prometheus.engine_pod(namespace, server, pod, engine_kind, engine_labels)
        made.append(p)
        return p

    yield make
    for p in made:
        p.clear()


# Session fixtures of the container images (image_kit.py) and the real node (realnode_kit.py), defined here so every
# module shares one of each (a fixture imported into a test module is that module's own: built or started again).
from .image_kit import container_engine, fake_engine_image, operator_image  # noqa: E402,F401
from .realnode_kit import real_node  # noqa: E402,F401


@pytest.fixture(scope="module")
def user_roles(cluster: Any, crd: Path) -> Iterator[None]:
    """The chart's user-facing ClusterRoles, applied as `helm install` would (deleted afterwards: they are
    cluster-scoped, and a later `helm install` in the same cluster must not find them unowned)."""
    chart = REPO / "charts" / "ctxfit"
    rendered = subprocess.run([str(Path(cluster.bin_dir) / "helm"), "template", "ctxfit", str(chart),
                               "--show-only", "templates/user-roles.yaml"], capture_output=True, text=True, check=True)
    docs = [d for d in yaml.safe_load_all(rendered.stdout) if d]
    assert {d["metadata"]["name"] for d in docs} == {"ctxfit-edit", "ctxfit-view"}
    result = kubectl(cluster, "apply", "-f", "-", input=json.dumps({"apiVersion": "v1", "kind": "List", "items": docs}))
    assert result.returncode == 0, result.stderr
    yield
    kubectl(cluster, "delete", "clusterrole", "ctxfit-edit", "ctxfit-view", "--ignore-not-found")
