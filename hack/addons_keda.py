"""Add-on: the real KEDA operator (github.com/kedacore/keda/v2, ``cmd/operator``) on the local control plane.

hack/keda-bins.sh (called by hack/k8s-bins.sh) builds ``keda-operator`` and keeps the module's CRDs in the
binary cache (``keda/crd``). ``start_keda`` installs the CRDs, runs the operator as one more harness
process (stopped with the others by ``Cluster.stop``, or alone by ``stop_keda``; log in
``logs/keda-operator.log``, JSON lines) against the harness's admin kubeconfig, and waits until its
ScaledObject controller runs. It then reconciles ScaledObjects like on a cluster: validates the triggers
(a prometheus trigger queries its ``serverAddress``), creates the HPA ``keda-hpa-<name>`` with the
ScaledObject's min/max replicas, sets the ``Ready``/``Active`` conditions, and its scale loop polls the
triggers every ``pollingInterval`` (and scales a ``minReplicaCount: 0`` target between 0 and 1 itself).

Not run: KEDA's metrics apiserver (``v1beta1.external.metrics.k8s.io``) and admission webhooks. So the HPA
exists with the right bounds (kube-controller-manager's HPA controller enforces min/max) but reports
``FailedGetExternalMetric``: it does not scale on the trigger values. What KEDA read from Prometheus is
visible in its own metrics, ``keda_scaler_metrics_value`` (``KedaOperator.scaler_metric``).

Running outside a cluster (read from ``cmd/operator/main.go`` and ``pkg/util/env_resolver.go`` at
v2.20.2):

- ``WATCH_NAMESPACE`` must be set (empty = all namespaces); ``POD_NAMESPACE`` (leader election, default
  ``keda``) and ``KEDA_CLUSTER_OBJECT_NAMESPACE`` (where its Secret informer looks; otherwise read from the
  in-pod service-account file) are set to ``keda``, a namespace created here;
- every listener moves to 127.0.0.1 with a free port: ``--metrics-bind-address`` (Prometheus metrics),
  ``--health-probe-bind-address`` (``/healthz``, ``/readyz``), ``--metrics-service-bind-address`` (the
  gRPC server the metrics apiserver would call);
- the gRPC server loads ``ca.crt``, ``tls.crt``, ``tls.key`` from ``--cert-dir`` even without cert rotation
  (``pkg/metricsservice/utils/tls.go``): the harness CA and ``pki/admin.crt``/``admin.key`` (SAN 127.0.0.1)
  are copied there; ``--enable-cert-rotation=false`` (its default), so it patches no webhook or APIService;
- ``--leader-elect=false``; ``--ca-dir`` points at the cert dir (the default ``/custom/ca`` does not exist);
- the webhook server (port 9443 in main.go) is never started: the operator registers no webhook.
"""

from __future__ import annotations

import json
import shutil
import urllib.error
import urllib.request

from addons_proc import stop_component
from ctxfit_cluster import Cluster, HarnessError, free_ports, log, wait_until

KEDA_BINARY = "keda-operator"
KEDA_NAMESPACE = "keda"
SCALEDOBJECT_CRD = "scaledobjects.keda.sh"
SCALEDOBJECTS = ("keda.sh", "v1alpha1", "scaledobjects")  # group, version, plural (CustomObjectsApi)


def keda_available(cluster: Cluster) -> bool:
    """The operator binary and its CRDs are in the binary cache (hack/keda-bins.sh ran)."""
    crd = cluster.bin_dir / "keda" / "crd" / "keda.sh_scaledobjects.yaml"
    return (cluster.bin_dir / KEDA_BINARY).exists() and crd.exists()


def hpa_name(scaled_object: str) -> str:
    """The HPA KEDA creates for a ScaledObject without ``advanced.horizontalPodAutoscalerConfig.name``
    (``getHPAName`` in KEDA's ``controllers/keda/hpa.go``)."""
    return f"keda-hpa-{scaled_object}"


class KedaOperator:
    """The running operator: ``metrics_url``, ``health_url``, ``log_path``; ``scaler_metric`` reads what its
    scale loop last got from a trigger."""

    def __init__(self, cluster: Cluster, metrics_port: int, health_port: int, grpc_port: int) -> None:
        self.cluster = cluster
        self.metrics_url = f"http://127.0.0.1:{metrics_port}/metrics"
        self.health_url = f"http://127.0.0.1:{health_port}"
        self.grpc_address = f"127.0.0.1:{grpc_port}"
        self.log_path = cluster.logs_dir / f"{KEDA_BINARY}.log"

    def log_records(self) -> list[dict[str, object]]:
        """The operator's JSON log lines so far (non-JSON lines, e.g. klog's, are skipped)."""
        out = []
        for line in self.log_path.read_text(errors="replace").splitlines():
            if line.startswith("{"):
                try:
                    out.append(json.loads(line))
                except json.JSONDecodeError:
                    continue
        return out

    def scaledobject_controller_running(self) -> bool:
        """controller-runtime logged ``Starting workers`` for the ``scaledobject`` controller."""
        return any(r.get("msg") == "Starting workers" and r.get("controller") == "scaledobject"
                   for r in self.log_records())

    def scaler_metric(self, namespace: str, scaled_object: str, trigger_index: int = 0) -> float | None:
        """``keda_scaler_metrics_value`` for one trigger of a ScaledObject (KEDA's
        ``pkg/metricscollector/prommetrics.go``: "the current value for each scaler's metric that would be used
        by the HPA"), as last recorded by the operator's scale loop; None if not recorded yet."""
        with urllib.request.urlopen(self.metrics_url, timeout=5) as r:
            text = r.read().decode()
        from prometheus_client.parser import text_string_to_metric_families

        for family in text_string_to_metric_families(text):
            if family.name != "keda_scaler_metrics_value":
                continue
            for sample in family.samples:
                labels = sample.labels
                if (labels.get("namespace") == namespace and labels.get("scaledObject") == scaled_object
                        and labels.get("triggerIndex") == str(trigger_index) and labels.get("type") == "scaledobject"):
                    return float(sample.value)
        return None


