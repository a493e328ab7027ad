"""The operator image, built from the Dockerfile as `make image` builds it (hack/image.sh; podman here, on
hack/base-image.sh's offline Debian base) and run as a container:

1. its config: numeric non-root USER, the operator as ENTRYPOINT, the chart's ports exposed;
2. inside it: uid/gid 65532, no compiler, ctxfit installed as a wheel in /opt/ctxfit (not a source tree);
   the `ctxfit` CLI plans manifests/kimi-128k.yaml and rejects a missing file with one line and exit 2;
3. `python -m ctxfit.controller` (the ENTRYPOINT, no command given) with the chart's container settings
   (read-only root, /tmp a tmpfs, no capabilities, no privilege escalation) and nothing but in-cluster
   config: KUBERNETES_SERVICE_HOST/PORT and a ServiceAccount token, CA and namespace mounted where the
   kubelet mounts them, for the chart's own ServiceAccount (`helm install`, replicaCount=0: only the
   container runs the operator). It serves /healthz and /metrics, reconciles an InferenceServer to Ready
   on the kwok GPU nodes, and stops cleanly on SIGTERM (`stop`).
The container shares the host's network (the harness apiserver listens on 127.0.0.1).
"""

from __future__ import annotations

import json
import re
import subprocess
import urllib.request
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import ctxfit_cluster as cc
import images
import pytest
import yaml

from .chart_kit import CHART, KIMI, container_env, helm

SA_DIR = "/var/run/secrets/kubernetes.io/serviceaccount"
# the chart's securityContext (values.yaml securityContext/podSecurityContext) as engine options
RESTRICTED = ("--read-only", "--tmpfs", "/tmp:rw,mode=1777", "--cap-drop", "ALL",
              "--security-opt", "no-new-privileges", "--user", "65532:65532")


def test_image_config(container_engine: images.Engine, operator_image: str) -> None:
    config = container_engine.inspect(operator_image)
    assert config["User"] == "65532:65532"  # numeric: the kubelet's runAsNonRoot check needs a number
    assert config["Entrypoint"] == ["python", "-m", "ctxfit.controller"]
    env = dict(item.split("=", 1) for item in config["Env"])
    assert env["CTXFIT_HEALTH_PORT"] == "8080" and env["CTXFIT_METRICS_PORT"] == "9090"
    assert env["PATH"].startswith("/opt/ctxfit/bin:")
    assert {"8080/tcp", "9090/tcp"} <= set(config.get("ExposedPorts") or {})


def test_image_is_non_root_without_build_tools(container_engine: images.Engine,
                                               operator_image: str) -> None:
    script = ("id -u; id -g; id -un; "
              "for t in gcc cc g++ make; do command -v $t && echo HAS-$t; done; "
              "test -e /src && echo HAS-src; "
              "python -c 'import ctxfit, sys; print(ctxfit.__file__); print(sys.prefix)'")
    out = container_engine.run(operator_image, "-c", script, entrypoint="sh").stdout.split()
    assert out[:3] == ["65532", "65532", "ctxfit"], out
    assert not [w for w in out if w.startswith("HAS-")], out
    assert out[3].startswith("/opt/ctxfit/lib/python3.") and "site-packages/ctxfit/" in out[3], out
    assert out[4] == "/opt/ctxfit", out


def test_cli_in_the_image(container_engine: images.Engine, operator_image: str) -> None:
    mount = ("-v", f"{KIMI.parent}:/manifests:ro", *RESTRICTED)
    proc = container_engine.run(operator_image, "plan", "-f", f"/manifests/{KIMI.name}", "-o", "json",
                                options=mount, entrypoint="ctxfit")
    plan = json.loads(proc.stdout)
    assert plan["fits"] is True and plan["contextLength"] == 131072, plan
    assert plan["engineCommand"] == ["vllm", "serve"]
    bad = container_engine.run(operator_image, "plan", "-f", "/manifests/missing.yaml", options=mount,
                               entrypoint="ctxfit", check=False)
    assert bad.returncode == 2, (bad.returncode, bad.stdout, bad.stderr)
    assert len(bad.stderr.strip().splitlines()) == 1 and "missing.yaml" in bad.stderr, bad.stderr


def _get(url: str) -> tuple[int, str]:
    with urllib.request.urlopen(url, timeout=3) as response:
        return response.status, response.read().decode()


@pytest.fixture
def chart_release(cluster: cc.Cluster) -> Iterator[dict[str, Any]]:
    """The chart installed with no operator replica: its ServiceAccount, RBAC and CRDs, for the container."""
    suffix = uuid.uuid4().hex[:6]
    release, ns = f"ctxfit-img-{suffix}", f"ctxfit-img-{suffix}"
    args = ["--namespace", ns, "--set", "replicaCount=0"]
    rendered = [o for o in yaml.safe_load_all(helm(cluster, "template", release, str(CHART), *args).stdout) if o]
    helm(cluster, "install", release, str(CHART), *args, "--create-namespace", "--take-ownership",
         "--wait", "--timeout", "90s")
    deployment = next(o for o in rendered if o["kind"] == "Deployment")
    try:
        yield {"release": release, "namespace": ns, "deployment": deployment}
    finally:
        helm(cluster, "uninstall", release, "--namespace", ns, "--wait", check=False)
        cluster.kubectl("delete", "namespace", ns, "--wait=false", "--ignore-not-found", check=False)


