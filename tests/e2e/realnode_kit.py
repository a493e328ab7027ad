"""The harness's real node for tests whose pods must really run (import into a test module:
``from .realnode_kit import container_engine, operator_image, real_node  # noqa: F401``).

- `real_node` (session): hack/cluster_realnode.start_real_node on the session cluster (kubelet + containerd +
  kube-proxy, ~3 s), with the operator image (image_kit's `operator_image`) imported into its containerd
  (~20 s: `save` + `ctr images import`). Stopped at the end of the session (with a reused cluster:
  at the fixture's end). A machine that cannot run one fails the test with what is missing.
"""

from __future__ import annotations

import time
from collections.abc import Iterator

import cluster_realnode as rn
import ctxfit_cluster as cc
import images
import pytest

from .image_kit import container_engine, operator_image  # noqa: F401

try:
    from .conftest import report
except ImportError:  # pragma: no cover
    def report(line: str) -> None:
        print(line)


@pytest.fixture(scope="session")
def real_node(cluster: cc.Cluster, container_engine: images.Engine,  # noqa: F811
              operator_image: str) -> Iterator[rn.RealNode]:  # noqa: F811
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
