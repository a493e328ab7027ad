"""The control-plane components and their command lines: etcd, kube-apiserver, kube-controller-manager,
kube-scheduler (kwok's is in cluster_kwok.py).

Everything listens on 127.0.0.1 only, on the free ports chosen at start (``ports``: etcd, etcd_peer,
apiserver, controller_manager, scheduler, kwok); no leader election (one replica each); etcd without
fsync (a throwaway test store). The apiserver serves and authenticates with the harness PKI
(cluster_pki.py); the controller-manager signs with its CA and provisions hostPath volumes
(cluster_storage.CONTROLLER_MANAGER_FLAGS).
"""

from __future__ import annotations

from pathlib import Path

import cluster_storage

# The processes, in start order; they are stopped all together (SIGTERM, then SIGKILL).
COMPONENTS = ("etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler", "kwok")
SERVICE_CIDR = "10.96.0.0/16"


def etcd_args(ports: dict[str, int], data_dir: Path) -> list[str]:
    """One etcd member, data in data_dir/etcd, client and peer URLs on 127.0.0.1."""
    return [
        "--name=node0",
        f"--data-dir={data_dir / 'etcd'}",
        f"--listen-client-urls=http://127.0.0.1:{ports['etcd']}",
        f"--advertise-client-urls=http://127.0.0.1:{ports['etcd']}",
        f"--listen-peer-urls=http://127.0.0.1:{ports['etcd_peer']}",
        f"--initial-advertise-peer-urls=http://127.0.0.1:{ports['etcd_peer']}",
        f"--initial-cluster=node0=http://127.0.0.1:{ports['etcd_peer']}",
        "--unsafe-no-fsync=true",
        "--auto-compaction-retention=1",
        "--quota-backend-bytes=8589934592",
        "--log-level=warn",
    ]


def apiserver_args(ports: dict[str, int], pki: Path) -> list[str]:
    """kube-apiserver on etcd, serving pki/admin.crt, clients by pki/ca.crt, RBAC, service-account
    tokens signed by pki/sa.key; kubelet calls (kwok) with the admin certificate."""
    return [
        f"--etcd-servers=http://127.0.0.1:{ports['etcd']}",
        "--bind-address=127.0.0.1",
        "--advertise-address=127.0.0.1",
        f"--secure-port={ports['apiserver']}",
        f"--cert-dir={pki}",
        f"--tls-cert-file={pki / 'admin.crt'}",
        f"--tls-private-key-file={pki / 'admin.key'}",
        f"--client-ca-file={pki / 'ca.crt'}",
        "--service-account-issuer=https://kubernetes.default.svc.cluster.local",
        f"--service-account-key-file={pki / 'sa.pub'}",
        f"--service-account-signing-key-file={pki / 'sa.key'}",
        f"--service-cluster-ip-range={SERVICE_CIDR}",
        "--authorization-mode=RBAC",
        "--allow-privileged=true",
        "--endpoint-reconciler-type=none",
        "--enable-priority-and-fairness=false",
        "--kubelet-preferred-address-types=InternalIP",
        f"--proxy-client-cert-file={pki / 'admin.crt'}",
        f"--proxy-client-key-file={pki / 'admin.key'}",
        f"--requestheader-client-ca-file={pki / 'ca.crt'}",
        "--requestheader-allowed-names=",
        "--requestheader-username-headers=X-Remote-User",
        "--requestheader-group-headers=X-Remote-Group",
        "--requestheader-extra-headers-prefix=X-Remote-Extra-",
        f"--kubelet-client-certificate={pki / 'admin.crt'}",
        f"--kubelet-client-key={pki / 'admin.key'}",
        "--profiling=false",
        "--v=1",
    ]


def _auth_kubeconfigs(kubeconfig: Path) -> list[str]:
    """Who the component is (the admin kubeconfig) and how it checks its own callers (the same)."""
    return [
        f"--kubeconfig={kubeconfig}",
        f"--authentication-kubeconfig={kubeconfig}",
        f"--authorization-kubeconfig={kubeconfig}",
    ]


def controller_manager_args(ports: dict[str, int], kubeconfig: Path, data_dir: Path, pki: Path) -> list[str]:
    """kube-controller-manager as the admin: signs with the harness CA, serves its own certificate from
    data_dir/kcm-certs, plus the storage flags of cluster_storage."""
    return [
        *_auth_kubeconfigs(kubeconfig),
        "--leader-elect=false",
        "--bind-address=127.0.0.1",
        f"--secure-port={ports['controller_manager']}",
        f"--cert-dir={data_dir / 'kcm-certs'}",
        "--authorization-always-allow-paths=/healthz,/readyz,/livez,/metrics",
        f"--root-ca-file={pki / 'ca.crt'}",
        f"--service-account-private-key-file={pki / 'sa.key'}",
        f"--cluster-signing-cert-file={pki / 'ca.crt'}",
        f"--cluster-signing-key-file={pki / 'ca.key'}",
        f"--service-cluster-ip-range={SERVICE_CIDR}",
        "--use-service-account-credentials=false",
        "--node-monitor-period=5s",
        "--node-monitor-grace-period=3m20s",
        "--kube-api-qps=500",
        "--kube-api-burst=1000",
        "--concurrent-gc-syncs=10",
        # HPAs (KEDA's keda-hpa-*) are reconciled every 15 s by default; 2 s keeps autoscaling e2e short
        "--horizontal-pod-autoscaler-sync-period=2s",
        *cluster_storage.CONTROLLER_MANAGER_FLAGS,
        "--v=1",
    ]


def scheduler_args(ports: dict[str, int], kubeconfig: Path, data_dir: Path) -> list[str]:
    """kube-scheduler as the admin, its own serving certificate in data_dir/scheduler-certs."""
    return [
        *_auth_kubeconfigs(kubeconfig),
        "--leader-elect=false",
        "--bind-address=127.0.0.1",
        f"--secure-port={ports['scheduler']}",
        f"--cert-dir={data_dir / 'scheduler-certs'}",
        "--authorization-always-allow-paths=/healthz,/readyz,/livez,/metrics",
        "--kube-api-qps=500",
        "--kube-api-burst=1000",
        "--v=1",
    ]
