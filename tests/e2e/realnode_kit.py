"""The harness's real node for tests whose pods must really run (its fixture is registered in tests/e2e/conftest.py,
so a test just names it).

- `http_get(url)`: a GET from a child process, for pod IPs on the real node (tests/conftest.py allows this process
  loopback connections only).
- `real_node` (session): hack/cluster_realnode.start_real_node on the session cluster (kubelet + containerd +
  kube-proxy, ~3 s), with the operator image (image_kit's `operator_image`) imported into its containerd
  (~20 s: `save` + `ctr images import`). Stopped at the end of the session (with a reused cluster:
  at the fixture's end). A machine that cannot run one fails the test with what is missing.
"""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Iterator

import cluster_realnode as rn
import ctxfit_cluster as cc
import images
import pytest

try:
    from .conftest import report
except ImportError:  # pragma: no cover
    def report(line: str) -> None:
        print(line)


@pytest.fixture(scope="session")
def real_node(cluster: cc.Cluster, container_engine: images.Engine,
              operator_image: str) -> Iterator[rn.RealNode]:
    missing = rn.missing_requirements(cluster.bin_dir)
    if missing:
        pytest.fail("this machine cannot run the harness's real node; missing: " + ", ".join(missing))
    if cluster.state.get("realnode"):  # a reused cluster whose last session crashed
        rn.stop_real_node(cluster)
    start = time.monotonic()
    node = rn.start_real_node(cluster)
    started = time.monotonic() - start
    try:
        archive = cluster.work_dir / "images" / "operator.tar"
        container_engine.save(operator_image, archive)
        node.import_image(archive)
        archive.unlink()
        report(f"real node {node.name}: Ready in {started:.1f} s, operator image imported "
               f"{time.monotonic() - start - started:.1f} s later")
        yield node
    finally:
        rn.stop_real_node(cluster)


def http_get(url: str, timeout: float = 10) -> str:
    """The body of GET `url`, fetched by a child process (this one may only connect to loopback)."""
    code = f"import urllib.request; print(urllib.request.urlopen({url!r}, timeout={timeout}).read().decode(), end='')"
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=timeout + 20,
                          check=False)
    if proc.returncode != 0:
        raise OSError(f"GET {url}: {proc.stderr.strip()[-500:]}")
    return proc.stdout
