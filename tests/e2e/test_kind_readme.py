"""README's "Try it in kind" path, run as a user runs it: the commands of its first code block, in order, through
bash (`make kind-demo`, `kubectl get infsrv -A` with the kubeconfig it names, `make kind-delete`), with a kubectl of
the cluster's version first on PATH (the harness's) and kind and helm wherever the machine has them (here and in CI:
nowhere, so hack/kind-demo.sh builds them into the binary cache, as for a user without them).

The one change: the cluster's name. README's is `ctxfit`; here it is unique per run (KIND_CLUSTER, which
hack/kind-demo.sh reads, and the name in README's kubeconfig path), so this never touches a user's cluster or
another run's.

On this machine kind runs with podman (KIND_EXPERIMENTAL_PROVIDER=podman, which hack/kind-demo.sh sets) and, as
Docker Hub is out of reach, on the node image `make kind-node-image` builds offline (hack/kind-node-image.sh); where
docker.io/kindest/node can be pulled, the same commands use kind's own. The server must be Ready at 131072 tokens
on the kind node, whose kubelet ran its probes, and `kind delete cluster` must leave no node container behind.

Cold (nothing cached: kind, kubeadm, CoreDNS, etcd, crictl, local-path-provisioner from the Go module proxy, the
Debian base by debootstrap, the node image) ~25 min on 2 shared cores; warm ~4 min (kind create ~1.5 min, the demo).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import uuid
from pathlib import Path

import ctxfit_cluster as cc
import images
import pytest
import yaml

from .chart_kit import KIMI

README = images.REPO_DIR / "README.md"


def readme_kind_commands() -> list[str]:
    """The command lines of the first ```bash block after README's "Try it in kind" heading (comments dropped)."""
    text = README.read_text()
    start = text.index("### Try it in kind")
    block = re.search(r"```bash\n(.*?)```", text[start:], re.S)
    assert block is not None, "README's kind section has no bash block"
    lines = [line.split("#", 1)[0].strip() for line in block.group(1).splitlines()]
    return [line for line in lines if line]


def test_readme_kind_block_is_the_demo() -> None:
    """The block this test runs is the one README shows: make kind-demo, kubectl on its kubeconfig, make kind-delete."""
    cmds = readme_kind_commands()
    assert cmds[0] == "make kind-demo"
    assert any(c.startswith("KUBECONFIG=~/.cache/ctxfit/kind/ctxfit/kubeconfig kubectl get infsrv") for c in cmds)
    assert cmds[-1] == "make kind-delete"


@pytest.mark.timeout(3600)
def test_readme_kind_path_reaches_ready(container_engine: images.Engine, tmp_path: Path) -> None:
    bin_dir = cc.find_bin_dir(components=("kubernetes", "helm"))
    if container_engine.name == "buildah":
        pytest.fail("kind needs docker or podman")
    name = f"ctxfit-e2e-{uuid.uuid4().hex[:6]}"
    kubeconfig = Path.home() / ".cache" / "ctxfit" / "kind" / name / "kubeconfig"
    user_bin = tmp_path / "bin"  # the user's PATH: a kubectl (the cluster's version), no kind, no helm
    user_bin.mkdir()
    (user_bin / "kubectl").symlink_to(bin_dir / "kubectl")
    env = {**container_engine.env, "KIND_CLUSTER": name, "CTXFIT_BIN_DIR": str(bin_dir),
           "PATH": os.pathsep.join([str(user_bin), container_engine.env.get("PATH", os.defpath)])}
    env.pop("KUBECONFIG", None)  # the harness's; README's commands name their own
    outputs: list[str] = []
    try:
        for cmd in readme_kind_commands():
            cmd = cmd.replace("/kind/ctxfit/", f"/kind/{name}/")
            proc = subprocess.run(["bash", "-c", cmd], cwd=images.REPO_DIR, env=env, capture_output=True, text=True,
                                  timeout=3000, check=False)
            assert proc.returncode == 0, \
                f"`{cmd}` exited {proc.returncode}:\n{proc.stdout[-5000:]}\n{proc.stderr[-5000:]}"
            outputs.append(proc.stdout)
            if cmd.startswith("make kind-demo"):
                check_server(name, kubeconfig, bin_dir / "kubectl", proc.stdout)
        listing = next(out for cmd, out in zip(readme_kind_commands(), outputs, strict=True) if "get infsrv" in cmd)
        server = yaml.safe_load(KIMI.read_text())["metadata"]["name"]
        row = next(line.split() for line in listing.splitlines() if server in line)
        assert "Ready" in row and "131072" in row, listing
        left = container_engine.cmd("ps", "-a", "--filter", f"label=io.x-k8s.kind.cluster={name}", "-q").stdout
        assert left.strip() == "", f"kind delete cluster left containers: {left}"
    finally:
        if kubeconfig.parent.exists():  # the test failed before README's `make kind-delete`
            subprocess.run(["bash", str(images.HACK_DIR / "kind-demo.sh"), "--delete"], env=env, capture_output=True,
                           check=False, timeout=300)
        shutil.rmtree(kubeconfig.parent, ignore_errors=True)


def check_server(name: str, kubeconfig: Path, kubectl: Path, demo_out: str) -> None:
    """After `make kind-demo`: kimi-128k Ready at 131072 on the kind node, served by the kubelet there."""
    def get(*args: str) -> dict:
        out = subprocess.run([str(kubectl), "--kubeconfig", str(kubeconfig), *args, "-o", "json"],
                             capture_output=True, text=True, check=True, timeout=60).stdout
        return json.loads(out)

    assert "phase Ready" in demo_out, demo_out[-3000:]
    server_name = yaml.safe_load(KIMI.read_text())["metadata"]["name"]
    status = get("-n", "ctxfit-demo", "get", "inferenceserver", server_name)["status"]
    assert status["phase"] == "Ready" and status["contextLength"] == 131072, status
    node = get("get", "node", f"{name}-control-plane")
    assert node["status"]["nodeInfo"]["containerRuntimeVersion"].startswith("containerd://")
    assert node["metadata"]["labels"]["nvidia.com/gpu.product"] == "NVIDIA-RTX-PRO-6000-Blackwell-Server-Edition"
    pods = get("-n", "ctxfit-demo", "get", "pods", "-l", f"ctxfit.io/server={server_name}")["items"]
    running = [p for p in pods if p["status"].get("phase") == "Running"]
    assert running and running[0]["spec"]["nodeName"] == f"{name}-control-plane"
    assert running[0]["status"]["initContainerStatuses"][0]["state"]["terminated"]["exitCode"] == 0  # model-download
    assert all(c["ready"] for c in running[0]["status"]["containerStatuses"])
    operator = get("-n", "ctxfit-system", "get", "pods", "-l", "app.kubernetes.io/name=ctxfit")["items"]
    assert operator and operator[0]["status"]["phase"] == "Running"
