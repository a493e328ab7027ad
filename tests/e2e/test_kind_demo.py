"""`make kind-demo`'s cluster part (hack/incluster_demo.py), run on a harness of its own whose only node is the
harness's real one (kubelet + containerd, no kind: images reach the node by `ctr import` instead of `kind load`).
README's whole kind path, kind included, runs in tests/e2e/test_kind_readme.py.

The script gives the node the 8x RTX PRO 6000 that manifests/kimi-128k.yaml asks for (GFD labels, nvidia.com/gpu),
installs the chart with the built image and the fake engine as the default vLLM image, runs its Hub stand-in
and applies kimi-128k (host resources lowered, download from the stand-in): the server is Ready at the planned
131072 tokens on that node, its download ran, and the start-up log the operator read back is the fake engine's
(0.5 GiB below the plan's pool).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import cluster_realnode as rn
import ctxfit_cluster as cc
import images
import pytest
import yaml

from .chart_kit import KIMI

GIB = 1 << 30


@pytest.mark.timeout(900)
def test_incluster_demo_makes_kimi_ready(cluster: cc.Cluster, tmp_path: Path, container_engine: images.Engine,
                                         operator_image: str, fake_engine_image: str) -> None:
    own = cc.Cluster(tmp_path / "c", bin_dir=cluster.bin_dir)
    own.start(die_with_parent=True, nodes=[])
    try:
        node = rn.start_real_node(own, name="demo-node", gpus=None)
        for image in (operator_image, fake_engine_image):
            archive = tmp_path / "image.tar"
            container_engine.save(image, archive)
            node.import_image(archive)
            archive.unlink()
        env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(images.REPO_DIR / "operator"), str(images.HACK_DIR)])}
        proc = subprocess.run(
            [sys.executable, str(images.HACK_DIR / "incluster_demo.py"), "--kubeconfig", str(own.kubeconfig),
             "--kubectl", str(own.bin_dir / "kubectl"), "--helm", str(own.bin_dir / "helm"), "--node", node.name,
             "--image", operator_image, "--engine-image", fake_engine_image, "--toleration", rn.REAL_NODE_LABEL,
             "--timeout", "300"],
            capture_output=True, text=True, timeout=700, env=env, check=False)
        assert proc.returncode == 0, f"{proc.stdout[-4000:]}\n{proc.stderr[-3000:]}"
        name = yaml.safe_load(KIMI.read_text())["metadata"]["name"]
        # Ready comes first; the start-up log is read back (status.observed) by a pass after it
        deadline = time.monotonic() + 60
        while True:
            status = own.kubectl_json("-n", "ctxfit-demo", "get", "inferenceserver", name)["status"]
            if "kvCacheBytes" in (status.get("observed") or {}) or time.monotonic() > deadline:
                break
            time.sleep(1)
        assert status["phase"] == "Ready" and status["contextLength"] == 131072
        assert "kvCacheBytes" in (status.get("observed") or {}), status
        plan = json.loads(subprocess.run([sys.executable, "-m", "ctxfit.cli", "plan", "-f", str(KIMI), "-o", "json"],
                                         capture_output=True, text=True, check=True, env=env).stdout)
        # the log says "Available KV cache memory: 12.56 GiB": two decimals
        assert abs(status["observed"]["kvCacheBytes"] - (plan["kvPoolBytes"] - GIB // 2)) <= 0.005 * GIB
        pods = own.kubectl_json("-n", "ctxfit-demo", "get", "pods", "-l", f"ctxfit.io/server={name}")["items"]
        running = [p for p in pods if p["status"].get("phase") == "Running"]
        assert running and running[0]["spec"]["nodeName"] == node.name
        assert running[0]["status"]["initContainerStatuses"][0]["state"]["terminated"]["exitCode"] == 0
        labels = own.kubectl_json("get", "node", node.name)["metadata"]["labels"]
        assert labels["nvidia.com/gpu.product"] == "NVIDIA-RTX-PRO-6000-Blackwell-Server-Edition"
        assert "phase Ready" in proc.stdout
    finally:
        own.stop()