@pytest.mark.timeout(900)
def test_controller_in_the_image_runs_on_in_cluster_config(
        cluster: cc.Cluster, container_engine: images.Engine, operator_image: str,
        chart_release: dict[str, Any], namespace: str, tmp_path: Path) -> None:
    pod = chart_release["deployment"]["spec"]["template"]["spec"]
    release_ns, sa = chart_release["namespace"], pod["serviceAccountName"]
    # what the kubelet mounts: a bound token of the pod's ServiceAccount, the cluster CA, the namespace
    secrets = tmp_path / "serviceaccount"
    secrets.mkdir()
    token = cluster.kubectl("-n", release_ns, "create", "token", sa, "--duration=1h").strip()
    (secrets / "token").write_text(token)
    (secrets / "ca.crt").write_text((cluster.work_dir / "pki" / "ca.crt").read_text())
    (secrets / "namespace").write_text(release_ns)
    for path in [secrets, *secrets.iterdir()]:
        path.chmod(0o755 if path.is_dir() else 0o644)

    health, metrics = cc.free_ports(2)
    container = pod["containers"][0]
    pod_name = f"img-{uuid.uuid4().hex[:6]}"  # the container's host name is its id, not this
    env = container_env(container, pod_name, release_ns)
    env.update(CTXFIT_HEALTH_PORT=str(health), CTXFIT_METRICS_PORT=str(metrics), KUBERNETES_SERVICE_HOST="127.0.0.1",
               KUBERNETES_SERVICE_PORT=str(cluster.state["ports"]["apiserver"]))
    name = f"ctxfit-operator-{uuid.uuid4().hex[:6]}"
    options = ["--name", name, "--network", "host", *RESTRICTED, "-v", f"{secrets}:{SA_DIR}:ro"]
    for key, value in env.items():
        options += ["-e", f"{key}={value}"]
    # the image's own ENTRYPOINT, no command: what the kubelet runs when only `image` is set
    started = container_engine.cmd("run", "-d", *options, operator_image)
    try:
        def log() -> str:
            proc = container_engine.cmd("logs", name, check=False)
            return (proc.stdout + proc.stderr)[-5000:]

        def alive() -> bool:
            state = container_engine.cmd("inspect", "--format", "{{.State.Running}}", name, check=False).stdout
            if state.strip() != "true":
                pytest.fail(f"the operator container stopped:\n{log()}")
            return True

        def answers() -> tuple[tuple[int, str], tuple[int, str]] | None:
            alive()
            try:
                return _get(f"http://127.0.0.1:{health}/healthz"), _get(f"http://127.0.0.1:{metrics}/metrics")
            except OSError:
                return None

        (h_status, _), (m_status, text) = cc.wait_until(answers, 60, "the operator's /healthz and /metrics")
        assert h_status == 200 and m_status == 200
        assert "ctxfit_reconcile_duration_seconds" in text
        assert "KUBECONFIG" not in container_engine.cmd("exec", name, "env").stdout  # in-cluster config only

        cluster.kubectl("-n", namespace, "apply", "-f", str(KIMI))
        server = yaml.safe_load(KIMI.read_text())["metadata"]["name"]

        def ready() -> dict[str, Any] | None:
            alive()
            obj: dict[str, Any] = cluster.kubectl_json("-n", namespace, "get", "inferenceserver", server)
            return obj if obj.get("status", {}).get("phase") == "Ready" else None

        try:
            obj = cc.wait_until(ready, 180, f"InferenceServer {namespace}/{server} Ready")
        except cc.HarnessError:
            status = cluster.kubectl("-n", namespace, "get", "inferenceserver", server, "-o", "yaml", check=False)
            pytest.fail(f"not Ready:\n{status}\noperator log:\n{log()}")
        assert obj["status"]["contextLength"] == 131072
        assert "Forbidden" not in log()
        instances = {e.get("reportingInstance", "") for e in cluster.kubectl_json("-n", namespace, "get", "events")[
            "items"] if e.get("reportingComponent") == "ctxfit-operator"}
        assert instances and all(re.fullmatch(rf"{pod_name}-\d+", i) for i in instances), instances  # POD_NAME
        cluster.kubectl("-n", namespace, "delete", "-f", str(KIMI), "--wait=true", "--timeout=60s")

        stop = container_engine.cmd("stop", "-t", "30", name, check=False)
        assert stop.returncode == 0, stop.stderr
        code = container_engine.cmd("inspect", "--format", "{{.State.ExitCode}}", name).stdout.strip()
        assert code == "0", f"exit code {code} after SIGTERM:\n{log()}"
    finally:
        container_engine.cmd("rm", "-f", name, check=False)
    assert started.stdout.strip()


def test_make_image_is_the_same_script(container_engine: images.Engine, operator_image: str) -> None:
    """`make image` runs hack/image.sh with the same default tag; on an unchanged tree every layer is reused,
    so the image is the same one."""
    before = container_engine.image_id(operator_image)
    make = subprocess.run(["make", "-s", "image"], cwd=images.REPO_DIR, capture_output=True, text=True,
                          timeout=900, env=container_engine.env, check=False)
    assert make.returncode == 0, make.stderr[-3000:]
    assert make.stdout.strip().splitlines()[-1] == operator_image
    assert container_engine.image_id(operator_image) == before