def _install_crds(cluster: Cluster) -> None:
    crds = sorted((cluster.bin_dir / "keda" / "crd").glob("*.yaml"))
    cluster.kubectl("apply", "--server-side", "--force-conflicts", *[arg for c in crds for arg in ("-f", str(c))])
    names = []
    for c in crds:  # file names are <group>_<plural>.yaml (controller-gen)
        group, plural = c.stem.split("_", 1)
        names.append(f"{plural}.{group}")
    cluster.wait_established(*names, timeout=60)


def start_keda(cluster: Cluster, timeout: float = 120) -> KedaOperator:
    """Install KEDA's CRDs, start the operator against the harness, wait for its ScaledObject controller.

    Raises:
        HarnessError: binary/CRDs missing (run hack/k8s-bins.sh), or the operator exited or was not
            ready within ``timeout`` seconds (the log tail is in the message).
    """
    if not keda_available(cluster):
        raise HarnessError(f"{cluster.bin_dir / KEDA_BINARY} missing; run hack/k8s-bins.sh")
    _install_crds(cluster)
    if cluster.kubectl_proc("get", "namespace", KEDA_NAMESPACE).returncode != 0:
        cluster.kubectl("create", "namespace", KEDA_NAMESPACE)

    metrics_port, health_port, grpc_port = free_ports(3)
    cert_dir = cluster.work_dir / "keda-certs"
    cert_dir.mkdir(parents=True, exist_ok=True)
    for src, dst in (("ca.crt", "ca.crt"), ("admin.crt", "tls.crt"), ("admin.key", "tls.key")):
        shutil.copyfile(cluster.pki / src, cert_dir / dst)
    env = {"KUBECONFIG": str(cluster.kubeconfig), "WATCH_NAMESPACE": "", "POD_NAMESPACE": KEDA_NAMESPACE,
           "KEDA_CLUSTER_OBJECT_NAMESPACE": KEDA_NAMESPACE}
    args = [
        "--leader-elect=false",
        f"--metrics-bind-address=127.0.0.1:{metrics_port}",
        f"--health-probe-bind-address=127.0.0.1:{health_port}",
        f"--metrics-service-bind-address=127.0.0.1:{grpc_port}",
        f"--cert-dir={cert_dir}",
        f"--ca-dir={cert_dir}",
        "--enable-cert-rotation=false",
        "--kube-api-qps=100",
        "--kube-api-burst=200",
        "--zap-encoder=json",
        "--zap-time-encoding=iso8601",
        "--zap-log-level=info",
    ]
    cluster.state.setdefault("ports", {}).update(
        {"keda_metrics": metrics_port, "keda_health": health_port, "keda_grpc": grpc_port})
    cluster._spawn(KEDA_BINARY, args, env=env)
    keda = KedaOperator(cluster, metrics_port, health_port, grpc_port)

    def ready() -> bool:
        cluster._check_alive(KEDA_BINARY)
        try:
            with urllib.request.urlopen(f"{keda.health_url}/readyz", timeout=2) as r:
                if r.status != 200:
                    return False
        except (urllib.error.URLError, OSError):
            return False
        return keda.scaledobject_controller_running()

    try:
        wait_until(ready, timeout, "KEDA operator /readyz and its ScaledObject controller")
    except HarnessError:
        tail = keda.log_path.read_text(errors="replace")[-3000:] if keda.log_path.exists() else ""
        stop_keda(cluster)
        raise HarnessError(f"KEDA operator not ready within {timeout:.0f}s; log tail:\n{tail}") from None
    log(f"KEDA operator up (metrics {keda.metrics_url})")
    return keda


def stop_keda(cluster: Cluster, grace: float = 8.0) -> None:
    """Stop the operator (SIGTERM, then SIGKILL after ``grace`` s), leaving the cluster and KEDA's CRDs."""
    stop_component(cluster, KEDA_BINARY, grace)
    for key in ("keda_metrics", "keda_health", "keda_grpc"):
        cluster.state.get("ports", {}).pop(key, None)
