"""Add-on: the real LeaderWorkerSet controller (sigs.k8s.io/lws) on the local control plane.

hack/lws-bins.sh (called by hack/k8s-bins.sh) builds ``lws-controller`` and keeps the module's CRD and
webhook manifests in the binary cache (``lws/crd``, ``lws/webhook``). ``start_lws`` installs the CRD,
runs the controller as one more harness process (stopped with the others by ``Cluster.stop``) and
registers its webhooks. The webhooks are needed: LWS's pod webhook sets the group/worker-index labels and
the ``LWS_*`` env vars its pod controller relies on, and its LeaderWorkerSet webhook applies defaults.

Serving certificate: LWS normally generates one itself (``internalCertManagement``, cert-controller,
behind a Service); here internal cert management is off and the controller serves the harness's own
certificate (``pki/admin.crt``: signed by the harness CA, SAN 127.0.0.1, as kube-apiserver and kwok
use it) on 127.0.0.1; the webhook configurations call ``https://127.0.0.1:PORT/PATH`` with the CA as
``caBundle``. The pod webhooks get the ``objectSelector`` of LWS's kustomize patches
(``config/webhook/{mutating,validating}-patch.yaml``: only pods labelled ``leaderworkerset.sigs.k8s.io/name``),
so other pods (every single-node server) never pass through it.
"""

from __future__ import annotations

import base64
import shutil
from typing import Any

import yaml
from ctxfit_cluster import Cluster, HarnessError, free_ports, log, port_listening, wait_until

LWS_BINARY = "lws-controller"
LWS_CRD = "leaderworkersets.leaderworkerset.x-k8s.io"
POD_WEBHOOK_SELECTOR = {"matchExpressions": [{"key": "leaderworkerset.sigs.k8s.io/name", "operator": "Exists"}]}


def lws_available(cluster: Cluster) -> bool:
    """The controller binary and its manifests are in the binary cache (hack/lws-bins.sh ran)."""
    return (cluster.bin_dir / LWS_BINARY).exists() and (cluster.bin_dir / "lws" / "webhook" / "manifests.yaml").exists()


def _webhook_configurations(cluster: Cluster, port: int) -> list[dict[str, Any]]:
    docs = [d for d in yaml.safe_load_all((cluster.bin_dir / "lws" / "webhook" / "manifests.yaml").read_text()) if d]
    ca_bundle = base64.b64encode((cluster.pki / "ca.crt").read_bytes()).decode()
    for doc in docs:
        doc["metadata"]["name"] = f"lws-{doc['metadata']['name']}"
        for hook in doc["webhooks"]:
            path = hook["clientConfig"]["service"]["path"]
            hook["clientConfig"] = {"url": f"https://127.0.0.1:{port}{path}", "caBundle": ca_bundle}
            if hook["rules"][0]["resources"] == ["pods"]:
                hook["objectSelector"] = POD_WEBHOOK_SELECTOR
            hook["timeoutSeconds"] = 10
    return docs


def start_lws(cluster: Cluster, timeout: float = 60) -> None:
    """Install the LWS CRD, start the controller with webhooks on 127.0.0.1, register the webhooks.

    Raises:
        HarnessError: binaries missing (run hack/k8s-bins.sh) or the controller did not come up.
    """
    if not lws_available(cluster):
        raise HarnessError(f"{cluster.bin_dir / LWS_BINARY} missing; run hack/k8s-bins.sh")
    crds = sorted((cluster.bin_dir / "lws" / "crd").glob("*.yaml"))
    cluster.kubectl("apply", "--server-side", *[arg for c in crds for arg in ("-f", str(c))])
    wait_until(lambda: cluster.kubectl_proc("wait", "--for=condition=Established", "--timeout=5s",
                                            f"crd/{LWS_CRD}").returncode == 0, 30, f"crd/{LWS_CRD} Established")

    webhook_port, metrics_port, health_port = free_ports(3)
    cert_dir = cluster.work_dir / "lws-certs"
    cert_dir.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(cluster.pki / "admin.crt", cert_dir / "tls.crt")
    shutil.copyfile(cluster.pki / "admin.key", cert_dir / "tls.key")
    config = {
        "apiVersion": "config.lws.x-k8s.io/v1alpha1",
        "kind": "Configuration",
        "leaderElection": {"leaderElect": False},
        "internalCertManagement": {"enable": False},
        "webhook": {"port": webhook_port, "host": "127.0.0.1", "certDir": str(cert_dir)},
        "metrics": {"bindAddress": f"127.0.0.1:{metrics_port}"},
        "health": {"healthProbeBindAddress": f"127.0.0.1:{health_port}"},
        "clientConnection": {"qps": 100, "burst": 200},
    }
    config_file = cluster.work_dir / "lws-config.yaml"
    config_file.write_text(yaml.safe_dump(config, sort_keys=False))
    cluster.state.setdefault("ports", {}).update({"lws_webhook": webhook_port, "lws_health": health_port})
    cluster._spawn(LWS_BINARY, [f"--config={config_file}", f"--kubeconfig={cluster.kubeconfig}"])

    def serving() -> bool:
        cluster._check_alive(LWS_BINARY)
        return port_listening(webhook_port) and port_listening(health_port)

    wait_until(serving, timeout, "LWS controller webhook and health ports")
    cluster.apply(_webhook_configurations(cluster, webhook_port))
    log(f"LWS controller up (webhooks on 127.0.0.1:{webhook_port})")
